"""PySpark connector for NSQ: the "nsq" data source (streaming read, batch and streaming write).

    from nsqd_py.spark import register
    register(spark)
    spark.readStream.format("nsq").option("topic", "events").option("channel", "spark") \\
        .option("nsqd_tcp_addresses", "127.0.0.1:4150").load()

Reads are at-least-once: a message is FINed only after Spark committed the micro-batch holding it;
`stop_gracefully(query, [(topic, channel)])` stops a query without leaving its last batch to be redelivered.
See docs/spark.md for the options and the semantics.
"""

from .control import stop_gracefully
from .source import NSQDataSource, register

__all__ = ["NSQDataSource", "register", "stop_gracefully"]
