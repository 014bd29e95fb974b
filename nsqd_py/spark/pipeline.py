"""The pipeline behind `nsq-pipeline`: NSQ topics to Parquet events partitioned by date/hour, plus per-minute counts.

Two streaming queries, each with its own checkpoint under ``checkpoint``:

* events: every topic is read once (format "nsq", at-least-once), redeliveries are dropped by message id (see
  `drop_redeliveries`), JSON bodies are parsed with the given schema (or kept raw), and rows are appended to
  ``output/events/date=YYYY-MM-DD/hour=H/``;
* counts: reads the events table back as a file stream (only files the events sink committed) and appends a
  watermarked count per minute and topic to ``output/counts``. Reading the table rather than NSQ again keeps
  one consumer per topic and makes the counts agree with the stored events.

A minute's count is written once the watermark (the latest event time seen minus ``watermark``) passes its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StringType, StructField, StructType

from ..go.settings import BOOL, LIST, STRING, setting
from .control import stop_gracefully
from .options import canonical, normalize
from .schema import MESSAGE_SCHEMA

#: columns the pipeline adds; a JSON schema must not use these names
META_COLUMNS = ("nsq_id", "nsq_timestamp", "nsq_attempts", "nsq_topic", "nsq_channel", "nsq_address", "event_time",
                "date", "hour")
CORRUPT_COLUMN = "_corrupt_record"
#: when a micro-batch read its messages; only the dedupe uses it
_RECEIVED = "_nsq_received"


@dataclass
class PipelineConfig:
    """Where to read, how to parse, where to write; each field is also an `nsq-pipeline` flag."""

    topics: list[str] = setting("topic", LIST, [],
                                "NSQ topic (may be given multiple times; with --from-archive a filter)")
    output: str = setting("output", STRING, "", "base path: events/ and counts/ go below it (required)")
    checkpoint: str = setting("checkpoint", STRING, "", "checkpoint base path (default OUTPUT/_checkpoints)")
    channel: str = setting("channel", STRING, "nsq_pipeline", "NSQ channel")
    nsqd_tcp_addresses: list[str] = setting("nsqd-tcp-address", LIST, [],
                                            "nsqd TCP address (may be given multiple times)")
    nsqd_http_addresses: list[str] = setting("nsqd-http-address", LIST, [],
                                             "its HTTP address, for /stats (may be given multiple times, in the same "
                                             "order; default: TCP port + 1)")
    lookupd_http_addresses: list[str] = setting("lookupd-http-address", LIST, [],
                                                "nsqlookupd HTTP address (may be given multiple times)")
    schema: str = setting("schema", STRING, "", "DDL of the JSON bodies, e.g. 'user string, ts timestamp'; empty "
                          "keeps each body as a string")
    event_time_field: str = setting("event-time-field", STRING, "",
                                    "schema field with the event time (timestamp, ISO-8601 text or epoch seconds; "
                                    "default: NSQ's publish time)")
    watermark: str = setting("watermark", STRING, "10 minutes", "lateness allowed for the counts")
    dedupe_window: str = setting("dedupe-window", STRING, "5 minutes",
                                 "drop redeliveries of a message id seen within this processing time; '' disables")
    trigger: str = setting("trigger", STRING, "1 second", "micro-batch interval")
    available_now: bool = setting("available-now", BOOL, False, "process what is there now, then exit")
    #: more options for format("nsq"), e.g. maxOffsetsPerTrigger, msgTimeout, tls
    source_options: dict[str, str] = field(default_factory=dict)

    @property
    def events_path(self) -> str:
        return f"{self.output.rstrip('/')}/events"

    @property
    def counts_path(self) -> str:
        return f"{self.output.rstrip('/')}/counts"

    def sources(self) -> Iterator[tuple[str, str]]:
        """(topic, channel) of every format("nsq") reader."""
        return ((topic, self.channel) for topic in self.topics)

    def checkpoint_path(self, query: str) -> str:
        base = self.checkpoint or f"{self.output.rstrip('/')}/_checkpoints"
        return f"{base.rstrip('/')}/{query}"

    @property
    def driver_reads(self) -> bool:
        return normalize(self.source_options).get(canonical("readMode"), "").strip().lower() == "driver"

    def body_schema(self) -> StructType | None:
        """The JSON schema plus the corrupt-record column, or None for raw bodies."""
        if not self.schema:
            return None
        parsed = StructType.fromDDL(self.schema)
        if not isinstance(parsed, StructType):  # fromDDL gives a bare type for a DDL of one unnamed type
            raise ValueError(f"the schema must name its fields: {self.schema!r}")
        clash = set(parsed.fieldNames()) & {*META_COLUMNS, CORRUPT_COLUMN}
        if clash:
            raise ValueError(f"the schema uses names the pipeline adds: {', '.join(sorted(clash))}")
        if self.event_time_field and self.event_time_field not in parsed.fieldNames():
            raise ValueError(f"--event-time-field {self.event_time_field!r} is not in the schema")
        return StructType([*parsed.fields, StructField(CORRUPT_COLUMN, StringType())])


def to_events(messages: DataFrame, cfg: PipelineConfig) -> DataFrame:
    """Rows shaped like format("nsq")'s (id, timestamp, attempts, body, topic, channel, nsqd_address) to events:
    NSQ metadata as `nsq_*`, then the JSON fields (with `_corrupt_record` holding bodies that did not parse) or
    the raw `body` string, then `event_time`, `date` and `hour`."""
    text = F.col("body").cast("string")
    schema = cfg.body_schema()
    if schema is None:
        fields: list[Column] = [text.alias("body")]
        event_time = F.col("timestamp")
    else:
        parsed = F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN})
        fields = [parsed[name].alias(name) for name in schema.fieldNames()]
        event_time = F.col("timestamp")
        if cfg.event_time_field:
            event_time = F.coalesce(parsed[cfg.event_time_field].cast("timestamp"), event_time)
    return messages.select(
        F.col("id").alias("nsq_id"),
        F.col("timestamp").alias("nsq_timestamp"),
        F.col("attempts").alias("nsq_attempts"),
        F.col("topic").alias("nsq_topic"),
        F.col("channel").alias("nsq_channel"),
        F.col("nsqd_address").alias("nsq_address"),
        *fields,
        event_time.alias("event_time"),
    ).withColumn("date", F.date_format("event_time", "yyyy-MM-dd")).withColumn("hour", F.hour("event_time"))


def drop_redeliveries(messages: DataFrame, window: str) -> DataFrame:
    """The first delivery of every message id seen within ``window`` of processing time.

    A redelivery (after a crash, a restart or a msg_timeout) keeps its id. The watermark is processing time (when
    the batch read it), not the publish time: a watermark on the publish time would drop as late every message
    that nsqd delivers out of order (requeued, or from its disk queue) by more than the window. An id stays in the
    state until the batches' time has moved on by about twice the window.
    """
    return (messages.withColumn(_RECEIVED, F.current_timestamp()).withWatermark(_RECEIVED, window)
            .dropDuplicatesWithinWatermark(["id"]).drop(_RECEIVED))


def minute_counts(events: DataFrame, watermark: str | None) -> DataFrame:
    """Events per minute of event time and topic: `minute`, `topic`, `count` (watermarked when streaming)."""
    if watermark:
        events = events.withWatermark("event_time", watermark)
    return (events.groupBy(F.window("event_time", "1 minute"), F.col("nsq_topic"))
            .count()
            .select(F.col("window.start").alias("minute"), F.col("nsq_topic").alias("topic"), "count"))


def read_topics(spark: SparkSession, cfg: PipelineConfig) -> DataFrame:
    """One format("nsq") source subscribed to every topic, its slices beside the checkpoints (as durable as they);
    with readMode=driver, which reads one topic per source, one per topic, unioned."""
    def source(topics: list[str]) -> DataFrame:
        reader = (spark.readStream.format("nsq").option("subscribe", ",".join(topics)).option("channel", cfg.channel)
                  .option("writeAheadLocation", cfg.checkpoint_path("write-ahead")))
        if cfg.nsqd_tcp_addresses:
            reader = reader.option("nsqdTcpAddresses", ",".join(cfg.nsqd_tcp_addresses))
            if cfg.nsqd_http_addresses:
                reader = reader.option("nsqdHttpAddresses", ",".join(cfg.nsqd_http_addresses))
        else:
            reader = reader.option("lookupdHttpAddresses", ",".join(cfg.lookupd_http_addresses))
        return reader.options(**cfg.source_options).load()

    if not cfg.driver_reads:
        return source(cfg.topics)
    streams = [source([topic]) for topic in cfg.topics]
    stream = streams[0]
    for other in streams[1:]:
        stream = stream.unionByName(other)
    return stream


def _trigger(writer: DataStreamWriter, cfg: PipelineConfig) -> DataStreamWriter:
    return writer.trigger(availableNow=True) if cfg.available_now else writer.trigger(processingTime=cfg.trigger)


def start_events(spark: SparkSession, cfg: PipelineConfig) -> StreamingQuery:
    messages = read_topics(spark, cfg)
    if cfg.dedupe_window:
        messages = drop_redeliveries(messages, cfg.dedupe_window)
    events = to_events(messages, cfg)
    writer = (events.writeStream.queryName("events").format("parquet").partitionBy("date", "hour")
              .option("path", cfg.events_path).option("checkpointLocation", cfg.checkpoint_path("events")))
    return _trigger(writer, cfg).start()


def start_counts(spark: SparkSession, cfg: PipelineConfig, events_schema: StructType) -> StreamingQuery:
    """Needs the events sink to exist: its `_spark_metadata` log is what makes this read only committed files."""
    events = spark.readStream.schema(events_schema).parquet(cfg.events_path)
    writer = (minute_counts(events, cfg.watermark).writeStream.queryName("counts").format("parquet")
              .outputMode("append").option("path", cfg.counts_path)
              .option("checkpointLocation", cfg.checkpoint_path("counts")))
    return _trigger(writer, cfg).start()


def stop_query(query: StreamingQuery, cfg: PipelineConfig, timeout: float = 60.0) -> None:
    """The events query stops between batches (and in readMode=driver drains its readers first: no batch left to
    redeliver); the counts query just stops."""
    if query.name == "events":
        stop_gracefully(query, cfg.sources(), timeout)
    else:
        query.stop()


def events_schema(spark: SparkSession, cfg: PipelineConfig) -> StructType:
    """The events table's schema, from the same transformation applied to an empty message frame."""
    return to_events(spark.createDataFrame([], MESSAGE_SCHEMA), cfg).schema
