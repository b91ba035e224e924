"""A Spark driver program, run by tests/test_spark_cluster.py in its own process, as a user's
job is: against a standalone cluster (``--master spark://...``) or a Spark Connect server
(``--remote sc://...``).

    python spark_jobs.py (--master URL | --remote URL) --amqp-url URL --queue-prefix P
                         --rows N --stream-dir DIR --checkpoint DIR

Publishes into three queues the caller declared, every body distinct:
- ``P.batch``: N rows through ``df.write.format("amqp")``, bodies ``batch-<i>``;
- ``P.stream``: three micro-batches through ``writeStream.format("amqp")`` from a file
  stream (three Parquet files of N/3 rows already in DIR), bodies ``stream-<i>``;
- ``P.frames``: N rows encoded by ``to_amqp_frames`` on the executors (and decoded back
  there by ``from_amqp_frames``, checked here), collected and sent by the driver with
  ``publish_encoded`` under confirms, bodies ``frames-<i>``;
- and reads ``P.read``, a stream of N messages ``read-<i>``, with ``spark.read.format("amqp")``
  in two tasks, checking every offset once with its body;
- with ``--stream-url`` (a broker with the stream plugin): N rows written twice into the
  stream ``P.sp`` over the stream protocol with one producerName, then read back over the
  stream protocol in two tasks: every row once (``done stream-protocol <N>``).
Prints one ``done <step>`` line per step; any failure ends the process with its traceback.
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--master")
    where.add_argument("--remote")
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--queue-prefix", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--stream-dir", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--stream-url")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import amqwire.spark
    from amqwire.client import connect

    builder = SparkSession.builder.appName("amqwire cluster test")
    if args.remote:
        builder = builder.remote(args.remote)
    else:
        builder = (builder.master(args.master)
                   .config("spark.executor.memory", "512m")
                   .config("spark.executor.cores", "1")
                   .config("spark.cores.max", "2")
                   .config("spark.task.maxFailures", "1")  # a failing task fails the test
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "2"))
    spark = builder.getOrCreate()
    if not args.remote:
        spark.sparkContext.setLogLevel("ERROR")
    amqwire.spark.register(spark)
    print(f"spark {spark.version} {'connect ' + args.remote if args.remote else args.master}", flush=True)
    prefix = args.queue_prefix

    # batch: the data source on the executors
    df = spark.range(0, args.rows, 1, 2).select(F.expr("cast(concat('batch-', id) as binary)").alias("body"))
    (df.write.format("amqp").mode("append").option("url", args.amqp_url)
       .option("routingKey", f"{prefix}.batch").option("confirmWindow", "500").save())
    print("done batch", flush=True)

    # streaming: three files, one micro-batch each
    stream = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(args.stream_dir)
              .select(F.expr("cast(concat('stream-', id) as binary)").alias("body")))
    query = (stream.writeStream.format("amqp").option("url", args.amqp_url)
             .option("routing_key", f"{prefix}.stream").option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    print("done stream", flush=True)

    # column function: encoded on the executors, sent from here
    with connect(args.amqp_url) as conn, conn.channel() as ch:
        ch.confirm_select()
        frames = spark.range(0, args.rows, 1, 2).select("id", amqwire.spark.to_amqp_frames(
            F.expr("cast(concat('frames-', id) as binary)"), f"{prefix}.frames", channel=ch.channel_id))
        # from_amqp_frames on the executors too: every row's frames decode to its own body
        table = frames.select("id", "frames", amqwire.spark.from_amqp_frames("frames").alias("m")).toArrow()
        decoded = zip(table.column("id").to_pylist(), table.column("m").to_pylist())
        wrong = [i for i, m in decoded if (m["body"], m["routing_key"]) != (b"frames-%d" % i, f"{prefix}.frames")]
        if wrong:
            raise AssertionError(f"from_amqp_frames: rows {wrong[:5]} decode to something else")
        data = b"".join(table.column("frames").to_pylist())
        ch.publish_encoded(data, table.num_rows).result(timeout=60)
    print("done frames", flush=True)

    # the source: a stream read on the executors, two tasks; every offset once with its body
    table = (spark.read.format("amqp").option("url", args.amqp_url).option("streams", f"{prefix}.read")
             .option("minPartitions", 2).load().select("offset", "body").toArrow())
    offsets = table.column("offset").to_pylist()
    if sorted(offsets) != list(range(args.rows)):
        raise AssertionError(f"read: {len(offsets)} rows, {len(set(offsets))} distinct offsets, not 0..{args.rows - 1}")
    wrong = [o for o, b in zip(offsets, table.column("body").to_pylist()) if b != b"read-%d" % o]
    if wrong:
        raise AssertionError(f"read: offsets {wrong[:5]} have another body")
    print(f"done read {len(offsets)}", flush=True)

    if args.stream_url:
        from amqwire.client import stream as stream_client

        target = f"{prefix}.sp"
        with stream_client.connect(args.stream_url) as conn:
            conn.create_stream(target)
        rows = spark.range(0, args.rows, 1, 2).select(F.expr("concat('sp-', id)").alias("body"))
        for _ in range(2):  # the same write twice under one producer name: stored once
            (rows.write.format("amqp").mode("append").option("url", args.stream_url).option("stream", target)
             .option("producerName", f"{prefix}-job").save())
        back = (spark.read.format("amqp").option("url", args.stream_url).option("streams", target)
                .option("minPartitions", 2).load().select("body").toArrow().column("body").to_pylist())
        with stream_client.connect(args.stream_url) as conn:
            conn.delete_stream(target)
        if sorted(back) != sorted(b"sp-%d" % i for i in range(args.rows)):
            raise AssertionError(f"stream protocol: {len(back)} rows, {len(set(back))} distinct, expected "
                                 f"sp-0 .. sp-{args.rows - 1} once each")
        print(f"done stream-protocol {len(back)}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
