"""PySpark connector for NSQ: the "nsq" data source (streaming read, batch and streaming write).

    from nsqd_py.spark import register
    register(spark)
    spark.readStream.format("nsq").option("subscribe", "events").option("channel", "spark") \\
        .option("nsqdTcpAddresses", "127.0.0.1:4150").load()

The driver plans each micro-batch as slices and executor tasks read them, publishing each slice to a write-ahead
location before they FIN its messages, so a batch Spark runs again has the same rows (reader.py); readMode=driver
keeps the earlier driver-side reader (driver_reader.py). See docs/spark.md for the options and the semantics.
"""

from .control import stop_gracefully
from .dead_letter import DeadLetter, decode_dead_letter
from .source import NSQDataSource, register

__all__ = ["DeadLetter", "NSQDataSource", "decode_dead_letter", "register", "stop_gracefully"]
