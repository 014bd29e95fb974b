"""A streaming read submitted to the standalone cluster by test_cluster.py: format("nsq") into a plain Parquet file
sink, with trigger(availableNow=True). Each row waits ``delay_ms`` in a Python UDF, so batches last long enough for
the test to look at nsqd's clients or to kill a process mid-batch.

    spark-submit cluster_read.py TOPIC NSQD_TCP,... NSQD_HTTP,... OUTPUT CHECKPOINT WRITE_AHEAD DELAY_MS [KEY=VALUE...]
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from nsqd_py.spark import register


def main(topic: str, tcp: str, http: str, output: str, checkpoint: str, write_ahead: str, delay_ms: int,
         *options: str) -> None:
    spark = SparkSession.builder.appName("nsq-cluster-read").getOrCreate()
    register(spark)

    @F.udf("binary")
    def slowly(body: bytes) -> bytes:
        time.sleep(delay_ms / 1000)
        return body

    reader = (spark.readStream.format("nsq").option("subscribe", topic).option("channel", "spark")
              .option("nsqdTcpAddresses", tcp).option("nsqdHttpAddresses", http)
              .option("writeAheadLocation", write_ahead).option("msgTimeout", "3s"))
    for option in options:
        key, _, value = option.partition("=")
        reader = reader.option(key, value)
    query = (reader.load().withColumn("body", slowly("body")).writeStream.format("parquet")
             .option("path", output).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7], int(sys.argv[7]), *sys.argv[8:])
