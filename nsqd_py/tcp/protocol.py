"""Compiled by mypyc: run `make install` after an edit (CONTRIBUTING.md, "Compiled modules").

Protocol V2: the command loop of one connection and every command's rules (nsqd's protocol_v2.go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..cluster.auth import AuthError, AuthServers, AuthState
from ..config.options import TOPOLOGY_EXPERIMENT
from ..core.consumer import STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED
from ..core.message import MSG_ID_LENGTH, int32_at
from ..go import jsonenc
from ..go.gocompat import go_quote
from ..runtime.version import NSQ_VERSION
from ..wire.names import is_valid_name
from . import broker_commands
from .client import FRAME_TYPE_ERROR, ClientV2, ConnectionLost
from .client_fields import COPIED
from .errors import ClientError, FatalClientError, client_text
from .identify import IdentifyData, go_dump, parse_identify

if TYPE_CHECKING:
    import ssl

    from ..cluster.context import ServerContext
    from ..config.options import Options
    from ..runtime.log import Logger

OK: Final = b"OK"
_MAX_UINT64: Final = (1 << 64) - 1


def parse_base10(raw: bytes) -> int | None:
    """nsqd's ByteToBase10: digits only (empty is 0), uint64 wrap-around, read back as int64."""
    if raw and not raw.isdigit():
        return None
    if not raw.isascii():
        return None
    value = int(raw) & _MAX_UINT64 if raw else 0
    return value - (1 << 64) if value >= 1 << 63 else value


def message_id(raw: bytes) -> bytes:
    if len(raw) != MSG_ID_LENGTH:
        raise FatalClientError("E_INVALID", "invalid message ID")
    return raw


class ProtocolV2Base:
    """Runs one client's command loop and checks every command as nsqd does; one instance per connection. What a
    command does to topics and channels is left to the subclass: `ProtocolV2` does it to the broker in this process,
    an I/O worker's `WorkerProtocolV2` forwards it to the broker process."""

    def __init__(self, opts: Options, logger: Logger, auth_servers: AuthServers | None,
                 tls_context: ssl.SSLContext | None, client: ClientV2) -> None:
        self.client = client
        self.opts = opts
        self.log = logger
        #: fixed at start-up: read once here rather than through the context on every command
        self.auth_servers = auth_servers
        self.tls_context = tls_context
        self._dispatch_pending = False
        #: the last topic a PUB named, as sent and as checked (`_publish_buffered`)
        self._pub_topic_raw = b""
        self._pub_topic = ""
        #: the commands, by their word: `execute` calls them (IDENTIFY first, before the TLS check)
        self._commands: dict[bytes, Callable[[list[bytes]], bytes | None]] = {
            b"FIN": self.fin,
            b"RDY": self.rdy,
            b"REQ": self.req,
            b"PUB": self.pub,
            b"MPUB": self.mpub,
            b"DPUB": self.dpub,
            b"NOP": self.nop,
            b"TOUCH": self.touch,
            b"SUB": self.sub,
            b"CLS": self.cls,
            b"AUTH": self.auth,
        }

    # ---- the loop -----------------------------------------------------------------------------

    def io_loop(self) -> None:
        client = self.client
        client.start()
        err: str | None = None
        try:
            while True:
                client.set_read_deadline()
                try:
                    client.await_input()
                    fin_ids = client.take_fin_ids() if self._may_finish() else []
                    if fin_ids:
                        if self._finish_run(fin_ids):
                            break
                    elif not self._publish_buffered():
                        response = self.execute(client.read_line().split(b" "))
                        if response is not None:
                            client.send_response(response)
                except ClientError as cerr:
                    if self._refused(cerr):
                        break
                except EOFError:
                    break
                except ConnectionLost as lost:
                    err = f"failed to read command - {lost}"
                    break
                if self._dispatch_pending and not client.has_buffered_line():
                    # FINs come in runs: refill the consumer once per run, not once per FIN. At RDY 1 the next
                    # message goes out with this loop turn's burst.
                    self._dispatch_pending = False
                    client.channel.dispatch()  # type: ignore[union-attr]
        finally:
            if err and not client.closed:
                self.log.error(f"client({client}) - {err}")
            self.log.info(f"PROTOCOL(V2): [{client}] exiting ioloop")
            client.finish_connection()

    def _refused(self, cerr: ClientError) -> bool:
        """Log and answer a command's error; whether the connection ends for it."""
        self.log.error(f"[{self.client}] - {cerr}")
        self.client.send_response(cerr.payload, FRAME_TYPE_ERROR)
        return cerr.fatal

    def _may_finish(self) -> bool:
        """Whether a FIN would pass the checks `execute` and `fin` make before they finish a message."""
        return self.client.state in (STATE_SUBSCRIBED, STATE_CLOSING) and \
            not (self.opts.tls_required and not self.client.tls)

    def _publish_buffered(self) -> bool:
        """A PUB whose line, size and body are all in the read buffer, checked and published as `pub` would, without
        the command parser; whether there was one. A PUB the parser must answer (a topic name that is not valid,
        among others: `ClientV2.buffered_pub`) is left to it."""
        client = self.client
        if self.opts.tls_required and not client.tls:
            return False
        found = client.buffered_pub(self.opts.max_msg_size)
        if found is None:
            return False
        raw, body, end = found
        if raw != self._pub_topic_raw:  # a publisher sends to one topic, mostly: its name is checked once
            name = raw.decode("latin-1")
            if not is_valid_name(name):
                return False
            self._pub_topic_raw = raw
            self._pub_topic = name
        client.seek(end)
        topic_name = self._pub_topic
        self._check_auth("PUB", topic_name, "")
        response = self._publish(topic_name, "PUB", [body])  # hook: ProtocolV2 / WorkerProtocolV2
        if response is not None:
            client.send_response(response)
        return True

    def _finish_run(self, msg_ids: list[bytes]) -> bool:
        """A run of FINs taken from the read buffer at once, as `fin` would finish each; whether the connection
        ends (a fatal error)."""
        for msg_id in msg_ids:
            try:
                self._finish(msg_id)
            except ClientError as cerr:
                if self._refused(cerr):
                    return True
        return False

    def execute(self, params: list[bytes]) -> bytes | None:
        name = params[0]
        if name == b"IDENTIFY":
            return self.identify(params)
        if self.opts.tls_required and not self.client.tls:
            raise FatalClientError("E_INVALID", f"cannot {client_text(name)} in current state (TLS required)")
        command = self._commands.get(name)
        if command is None:
            raise FatalClientError("E_INVALID", f"invalid command {client_text(name)}")
        return command(params)  # one of self._commands' methods, above

    # ---- body reading helpers -----------------------------------------------------------------

    def _read_len(self, code: str, what: str) -> int:
        try:
            return self.client.read_int32()
        except (EOFError, ConnectionLost):
            raise FatalClientError(code, what) from None

    def _read_body(self, n: int, code: str, what: str) -> bytes:
        try:
            return self.client.read_exactly(n)
        except (EOFError, ConnectionLost):
            raise FatalClientError(code, what) from None

    def _read_message_body(self, cmd: str) -> bytes:
        size = self._read_len("E_BAD_MESSAGE", f"{cmd} failed to read message body size")
        if size <= 0:
            raise FatalClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {size}")
        if size > self.opts.max_msg_size:
            raise FatalClientError("E_BAD_MESSAGE", f"{cmd} message too big {size} > {self.opts.max_msg_size}")
        return self._read_body(size, "E_BAD_MESSAGE", f"{cmd} failed to read message body")

    def _topic_name(self, cmd: str, raw: bytes, code_prefix: str = "") -> str:
        name = raw.decode("latin-1")
        if not is_valid_name(name):
            raise FatalClientError("E_BAD_TOPIC", f"{code_prefix}{cmd} topic name {go_quote(raw)} is not valid")
        return name

    def _check_auth(self, cmd: str, topic: str, channel: str) -> None:
        """With --auth-http-address set, the client must have AUTHed and be allowed (re-asked past the ttl)."""
        auth = self.auth_servers
        if auth is None:
            return
        client = self.client
        state = client.auth_state
        if state is None or not state.authorizations:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if state.is_expired(auth.clock()):
            try:
                state = self._query_auth(auth, client.auth_secret)
            except AuthError as err:
                self.log.warn(f"[{client}] AUTH failed {err}")
                raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None
            client.set_auth_state(state)
        if not state.is_allowed(topic, channel):
            raise FatalClientError("E_UNAUTHORIZED", f'AUTH failed for {cmd} on "{topic}" "{channel}"')

    def _query_auth(self, auth: AuthServers, secret: bytes) -> AuthState:
        client = self.client
        remote_ip = "" if client.remote_address == "@" else client.remote_address.rsplit(":", 1)[0].strip("[]")
        return auth.query(remote_ip, client.tls, client.tls_common_name, secret)

    def _require_subscribed(self, cmd: str, allow_closing: bool) -> None:
        state = self.client.state
        if state != STATE_SUBSCRIBED and not (allow_closing and state == STATE_CLOSING):
            raise FatalClientError("E_INVALID", f"cannot {cmd} in current state")

    # ---- commands -----------------------------------------------------------------------------

    def identify(self, params: list[bytes]) -> bytes | None:
        client = self.client
        opts = self.opts
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")
        size = self._read_len("E_BAD_BODY", "IDENTIFY failed to read body size")
        if size > opts.max_body_size:
            raise FatalClientError("E_BAD_BODY", f"IDENTIFY body too big {size} > {opts.max_body_size}")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        body = self._read_body(size, "E_BAD_BODY", "IDENTIFY failed to read body")
        experiments = tuple(opts.enable_experiment)
        try:
            data = parse_identify(body, experiments)
        except ValueError:
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
        self.log.info(f"[{client}] IDENTIFY: {go_dump(data, experiments)}")
        try:
            self._apply_identify(data)
        except ValueError as err:
            raise FatalClientError("E_BAD_BODY", f"IDENTIFY {err}") from None
        if not data["feature_negotiation"]:
            return OK
        deflate: bool = opts.deflate and data["deflate"]
        asked_level: int = data["deflate_level"]
        deflate_level = asked_level if deflate and asked_level > 0 else 6
        deflate_level = min(deflate_level, opts.max_deflate_level)
        snappy: bool = opts.snappy and data["snappy"]
        if deflate and snappy:
            raise FatalClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
        tls: bool = self.tls_context is not None and data["tls_v1"]
        # nsqd's identifyResponse: what was negotiated and the server's limits (behaviour, not copies of fields)
        reply = {
            "max_rdy_count": opts.max_rdy_count,
            "version": NSQ_VERSION,
            "max_msg_timeout": opts.max_msg_timeout // 1_000_000,
            "msg_timeout": round(client.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": deflate_level,
            "max_deflate_level": opts.max_deflate_level,
            "snappy": snappy,
            "sample_rate": client.sample_rate,
            "auth_required": self.auth_servers is not None,
            "output_buffer_size": client.output_buffer_size,
            "output_buffer_timeout": round(client.output_buffer_timeout * 1000),
        }
        if TOPOLOGY_EXPERIMENT in experiments:  # nsqd's development branch
            reply["topology_region"] = client.topology_region
            reply["topology_zone"] = client.topology_zone
        client.send_response(jsonenc.dumps(reply))
        try:
            if tls:
                self.log.info(f"PROTOCOL(V2): [{client}] upgrading connection to TLS")
                client.upgrade_tls(self.tls_context)  # type: ignore[arg-type]
                client.send_response(OK)
            if snappy:
                self.log.info(f"PROTOCOL(V2): [{client}] upgrading connection to snappy")
                client.upgrade_snappy()
                client.send_response(OK)
            if deflate:
                self.log.info(f"PROTOCOL(V2): [{client}] upgrading connection to deflate (level {deflate_level})")
                client.upgrade_deflate(deflate_level)
                client.send_response(OK)
        except ConnectionLost as err:
            raise FatalClientError("E_IDENTIFY_FAILED", f"IDENTIFY failed {err}") from None
        return None

    def _apply_identify(self, data: IdentifyData) -> None:
        """nsqd's clientV2.Identify: set the fields IDENTIFY copies (client_fields.COPIED), then validate and set
        each negotiable value."""
        client = self.client
        opts = self.opts
        for key, attr in COPIED:
            setattr(client, attr, data[key])
        hb: int = data["heartbeat_interval"]
        if hb == -1:
            client.heartbeat_interval = 0.0
        elif hb == 0:
            pass
        elif 1000 <= hb <= opts.max_heartbeat_interval // 1_000_000:
            client.heartbeat_interval = hb / 1000
        else:
            raise ValueError(f"heartbeat interval ({hb}) is invalid")
        obt: int = data["output_buffer_timeout"]
        if obt == -1:
            client.output_buffer_timeout = 0.0
        elif obt == 0:
            pass
        elif opts.min_output_buffer_timeout // 1_000_000 <= obt <= opts.max_output_buffer_timeout // 1_000_000:
            client.output_buffer_timeout = obt / 1000
        else:
            raise ValueError(f"output buffer timeout ({obt}) is invalid")
        obs: int = data["output_buffer_size"]
        if obs == -1:
            client.output_buffer_size = 1
            client.output_buffer_timeout = 0.0
        elif obs == 0:
            pass
        elif 64 <= obs <= opts.max_output_buffer_size:
            client.output_buffer_size = obs
        else:
            raise ValueError(f"output buffer size ({obs}) is invalid")
        sample_rate: int = data["sample_rate"]
        if not 0 <= sample_rate <= 99:
            raise ValueError(f"sample rate ({sample_rate}) is invalid")
        client.sample_rate = sample_rate
        mt: int = data["msg_timeout"]
        if mt == 0:
            pass
        elif 1000 <= mt <= opts.max_msg_timeout // 1_000_000:
            client.msg_timeout = mt / 1000
        else:
            raise ValueError(f"msg timeout ({mt}) is invalid")
        client.reset_heartbeat()

    def auth(self, params: list[bytes]) -> bytes | None:
        if self.client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot AUTH in current state")
        if len(params) != 1:
            raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")
        size = self._read_len("E_BAD_BODY", "AUTH failed to read body size")
        if size > self.opts.max_body_size:
            raise FatalClientError("E_BAD_BODY", f"AUTH body too big {size} > {self.opts.max_body_size}")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"AUTH invalid body size {size}")
        secret = self._read_body(size, "E_BAD_BODY", "AUTH failed to read body")
        client = self.client
        if client.authed:
            raise FatalClientError("E_INVALID", "AUTH already set")
        auth = self.auth_servers
        if auth is None:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")
        try:
            state = self._query_auth(auth, secret)
        except AuthError as err:
            self.log.warn(f"PROTOCOL(V2): [{client}] AUTH failed {err}")
            raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None
        client.auth_secret = secret
        client.set_auth_state(state)
        if not state.authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        client.send_response(jsonenc.dumps({"identity": state.identity, "identity_url": state.identity_url,
                                           "permission_count": len(state.authorizations)}))
        return None

    def sub(self, params: list[bytes]) -> bytes:
        client = self.client
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")
        if client.heartbeat_interval <= 0:
            raise FatalClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise FatalClientError("E_INVALID", "SUB insufficient number of parameters")
        topic_name = self._topic_name("SUB", params[1])
        channel_name = params[2].decode("latin-1")
        if not is_valid_name(channel_name):
            raise FatalClientError("E_BAD_CHANNEL", f"SUB channel name {go_quote(params[2])} is not valid")
        self._check_auth("SUB", topic_name, channel_name)
        self._subscribe(topic_name, channel_name)  # hook: ProtocolV2 / WorkerProtocolV2
        client.state = STATE_SUBSCRIBED
        return OK

    def rdy(self, params: list[bytes]) -> None:
        client = self.client
        if client.state == STATE_CLOSING:
            self.log.info(f"PROTOCOL(V2): [{client}] ignoring RDY after CLS in state ClientStateV2Closing")
            return None
        if client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            parsed = parse_base10(params[1])
            if parsed is None:
                raise FatalClientError("E_INVALID", f"RDY could not parse count {client_text(params[1])}")
            count = parsed
        if not 0 <= count <= self.opts.max_rdy_count:
            raise FatalClientError("E_INVALID", f"RDY count {count} out of range 0-{self.opts.max_rdy_count}")
        self._ready(count)  # hook: ProtocolV2 / WorkerProtocolV2
        return None

    def fin(self, params: list[bytes]) -> None:
        self._require_subscribed("FIN", allow_closing=True)
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "FIN insufficient number of params")
        self._finish(message_id(params[1]))  # hook: ProtocolV2 / WorkerProtocolV2
        return None

    def req(self, params: list[bytes]) -> None:
        self._require_subscribed("REQ", allow_closing=True)
        if len(params) < 3:
            raise FatalClientError("E_INVALID", "REQ insufficient number of params")
        msg_id = message_id(params[1])
        timeout_ms = parse_base10(params[2])
        if timeout_ms is None:
            raise FatalClientError("E_INVALID", f"REQ could not parse timeout {client_text(params[2])}")
        max_ms = self.opts.max_req_timeout // 1_000_000
        clamped = min(max(timeout_ms, 0), max_ms)
        if clamped != timeout_ms:
            self.log.info(
                f"PROTOCOL(V2): [{self.client}] REQ timeout {timeout_ms * 1_000_000} out of range "
                f"0-{self.opts.max_req_timeout}. Setting to {clamped * 1_000_000}"
            )
        self._requeue(msg_id, clamped)  # hook: ProtocolV2 / WorkerProtocolV2
        return None

    def touch(self, params: list[bytes]) -> None:
        self._require_subscribed("TOUCH", allow_closing=True)
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "TOUCH insufficient number of params")
        self._touch(message_id(params[1]))  # hook: ProtocolV2 / WorkerProtocolV2
        return None

    def cls(self, params: list[bytes]) -> bytes:
        if self.client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")
        self.client.start_close()
        return b"CLOSE_WAIT"

    def nop(self, params: list[bytes]) -> None:
        return None

    # ---- publishing ---------------------------------------------------------------------------

    def pub(self, params: list[bytes]) -> bytes | None:
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "PUB insufficient number of parameters")
        topic_name = self._topic_name("PUB", params[1])
        body = self._read_message_body("PUB")
        self._check_auth("PUB", topic_name, "")
        return self._publish(topic_name, "PUB", [body])  # hook: ProtocolV2 / WorkerProtocolV2

    def dpub(self, params: list[bytes]) -> bytes | None:
        if len(params) < 3:
            raise FatalClientError("E_INVALID", "DPUB insufficient number of parameters")
        topic_name = self._topic_name("DPUB", params[1])
        timeout_ms = parse_base10(params[2])
        if timeout_ms is None:
            raise FatalClientError("E_INVALID", f"DPUB could not parse timeout {client_text(params[2])}")
        max_ms = self.opts.max_req_timeout // 1_000_000
        if not 0 <= timeout_ms <= max_ms:
            raise FatalClientError("E_INVALID", f"DPUB timeout {timeout_ms} out of range 0-{max_ms}")
        body = self._read_message_body("DPUB")
        self._check_auth("DPUB", topic_name, "")
        return self._publish(topic_name, "DPUB", [body], timeout_ms)  # hook: ProtocolV2 / WorkerProtocolV2

    def mpub(self, params: list[bytes]) -> bytes | None:
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "MPUB insufficient number of parameters")
        topic_name = self._topic_name("MPUB", params[1], code_prefix="E_BAD_TOPIC ")
        self._check_auth("MPUB", topic_name, "")
        self._create_topic("MPUB", topic_name)  # hook; nsqd creates the topic before reading the body
        opts = self.opts
        size = self._read_len("E_BAD_BODY", "MPUB failed to read body size")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
        if size > opts.max_body_size:
            raise FatalClientError("E_BAD_BODY", f"MPUB body too big {size} > {opts.max_body_size}")
        count = self._read_len("E_BAD_BODY", "MPUB failed to read message count")
        if count <= 0 or count > (opts.max_body_size - 4) // 5:
            raise FatalClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
        return self._publish(topic_name, "MPUB", self._read_mpub_bodies(count))  # hook: ProtocolV2 / WorkerProtocolV2

    def _check_mpub_size(self, index: int, size: int) -> None:
        if size <= 0:
            raise FatalClientError("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
        if size > self.opts.max_msg_size:
            raise FatalClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {self.opts.max_msg_size}")

    def _read_mpub_bodies(self, count: int) -> list[bytes]:
        """The MPUB messages, read like nsqd from the stream (never reconciled with the outer
        length). Whatever the read buffer already holds is parsed in place; a message that is
        not complete yet is read the ordinary way, which pulls in more of the stream."""
        client = self.client
        max_size = self.opts.max_msg_size
        bodies: list[bytes] = []
        while len(bodies) < count:
            data, offset = client.buffered()
            end = len(data)
            index = len(bodies)
            while index < count and offset + 4 <= end:
                msg_size = int32_at(data, offset)
                if msg_size <= 0 or msg_size > max_size:
                    self._check_mpub_size(index, msg_size)
                stop = offset + 4 + msg_size
                if stop > end:
                    break
                bodies.append(data[offset + 4 : stop])
                offset = stop
                index += 1
            client.seek(offset)
            if index < count:
                msg_size = self._read_len("E_BAD_MESSAGE", f"MPUB failed to read message({index}) body size")
                self._check_mpub_size(index, msg_size)
                bodies.append(self._read_body(msg_size, "E_BAD_MESSAGE", "MPUB failed to read message body"))
        return bodies

    # ---- what commands do to topics and channels: hooks, each implemented twice ----------------
    # ProtocolV2 (below) calls tcp/broker_commands.py in this process; WorkerProtocolV2 (tcp/worker_protocol.py)
    # forwards a record (tcp/records.py) to the broker, where tcp/remote_clients.py's BrokerEnd calls the same
    # broker_commands function. Every call above is marked `# hook`.

    def _subscribe(self, topic_name: str, channel_name: str) -> None:
        """Add the client to the channel; FatalClientError (E_SUB_FAILED) when it cannot be."""
        raise NotImplementedError

    def _ready(self, count: int) -> None:
        raise NotImplementedError

    def _finish(self, msg_id: bytes) -> None:
        """FIN; ClientError (E_FIN_FAILED) when the message is not this client's in flight."""
        raise NotImplementedError

    def _requeue(self, msg_id: bytes, delay_ms: int) -> None:
        raise NotImplementedError

    def _touch(self, msg_id: bytes) -> None:
        raise NotImplementedError

    def _publish(self, topic_name: str, cmd: str, bodies: list[bytes], deferred_ms: int = 0) -> bytes | None:
        """Publish; the answer, or None when it comes later (always in order with the other answers)."""
        raise NotImplementedError

    def _create_topic(self, cmd: str, name: str) -> None:
        raise NotImplementedError


class ProtocolV2(ProtocolV2Base):
    """The command loop of a connection served in the broker's own process."""

    def __init__(self, ctx: ServerContext, client: ClientV2) -> None:
        super().__init__(ctx.opts, ctx.logger, ctx.auth_servers, ctx.tls_context, client)
        self.nsqd = ctx.nsqd

    def _subscribe(self, topic_name: str, channel_name: str) -> None:
        self.client.channel = broker_commands.subscribe(self.nsqd, self.client, topic_name, channel_name)

    def _ready(self, count: int) -> None:
        self.client.set_ready_count(count)

    def _finish(self, msg_id: bytes) -> None:
        broker_commands.finish(self.client.channel, self.client, msg_id)  # type: ignore[arg-type]
        self._dispatch_pending = True

    def _requeue(self, msg_id: bytes, delay_ms: int) -> None:
        broker_commands.requeue(self.client.channel, self.client, msg_id, delay_ms)  # type: ignore[arg-type]

    def _touch(self, msg_id: bytes) -> None:
        broker_commands.touch(self.client.channel, self.client, msg_id)  # type: ignore[arg-type]

    def _publish(self, topic_name: str, cmd: str, bodies: list[bytes], deferred_ms: int = 0) -> bytes | None:
        broker_commands.publish(self.nsqd, topic_name, cmd, bodies, deferred_ms)
        self.client.published(topic_name, len(bodies))
        return OK

    def _create_topic(self, cmd: str, name: str) -> None:
        broker_commands.create_topic(self.nsqd, cmd, name)
