"""The "nsq" data source: `spark.dataSource.register(NSQDataSource)`, then `format("nsq")`."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .driver_reader import DriverStreamReader
from .options import OptionError, ReadOptions, WriteOptions
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
        _refuse_user_schema(schema)
        opts = ReadOptions.parse(self.options)
        return DriverStreamReader(opts) if opts.read_mode == "driver" else NSQStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> NSQWriter:
        return NSQWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> NSQStreamWriter:
        return NSQStreamWriter(WriteOptions.parse(self.options), schema)


def _refuse_user_schema(schema: StructType) -> None:
    """As Kafka's source, the source's rows have its own schema: a user schema (`readStream.schema(...)`) fails
    the query when it starts, rather than its tasks with PySpark's internal error. (Spark asks a Python data source
    nothing at `load()` when a schema is given, so this is the first place that sees it.)"""
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in MESSAGE_SCHEMA.fields]:
        raise OptionError(f"the nsq source does not support a user-specified schema (got {schema.simpleString()}): "
                          f"remove .schema(...); its rows always have the schema {MESSAGE_SCHEMA.simpleString()}, "
                          f"and a select or from_json(body) turns them into yours")


def register(spark: SparkSession) -> None:
    """Make `format("nsq")` available in ``spark``."""
    spark.dataSource.register(NSQDataSource)
