"""A batch write submitted to the standalone cluster by test_cluster.py: `spark-submit cluster_write.py TOPIC NSQD N`
publishes the numbers 0..N-1 from the executors."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from nsqd_py.spark import register


def main(topic: str, nsqd: str, count: int) -> None:
    spark = SparkSession.builder.appName("nsq-cluster-write").getOrCreate()
    register(spark)
    (spark.range(count, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
     .write.format("nsq").mode("append").option("topic", topic).option("nsqdTcpAddresses", nsqd).save())
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
