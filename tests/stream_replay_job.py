"""A Spark driver program, run by tests/test_spark_source.py in its own process so that the
test can SIGKILL it in the middle of a micro-batch: a streaming query from a RabbitMQ
stream (``format("amqp")``) into a Parquet file sink, with a checkpoint.

    python stream_replay_job.py --amqp-url URL --stream S --output DIR --checkpoint DIR
                                --marks DIR --max-offsets N [--available-now]

Each micro-batch passes through a Python step that writes a file into ``--marks`` when it
starts (so the test knows a batch is under way) and then takes a while (so the kill lands
inside it).  Prints ``started`` once the query runs and ``done`` when an
``--available-now`` run has read everything.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--marks", required=True)
    parser.add_argument("--max-offsets", type=int, required=True)
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import amqwire.spark

    spark = (SparkSession.builder.master("local[2]").appName("amqwire stream replay")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    amqwire.spark.register(spark)
    marks, pause = args.marks, args.pause

    def slow(batches):
        first = True
        for batch in batches:
            if first and batch.num_rows:
                first = False
                path = os.path.join(marks, f"{os.getpid()}-{time.time_ns()}")
                with open(path, "w") as mark:
                    mark.write(str(batch.column(0)[0]))
                time.sleep(pause)
            yield batch

    stream = (spark.readStream.format("amqp")
              .option("url", args.amqp_url)
              .option("streams", args.stream)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", args.max_offsets)
              .option("minPartitions", 2)
              .load()
              .select("offset", "stream", "body"))
    slowed = stream.mapInArrow(slow, stream.schema)
    writer = (slowed.writeStream.format("parquet")
              .option("path", args.output)
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
