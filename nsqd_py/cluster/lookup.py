"""Registering with nsqlookupd (nsqd's lookupLoop) and pre-creating a new topic's channels from it.

One greenlet owns every lookupd connection, so commands to a peer never interleave. It sends:

* on each (re)connect: IDENTIFY, then REGISTER for every topic without channels and every channel;
* REGISTER/UNREGISTER when a topic or channel (ephemeral ones too) is created or deleted;
* PING to every peer every 15 s (which also reconnects a lost peer, as in nsqd).

Unlike nsqd, which only notices a lost lookupd when its next command fails (at the latest the next PING), the
loop checks every second whether an idle connection was closed, and retries a peer that is down on its own,
after 1 s doubling up to 15 s: an nsqd started before its lookupd, or whose lookupd restarted, registers
everything again within seconds.

A new topic (not one loaded from nsqd.dat) first asks every connected lookupd's HTTP API for the topic's
channels and creates the non-ephemeral ones, in the creating greenlet, so the first message already reaches
them (nsqd does this inside GetTopic).
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import TYPE_CHECKING

import gevent
import orjson
from gevent.queue import Empty, Queue

from ..core.errors import BackendError, ExitingError
from ..runtime.version import NSQ_VERSION
from .lookup_peer import PING, Command, LookupPeer, PeerError, PeerInfo, register, unregister
from .lookupd_channels import lookupd_channels

if TYPE_CHECKING:
    from ..core.channel import Channel
    from ..core.nsqd import NSQD
    from ..core.topic import Topic

PING_INTERVAL = 15.0
RETRY_MIN, RETRY_MAX = 1.0, 15.0
#: how often idle connections are checked for having been closed by lookupd
CHECK_INTERVAL = 1.0
_EXIT = object()


class LookupLoop:
    """The lookupd peers of one nsqd; create it before the broker has events to announce."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self._log = nsqd.logger
        self._hostname = socket.gethostname()
        self._peers: list[LookupPeer] = []
        #: disconnected peers: when to try again, and the wait after that
        self._retry: dict[LookupPeer, tuple[float, float]] = {}
        self._queue: Queue = Queue()
        self._greenlet: gevent.Greenlet | None = None
        self._closed = False
        nsqd.listeners.append(self._on_event)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def close(self) -> None:
        """Stop the loop and drop the connections (lookupd then forgets this nsqd's registrations)."""
        if self._closed:
            return
        self._closed = True
        if self._greenlet is not None:
            self._queue.put(_EXIT)
            if not self._greenlet.join(timeout=3):
                self._greenlet.kill()
        for peer in self._peers:
            peer.close()
        self._log.info("LOOKUP: closing")

    def set_peers(self, addresses: list[str]) -> None:
        """New --lookupd-tcp-address list (PUT /config/nsqlookupd_tcp_addresses): drop the peers not in it,
        add the new ones."""
        self._queue.put(list(addresses))

    def http_addresses(self) -> list[str]:
        """`broadcast_address:http_port` of every peer that has answered IDENTIFY."""
        return [peer.info.http_address for peer in self._peers if peer.info.broadcast_address]

    # ---- broker events (called in the greenlet that changed the broker) ----------------------

    def _on_event(self, event: str, topic: Topic, channel: Channel | None) -> None:
        if self._closed:
            return
        if channel is not None:
            cmd = register if event == "channel_created" else unregister
            self._queue.put(("channel", cmd(topic.name, channel.name)))
            return
        if event == "topic_created":
            self._queue.put(("topic", register(topic.name)))
            self._precreate_channels(topic)
        else:
            self._queue.put(("topic", unregister(topic.name)))

    def _precreate_channels(self, topic: Topic) -> None:
        addresses = self.http_addresses()
        if not addresses:
            if self.nsqd.opts.nsqlookupd_tcp_addresses:
                self._log.error(f"no available nsqlookupd to query for channels to pre-create for topic {topic.name}")
            return
        opts = self.nsqd.opts
        channels, errors = lookupd_channels(topic.name, addresses, self._log, opts.http_client_connect_timeout / 1e9,
                                            opts.http_client_request_timeout / 1e9)
        if errors:
            text = "\n".join(errors)
            if len(errors) == len(addresses):
                text = f"Failed to query any nsqlookupd: {text}"
            self._log.warn(f"failed to query nsqlookupd for channels to pre-create for topic {topic.name} - {text}")
        for name in channels:
            if name.endswith("#ephemeral"):
                continue
            try:
                topic.get_channel(name)
            except ExitingError:
                return
            except BackendError as err:  # the channel is made; nsqd.dat catches up with the next write
                self._log.error(f"failed to pre-create channel {name} for topic {topic.name} - {err}")

    # ---- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        self._add_peers(self.nsqd.opts.nsqlookupd_tcp_addresses)
        next_ping = time.monotonic() + PING_INTERVAL
        next_check = time.monotonic() + CHECK_INTERVAL
        while True:
            wake = min([next_ping, next_check, *(due for due, _ in self._retry.values())])
            try:
                item = self._queue.get(timeout=max(wake - time.monotonic(), 0))
            except Empty:
                item = None
            if item is _EXIT:
                return
            if isinstance(item, list):
                self._replace_peers(item)
            elif item is not None:
                self._announce(*item)
            now = time.monotonic()
            if now >= next_ping:
                next_ping = now + PING_INTERVAL
                self._ping()
            if now >= next_check:
                next_check = now + CHECK_INTERVAL
                self._check_closed()
            for peer, (due, _) in list(self._retry.items()):
                if due <= now:
                    self._connect(peer)

    def _announce(self, branch: str, cmd: Command) -> None:
        for peer in list(self._peers):
            self._log.info(f"LOOKUPD({peer}): {branch} {cmd}")
            self._send(peer, cmd)

    def _ping(self) -> None:
        """Keeps this nsqd active in lookupd (and reconnects a lost peer)."""
        for peer in list(self._peers):
            self._log.debug(f"LOOKUPD({peer}): sending heartbeat")
            self._send(peer, PING)

    def _check_closed(self) -> None:
        for peer in self._peers:
            if peer.check_closed():
                self._log.error(f"LOOKUPD({peer}): connection closed by nsqlookupd")
                self._schedule(peer)

    def _add_peers(self, addresses: list[str]) -> None:
        known = {peer.address for peer in self._peers}
        for address in addresses:
            if address in known:
                continue
            known.add(address)
            self._log.info(f"LOOKUP({address}): adding peer")
            peer = LookupPeer(address, self.nsqd.opts.max_body_size, self._log, self._identify)
            self._peers.append(peer)
            self._connect(peer)

    def _replace_peers(self, addresses: list[str]) -> None:
        for peer in list(self._peers):
            if peer.address not in addresses:
                self._log.info(f"LOOKUP({peer}): removing peer")
                peer.close()
                self._peers.remove(peer)
                self._retry.pop(peer, None)
        self._add_peers(addresses)

    def _connect(self, peer: LookupPeer) -> None:
        """Connect (IDENTIFY, REGISTER all) without a command; like nsqd, a failure here is not logged."""
        with contextlib.suppress(PeerError):
            peer.command(None)
        self._schedule(peer, retried=True)

    def _send(self, peer: LookupPeer, cmd: Command) -> None:
        try:
            peer.command(cmd)
        except PeerError as err:
            self._log.error(f"LOOKUPD({peer}): {cmd} - {err}")
        self._schedule(peer)

    def _schedule(self, peer: LookupPeer, retried: bool = False) -> None:
        """Connected: no retry. Just lost: retry in 1 s. A retry failed: wait twice as long, up to 15 s."""
        if peer.connected:
            self._retry.pop(peer, None)
            return
        scheduled = self._retry.get(peer)
        if scheduled is None:
            wait = RETRY_MIN
        elif retried:
            wait = min(scheduled[1] * 2, RETRY_MAX)
        else:
            return  # a command failed while waiting for the next retry: keep that schedule
        self._retry[peer] = (time.monotonic() + wait, wait)

    # ---- connect callback ---------------------------------------------------------------------

    def _identify(self, peer: LookupPeer) -> None:
        """nsqd's connectCallback: IDENTIFY, then REGISTER every topic (no channels) and channel."""
        opts = self.nsqd.opts
        info = {
            "broadcast_address": opts.broadcast_address,
            "hostname": self._hostname,
            "http_port": opts.broadcast_http_port,
            "tcp_port": opts.broadcast_tcp_port,
            "topology_region": opts.topology_region,
            "topology_zone": opts.topology_zone,
            "version": NSQ_VERSION,
        }
        cmd = Command("IDENTIFY", body=orjson.dumps(info, option=orjson.OPT_SORT_KEYS))
        try:
            resp = peer.command(cmd)
        except PeerError as err:
            self._log.error(f"LOOKUPD({peer}): {cmd} - {err}")
            return
        if resp == b"E_INVALID":
            self._log.info(f"LOOKUPD({peer}): lookupd returned {resp.decode()}")
            peer.close()
            return
        try:
            peer.info = PeerInfo.from_json(resp or b"")
        except ValueError:
            self._log.error(f"LOOKUPD({peer}): parsing response - {(resp or b'').decode('utf-8', 'replace')}")
            peer.close()
            return
        self._log.info(f"LOOKUPD({peer}): peer info {peer.info}")
        if not peer.info.broadcast_address:
            self._log.error(f"LOOKUPD({peer}): no broadcast address")
        for cmd in self._registrations():
            self._log.info(f"LOOKUPD({peer}): {cmd}")
            try:
                peer.command(cmd)
            except PeerError as err:
                self._log.error(f"LOOKUPD({peer}): {cmd} - {err}")
                return

    def _registrations(self) -> list[Command]:
        """REGISTER <topic> for a topic without channels, else REGISTER <topic> <channel> for each."""
        return [register(topic.name, name) for topic in list(self.nsqd.topics.values())
                for name in (list(topic.channels) or [""])]
