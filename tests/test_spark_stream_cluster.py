"""The Spark stream-protocol tasks on three RabbitMQ nodes in network namespaces of their
own (tests/netns_cluster.py, as tests/test_stream_client_cluster.py makes them), without
Spark: the task functions are called as Spark calls them in a task.

- a source task's link is placed on a replica of the stream, a sink task's on its leader;
  the rows read are every offset once;
- the leader's node SIGKILLed while a sink task writes: the task fails (Spark would run it
  again); run again, it finds the new leader, skips what the broker stored, and the stream
  holds each row once.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from broker_node import BrokerNodeError
from netns_cluster import NetnsCluster, NetnsError, netns_unsupported

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def cluster():
    reason = netns_unsupported()
    if reason:
        pytest.skip(reason)
    try:
        made = NetnsCluster(3, start_timeout=180, plugins=["rabbitmq_stream"], node_config_of=lambda address: {
            "stream.listeners.tcp.1": f"{address}:5552", "stream.advertised_host": address}).start()
    except (NetnsError, BrokerNodeError, OSError) as exc:
        pytest.fail(f"the three-node cluster in network namespaces could not be made: {exc}", pytrace=False)
    yield made
    made.cleanup()


def urls(cluster) -> list[str]:
    return [f"rabbitmq-stream://guest:guest@{cluster.addresses[i]}:5552/" for i in sorted(cluster.nodes)]


def new_stream(cluster) -> tuple[str, object]:
    from amqwire.client import stream

    name = f"spark-{uuid.uuid4().hex[:8]}"
    with stream.connect(urls(cluster)) as conn:
        conn.create_stream(name, initial_cluster_size=3)
        deadline = time.monotonic() + 60
        while True:
            where = conn.metadata(name)
            if where.leader is not None and len(where.replicas) >= 2:
                return name, where
            assert time.monotonic() < deadline, f"{name}: no leader and 2 replicas after 60 s: {where}"
            time.sleep(0.2)


def batches(count, size=1000):
    import pyarrow as pa

    for start in range(0, count, size):
        ids = [str(i) for i in range(start, min(start + size, count))]
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids, pa.string()), pa.array([{"message_id": i} for i in ids],
                                                   pa.struct([("message_id", pa.string())]))],
            names=["body", "properties"])


def sink_settings(cluster, name, producer_name):
    from pyspark.sql.types import StringType, StructField, StructType

    from amqwire.spark.stream_sink import StreamSinkSettings

    schema = StructType([StructField("body", StringType()),
                         StructField("properties", StructType([StructField("message_id", StringType())]))])
    return StreamSinkSettings.from_options({"url": ",".join(urls(cluster)), "stream": name,
                                            "producerName": producer_name, "confirmTimeout": "30"}, schema)


def read_all(cluster, name, end):
    from amqwire.spark.source import SourceSettings, StreamRange
    from amqwire.spark.stream_source import read_stream_range

    settings = SourceSettings.from_options({"url": ",".join(urls(cluster)), "streams": name}, streaming=False)
    return [row for batch in read_stream_range(settings, StreamRange(name, 0, end)) for row in batch.to_pylist()]


def test_source_tasks_read_a_replica_and_sink_tasks_write_to_the_leader(cluster):
    from amqwire.client.stream.url import stream_parameters_list
    from amqwire.spark.stream_link import TaskLink
    from amqwire.spark.stream_sink import publish_stream_batches

    name, where = new_stream(cluster)
    parameters = stream_parameters_list(urls(cluster))
    for _ in range(3):  # whichever URL answers first, the link moves to the right node
        reader = TaskLink.open(parameters[::-1], name, leader=False)
        writer = TaskLink.open(parameters, name, leader=True)
        try:
            assert reader.node in where.replicas and writer.node == where.leader
        finally:
            reader.close()
            writer.close()
    done = publish_stream_batches(sink_settings(cluster, name, "placed"), batches(5000), streaming=False)
    assert (done.rows, done.stored, done.skipped) == (5000, 5000, 0)
    rows = read_all(cluster, name, 5000)
    assert [row["offset"] for row in rows] == list(range(5000))
    assert [row["properties"]["message_id"] for row in rows] == [str(i) for i in range(5000)]


def test_the_leader_killed_while_a_sink_task_writes(cluster):
    from amqwire.spark.errors import SinkError
    from amqwire.spark.stream_sink import publish_stream_batches

    name, where = new_stream(cluster)
    leader = next(i for i, address in cluster.addresses.items() if address == where.leader[0])
    settings = sink_settings(cluster, name, "failover")
    total = 60_000
    sent = threading.Event()

    def slow(count):
        for index, batch in enumerate(batches(count)):
            if index == 10:
                sent.set()
            time.sleep(0.02)
            yield batch

    killer = threading.Thread(target=lambda: sent.wait(60) and cluster.kill(leader), daemon=True)
    killer.start()
    with pytest.raises(SinkError) as info:
        publish_stream_batches(settings, slow(total), streaming=False)
    killer.join(60)
    print(f"attempt 1 failed with {info.value.rows_confirmed} rows confirmed: {info.value}")
    deadline = time.monotonic() + 120
    while True:  # the task again, as Spark runs it: the new leader, the stored rows skipped
        try:
            done = publish_stream_batches(settings, batches(total), streaming=False)
            break
        except SinkError as exc:
            assert time.monotonic() < deadline, f"no new leader took the writes within 120 s: {exc}"
            time.sleep(1)
    print(f"attempt 2: {done.stored} rows stored, {done.skipped} skipped as stored already")
    assert done.skipped >= info.value.rows_confirmed and done.stored + done.skipped == total
    from amqwire.client import stream

    with stream.connect(urls(cluster)) as conn:
        last = conn.stream_stats(name).last_offset
    rows = read_all(cluster, name, last + 1)
    ids = [row["properties"]["message_id"] for row in rows]
    assert len(ids) == total and sorted(map(int, ids)) == list(range(total))
