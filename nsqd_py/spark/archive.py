"""`nsq-pipeline --from-archive DIR`: nsq_to_file's files, processed in batch into the pipeline's layout.

nsq_to_file writes one body per line to `<TOPIC>.<HOST><REV>.<DATETIME>.log[.gz]` (default datetime format
`%Y-%m-%d_%H`, local time of the nsq_to_file host; gzip files may hold several concatenated members). The topic and
the hour come from the name; the hour stands in for NSQ's publish time and is read in the Spark session's time zone
(`spark.sql.session.timeZone`). Archives carry no message ids, attempts or channel: those columns are null.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .pipeline import PipelineConfig, minute_counts, to_events

#: topic, host, optional -REV, datetime; the host part has no dots (nsq_to_file uses the short hostname)
ARCHIVE_NAME = r"^(.+)\.([^.]+?)(-\d{6})?\.(\d{4}-\d{2}-\d{2}_\d{2})\.log(\.gz)?$"


class ArchiveError(RuntimeError):
    """The archive run cannot write where it was pointed."""


def archive_messages(spark: SparkSession, directory: str, topics: Sequence[str] = ()) -> DataFrame:
    """Every line of the nsq_to_file files under ``directory`` as a row shaped like format("nsq")'s."""
    lines = (spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.log*").text(directory)
             .select("value", F.col("_metadata.file_name").alias("file")))
    topic = F.regexp_extract("file", ARCHIVE_NAME, 1)
    lines = lines.where((F.col("value") != "") & (topic != ""))
    if topics:
        lines = lines.where(topic.isin(*topics))
    return lines.select(
        F.lit(None).cast("string").alias("id"),
        F.to_timestamp(F.regexp_extract("file", ARCHIVE_NAME, 4), "yyyy-MM-dd_HH").alias("timestamp"),
        F.lit(None).cast("int").alias("attempts"),
        F.col("value").cast("binary").alias("body"),
        topic.alias("topic"),
        F.lit(None).cast("string").alias("channel"),
        F.lit(None).cast("string").alias("nsqd_address"),
    )


def _has_stream_log(spark: SparkSession, path: str) -> bool:
    """Whether a streaming sink keeps its `_spark_metadata` log in ``path``, asked through Spark's public reader so
    that every filesystem Spark is configured for (HDFS, S3) answers; `load` checks that the path exists."""
    try:
        spark.read.format("binaryFile").load(f"{path}/_spark_metadata")
    except AnalysisException as err:
        if err.getCondition() == "PATH_NOT_FOUND":
            return False
        raise
    return True


def run_archive(spark: SparkSession, cfg: PipelineConfig, directory: str) -> int:
    """Append the archive's events and per-minute counts to ``cfg.output``; returns the number of events.

    Refuses an output the streaming pipeline writes: readers of a streaming sink's directory see only the files in
    its `_spark_metadata` log, so batch-written files there would be invisible.
    """
    if _has_stream_log(spark, cfg.events_path):
        raise ArchiveError(f"{cfg.events_path} is written by a streaming query; give --from-archive its own --output")
    events = to_events(archive_messages(spark, directory, cfg.topics), cfg).persist()
    try:
        events.write.mode("append").partitionBy("date", "hour").parquet(cfg.events_path)
        counts = minute_counts(events, None).persist()
        counts.write.mode("append").parquet(cfg.counts_path)
        summed = counts.agg(F.sum("count")).first()
        total = (summed[0] if summed is not None else 0) or 0
        counts.unpersist()
    finally:
        events.unpersist()
    return int(total)
