"""`nsq-pipeline`: stream NSQ topics into Parquet (events by date/hour, per-minute counts) on Spark.

Embedded: `nsq-pipeline --topic events --nsqd-tcp-address 127.0.0.1:4150 --output /data/lake` (Spark runs in this
process, `--master local[*]`). On a cluster: `spark-submit --master spark://host:7077 apps/pipeline.py ...` (the
master spark-submit was given is kept) or `--master spark://...|yarn|k8s://...`. SIGINT/SIGTERM stop the queries
cleanly: the events query's last batch is committed to NSQ (FIN), what it had not started is handed back (REQ).
See docs/spark.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NoReturn

from pyspark.sql import SparkSession

from nsqd_py.go.settings import BOOL, INT, LIST, STRING, parse_flags, setting
from nsqd_py.spark import register
from nsqd_py.spark.archive import run_archive
from nsqd_py.spark.pipeline import PipelineConfig, events_schema, start_counts, start_events, stop_query
from nsqd_py.spark.progress import follow

APP = "nsq-pipeline"
NOT_IMPORTABLE = """nsq-pipeline: Spark could not import nsqd_py with the Python it runs for the data source
({python}). Spark plans format("nsq") in a Python process on the driver started with spark.pyspark.python (or
PYSPARK_PYTHON), and executors run the same path: point it at an interpreter where nsqd-py is installed, at the same
absolute path on every node, e.g. --conf spark.pyspark.python=/opt/pipeline-env/bin/python (docs/spark.md)."""


@dataclass
class PipelineOptions(PipelineConfig):
    """`nsq-pipeline`'s flags: the pipeline's own (PipelineConfig) and how to run it."""

    print_path: bool = setting("print-path", BOOL, False, "print the path of this app (for spark-submit) and exit")
    schema_file: str = setting("schema-file", STRING, "", "a file holding the DDL of --schema")
    max_messages_per_batch: int = setting("max-messages-per-batch", INT, 0,
                                          "format('nsq') maxOffsetsPerTrigger (default: what the channels hold)")
    msg_timeout: str = setting("msg-timeout", STRING, "", "format('nsq') msgTimeout, e.g. 60s")
    source_option: list[str] = setting("source-option", LIST, [],
                                       "any other format('nsq') option as `KEY=VALUE` (may be given multiple times)")
    from_archive: str = setting("from-archive", STRING, "",
                                "batch-process the nsq_to_file archives in this `DIR` instead of streaming")
    master: str = setting("master", STRING, "",
                          "Spark master (default local[*]; under spark-submit, the one it was given)")
    app_name: str = setting("app-name", STRING, "nsq-pipeline", "Spark application name")
    conf: list[str] = setting("conf", LIST, [], "Spark configuration as `KEY=VALUE` (may be given multiple times)")
    log_level: str = setting("log-level", STRING, "WARN", "Spark log level")

    @property
    def spark_conf(self) -> dict[str, str]:
        return dict(_key_value(item) for item in self.conf)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        _usage_error(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _usage_error(message: str) -> NoReturn:
    print(f"{APP}: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv: list[str]) -> PipelineOptions:
    """The command line (Go-style flags, as every nsqd-py executable; -h lists them), checked."""
    opts, parsed = parse_flags(PipelineOptions, APP, argv)
    if opts.print_path:
        print(Path(__file__).resolve())
        sys.exit(0)
    if parsed.args:
        _usage_error(f"unexpected arguments: {' '.join(parsed.args)}")
    if not opts.output:
        _usage_error("--output is required")
    if opts.schema and opts.schema_file:
        _usage_error("give --schema or --schema-file (not both)")
    for item in (*opts.conf, *opts.source_option):  # every KEY=VALUE is checked now, before Spark starts
        _key_value(item)
    if not opts.from_archive:
        if not opts.topics:
            _usage_error("--topic is required (unless --from-archive)")
        if bool(opts.nsqd_tcp_addresses) == bool(opts.lookupd_http_addresses):
            _usage_error("give --nsqd-tcp-address or --lookupd-http-address (not both)")
        if opts.nsqd_http_addresses and len(opts.nsqd_http_addresses) != len(opts.nsqd_tcp_addresses):
            _usage_error("give one --nsqd-http-address per --nsqd-tcp-address")
    return opts


def config(opts: PipelineOptions) -> PipelineConfig:
    """The pipeline's part of the options, with the source options and the schema file folded in."""
    cfg = PipelineConfig(**{f.name: getattr(opts, f.name) for f in fields(PipelineConfig)})
    cfg.source_options = dict(_key_value(item) for item in opts.source_option)
    if opts.max_messages_per_batch:
        cfg.source_options["maxOffsetsPerTrigger"] = str(opts.max_messages_per_batch)
    if opts.msg_timeout:
        cfg.source_options["msgTimeout"] = opts.msg_timeout
    if opts.schema_file:
        cfg.schema = Path(opts.schema_file).read_text().strip()
    return cfg


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


def session(args: PipelineOptions) -> SparkSession:
    """Under spark-submit (which starts the JVM first) its master stands unless --master overrides it."""
    # our own per-batch lines replace Spark's console progress bar (which would overwrite them)
    builder = SparkSession.builder.appName(args.app_name).config("spark.ui.showConsoleProgress", "false")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if args.master or not submitted:
        builder = builder.master(args.master or "local[*]")
    if not submitted:
        # Spark's Python processes (the data source's planner, the workers) run PYSPARK_PYTHON, which spark-submit
        # sets from spark.pyspark.python; embedded, this does the same, defaulting to this interpreter (its nsqd_py)
        os.environ["PYSPARK_PYTHON"] = args.spark_conf.get("spark.pyspark.python") or os.environ.get(
            "PYSPARK_PYTHON", sys.executable)
    for key, value in args.spark_conf.items():
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
