"""`nsq-pipeline`: stream NSQ topics into Parquet (events by date/hour, per-minute counts) on Spark.

Embedded: `nsq-pipeline --topic events --nsqd-tcp-address 127.0.0.1:4150 --output /data/lake` (Spark runs in this
process, `--master local[*]`). On a cluster: `spark-submit --master spark://host:7077 apps/pipeline.py ...` (the
master spark-submit was given is kept) or `--master spark://...|yarn|k8s://...`. SIGINT/SIGTERM stop the queries
cleanly: the events query's last batch is committed to NSQ (FIN), what it had not started is handed back (REQ).
See docs/spark.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from nsqd_py.spark import register
from nsqd_py.spark.archive import run_archive
from nsqd_py.spark.pipeline import PipelineConfig, events_schema, start_counts, start_events, stop_query
from nsqd_py.spark.progress import follow

NOT_IMPORTABLE = """nsq-pipeline: Spark could not import nsqd_py with the Python it runs for the data source
({python}). Spark plans format("nsq") in a Python process on the driver started with spark.pyspark.python (or
PYSPARK_PYTHON), and executors run the same path: point it at an interpreter where nsqd-py is installed, at the same
absolute path on every node, e.g. --conf spark.pyspark.python=/opt/pipeline-env/bin/python (docs/spark.md)."""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


class _PrintPath(argparse.Action):
    """`--print-path`: this file, for `spark-submit "$(nsq-pipeline --print-path)" ...`."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the path of this app (for spark-submit) and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(Path(__file__).resolve())
        parser.exit()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nsq-pipeline", description=__doc__.split("\n")[0])
    p.add_argument("--print-path", action=_PrintPath)
    p.add_argument("--topic", action="append", default=[], help="NSQ topic (repeatable; with --from-archive a filter)")
    p.add_argument("--channel", default="nsq_pipeline", help="NSQ channel (default %(default)s)")
    p.add_argument("--nsqd-tcp-address", action="append", default=[], help="nsqd TCP address (repeatable)")
    p.add_argument("--nsqd-http-address", action="append", default=[],
                   help="its HTTP address, for /stats (repeatable, in the same order; default: TCP port + 1)")
    p.add_argument("--lookupd-http-address", action="append", default=[], help="nsqlookupd HTTP address (repeatable)")
    p.add_argument("--output", required=True, help="base path: events/ and counts/ go below it")
    p.add_argument("--checkpoint", default="", help="checkpoint base path (default OUTPUT/_checkpoints)")
    schema = p.add_mutually_exclusive_group()
    schema.add_argument("--schema", default="", help="DDL of the JSON bodies, e.g. 'user string, ts timestamp'")
    schema.add_argument("--schema-file", type=Path, help="a file holding that DDL")
    p.add_argument("--event-time-field", default="", help="schema field with the event time (default: publish time)")
    p.add_argument("--watermark", default="10 minutes", help="lateness allowed for the counts (default %(default)s)")
    p.add_argument("--dedupe-window", default="5 minutes",
                   help="drop redeliveries of a message id seen within this processing time; '' disables "
                        "(default %(default)s)")
    p.add_argument("--trigger", default="1 second", help="micro-batch interval (default %(default)s)")
    p.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    p.add_argument("--max-messages-per-batch", type=int,
                   help="format('nsq') maxOffsetsPerTrigger (default: what the channels hold)")
    p.add_argument("--msg-timeout", help="format('nsq') msg_timeout, e.g. 60s")
    p.add_argument("--source-option", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="any other format('nsq') option (repeatable)")
    p.add_argument("--from-archive", metavar="DIR", help="batch-process nsq_to_file archives instead of streaming")
    p.add_argument("--master", help="Spark master (default local[*]; under spark-submit, the one it was given)")
    p.add_argument("--app-name", default="nsq-pipeline")
    p.add_argument("--conf", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="Spark configuration (repeatable)")
    p.add_argument("--log-level", default="WARN", help="Spark log level (default %(default)s)")
    args = p.parse_args(argv)
    if not args.from_archive:
        if not args.topic:
            p.error("--topic is required (unless --from-archive)")
        if bool(args.nsqd_tcp_address) == bool(args.lookupd_http_address):
            p.error("give --nsqd-tcp-address or --lookupd-http-address (not both)")
        if args.nsqd_http_address and len(args.nsqd_http_address) != len(args.nsqd_tcp_address):
            p.error("give one --nsqd-http-address per --nsqd-tcp-address")
    return args


def config(args: argparse.Namespace) -> PipelineConfig:
    source_options = dict(args.source_option)
    if args.max_messages_per_batch:
        source_options["maxOffsetsPerTrigger"] = str(args.max_messages_per_batch)
    if args.msg_timeout:
        source_options["msg_timeout"] = args.msg_timeout
    return PipelineConfig(
        topics=tuple(args.topic), output=args.output, checkpoint=args.checkpoint, channel=args.channel,
        nsqd_tcp_addresses=tuple(args.nsqd_tcp_address), nsqd_http_addresses=tuple(args.nsqd_http_address),
        lookupd_http_addresses=tuple(args.lookupd_http_address),
        schema=args.schema_file.read_text().strip() if args.schema_file else args.schema,
        event_time_field=args.event_time_field, watermark=args.watermark, dedupe_window=args.dedupe_window,
        trigger=args.trigger,
        available_now=args.available_now, source_options=source_options,
    )


@contextlib.contextmanager
def _stop_signals_left_to_this_process() -> Iterator[None]:
    """Start Spark's JVM with SIGTERM and SIGINT ignored, so that only this process acts on them.

    systemd (KillMode=control-group), `timeout` and `kill -- -PGID` signal every process of the service at once. A JVM
    that exited then would take the query with it before `stop_gracefully` could commit the last batch, and so would
    the Python process that holds the reader's connections, which the JVM starts. An ignored signal stays ignored
    across exec (the JVM installs no handler for it) and is inherited by what the JVM starts. Meanwhile the signals
    are blocked here, not lost: Linux keeps a blocked signal pending even while it is ignored, and it reaches this
    process's own handler, installed by then, once unblocked.
    """
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)


def session(args: argparse.Namespace) -> SparkSession:
    """Under spark-submit (which starts the JVM first) its master stands unless --master overrides it."""
    # our own per-batch lines replace Spark's console progress bar (which would overwrite them)
    builder = SparkSession.builder.appName(args.app_name).config("spark.ui.showConsoleProgress", "false")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if args.master or not submitted:
        builder = builder.master(args.master or "local[*]")
    if not submitted:
        # Spark's Python processes (the data source's planner, the workers) run PYSPARK_PYTHON, which spark-submit
        # sets from spark.pyspark.python; embedded, this does the same, defaulting to this interpreter (its nsqd_py)
        os.environ["PYSPARK_PYTHON"] = dict(args.conf).get("spark.pyspark.python") or os.environ.get(
            "PYSPARK_PYTHON", sys.executable)
    for key, value in args.conf:
        builder = builder.config(key, value)
    with _stop_signals_left_to_this_process():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(args.log_level)
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # the counts' state is small: Spark's default of 200 state partitions would make every batch crawl
        spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
    register(spark)
    return spark


def run(spark: SparkSession, cfg: PipelineConfig, stop: threading.Event) -> None:
    out = functools.partial(print, flush=True)
    stopper = functools.partial(stop_query, cfg=cfg)
    events = start_events(spark, cfg)
    if cfg.available_now:
        follow([events], out, stop, stopper=stopper)
        follow([start_counts(spark, cfg, events_schema(spark, cfg))], out, stop, stopper=stopper)
    else:
        follow([events, start_counts(spark, cfg, events_schema(spark, cfg))], out, stop, stopper=stopper)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = config(args)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    spark = session(args)
    try:
        if args.from_archive:
            total = run_archive(spark, cfg, args.from_archive)
            print(f"archive {args.from_archive}: {total} events written to {cfg.output}", flush=True)
        else:
            run(spark, cfg, stop)
    except Exception as err:  # a bad schema, an archive error or a failed query: the message says which
        print(f"nsq-pipeline: {err}", file=sys.stderr)
        if "No module named 'nsqd_py'" in str(err):
            print(NOT_IMPORTABLE.format(python=os.environ.get("PYSPARK_PYTHON", "python3")), file=sys.stderr)
        sys.exit(1)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
