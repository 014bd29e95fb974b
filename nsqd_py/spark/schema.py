"""The rows the "nsq" format reads: one per message, and the Arrow form executors yield and slices hold."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

from ..client.protocol import Message

MESSAGE_SCHEMA = StructType([
    StructField("id", StringType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("attempts", IntegerType(), True),
    StructField("body", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("channel", StringType(), True),
    StructField("nsqd_address", StringType(), True),
])

ARROW_SCHEMA = to_arrow_schema(MESSAGE_SCHEMA, timezone="UTC")


def message_table(messages: Sequence[Message], topic: str, channel: str,
                  addresses: Sequence[str | None]) -> pa.Table:
    """Messages as rows (``addresses``: the nsqd each came from)."""
    count = len(messages)
    return pa.Table.from_arrays(
        [
            pa.array([m.id.decode("ascii", "replace") for m in messages], pa.string()),
            pa.array([m.timestamp // 1000 for m in messages], pa.timestamp("us", tz="UTC")),
            pa.array([m.attempts for m in messages], pa.int32()),
            pa.array([m.body for m in messages], pa.binary()),
            pa.array([topic] * count, pa.string()),
            pa.array([channel] * count, pa.string()),
            pa.array(addresses, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )
