"""The "nsq" data source: `spark.dataSource.register(NSQDataSource)`, then `format("nsq")`."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .driver_reader import DriverStreamReader
from .options import ReadOptions, WriteOptions
from .reader import NSQStreamReader
from .schema import MESSAGE_SCHEMA
from .writer import NSQStreamWriter, NSQWriter


class NSQDataSource(DataSource):
    """Streaming reads of a topic/channel and batch or streaming writes to a topic (options: docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return MESSAGE_SCHEMA

    def streamReader(self, schema: StructType) -> NSQStreamReader | DriverStreamReader:
        opts = ReadOptions.parse(self.options)
        return DriverStreamReader(opts) if opts.read_mode == "driver" else NSQStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> NSQWriter:
        return NSQWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> NSQStreamWriter:
        return NSQStreamWriter(WriteOptions.parse(self.options), schema)


def register(spark: SparkSession) -> None:
    """Make `format("nsq")` available in ``spark``."""
    spark.dataSource.register(NSQDataSource)
