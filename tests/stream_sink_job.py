"""A Spark driver program, run by tests/test_spark_stream.py in its own process so that the
test can SIGKILL it while it writes to a RabbitMQ stream over the stream protocol
(``format("amqp")`` with a ``rabbitmq-stream://`` url).

    python stream_sink_job.py --url URL --stream S --marks DIR batch --rows N --partitions P
                              --producer-name NAME [--pause SECONDS]
    python stream_sink_job.py --url URL --stream S --marks DIR streaming --source A
                              --checkpoint DIR --max-offsets N [--pause SECONDS] [--available-now]

``batch``: ``spark.range(N)`` in P partitions, each row a message whose body and message_id
are its id, written with ``--producer-name``.  ``streaming``: the messages of stream A (read
over the stream protocol) written to S, each with its source offset as body and message_id;
the query's checkpoint names its producer reference.  Each batch of rows passes through a
Python step that writes a file into ``--marks`` and then sleeps ``--pause`` seconds, so that
a kill lands in the middle of the write.  Prints ``started`` and, at the end, ``done``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--marks", required=True)
    parser.add_argument("--pause", type=float, default=0.0)
    modes = parser.add_subparsers(dest="mode", required=True)
    batch = modes.add_parser("batch")
    batch.add_argument("--rows", type=int, required=True)
    batch.add_argument("--partitions", type=int, required=True)
    batch.add_argument("--producer-name", required=True)
    streaming = modes.add_parser("streaming")
    streaming.add_argument("--source", required=True)
    streaming.add_argument("--checkpoint", required=True)
    streaming.add_argument("--max-offsets", type=int, required=True)
    streaming.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    import amqwire.spark

    spark = (SparkSession.builder.master("local[2]").appName("amqwire stream sink job")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    amqwire.spark.register(spark)
    marks, pause = args.marks, args.pause

    def slow(batches):
        for batch in batches:
            if batch.num_rows:
                with open(os.path.join(marks, f"{os.getpid()}-{time.time_ns()}"), "w") as mark:
                    mark.write(str(batch.num_rows))
                time.sleep(pause)
            yield batch

    if args.mode == "batch":
        rows = spark.range(args.rows, numPartitions=args.partitions).select(
            F.col("id").cast("string").alias("body"),
            F.struct(F.col("id").cast("string").alias("message_id")).alias("properties"))
        slowed = rows.mapInArrow(slow, rows.schema)
        (slowed.write.format("amqp").mode("append")
         .option("url", args.url).option("stream", args.stream).option("producerName", args.producer_name)
         .save())
        print("done", flush=True)
        spark.stop()
        return 0

    source = (spark.readStream.format("amqp").option("url", args.url).option("streams", args.source)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", args.max_offsets)
              .option("minPartitions", 2).load()
              .select(F.col("offset").cast("string").alias("body"),
                      F.struct(F.col("offset").cast("string").alias("message_id")).alias("properties")))
    slowed = source.mapInArrow(slow, source.schema)
    writer = (slowed.writeStream.format("amqp").option("url", args.url).option("stream", args.stream)
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"failed {query.exception()}", flush=True)
        return 1
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
