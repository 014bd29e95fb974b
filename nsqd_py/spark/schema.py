"""The rows the "nsq" format reads: one per message."""

from __future__ import annotations

from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

MESSAGE_SCHEMA = StructType([
    StructField("id", StringType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("attempts", IntegerType(), True),
    StructField("body", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("channel", StringType(), True),
    StructField("nsqd_address", StringType(), True),
])
