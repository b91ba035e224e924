"""The stream client on three RabbitMQ nodes in network namespaces of their own
(tests/netns_cluster.py), each with the stream plugin and ``stream.advertised_host`` set to
its address (the root namespace cannot resolve the nodes' short names).

- producers are declared on the stream's leader and consumers read a replica, each over a
  link to the node the metadata names;
- the leader's node SIGKILLed mid-publish: the producer finds the new leader (through
  another node), asks it for its last stored id, resends the rest; the stream holds each
  message once, every future confirmed; a consumer reading meanwhile skips nothing and
  reads nothing twice.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from broker_node import BrokerNodeError
from netns_cluster import NetnsCluster, NetnsError, netns_unsupported

pytestmark = pytest.mark.timeout(600)


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


def stream_urls(cluster) -> list[str]:
    return [f"rabbitmq-stream://guest:guest@{cluster.addresses[i]}:5552/" for i in sorted(cluster.nodes)]


def node_of(cluster, node) -> int:
    """The cluster's index of a node given as (host, port)."""
    return next(i for i, address in cluster.addresses.items() if address == node[0])


def wait_replicas(conn, name, count, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        where = conn.metadata(name)
        if where.leader is not None and len(where.replicas) >= count:
            return where
        if time.monotonic() > deadline:
            raise AssertionError(f"stream {name!r} has no leader and {count} replicas after {timeout} s: {where}")
        time.sleep(0.2)


def test_producers_go_to_the_leader_and_consumers_to_a_replica(cluster):
    from amqwire.client import stream

    name = f"placed-{uuid.uuid4().hex[:8]}"
    with stream.connect(stream_urls(cluster)) as conn:
        conn.create_stream(name, initial_cluster_size=3)
        where = wait_replicas(conn, name, 2)
        with conn.producer(name) as producer:
            assert producer._link.node == where.leader
            producer.send_batch([b"c-%d" % i for i in range(1000)]).result(30)
        # no end offset: a consumer that reached its end unsubscribes (and leaves its link),
        # which it could do before the look at its link
        with conn.consumer(name, offset="first") as consumer:
            assert consumer._link.node in where.replicas
            assert [consumer.get(30).offset for _ in range(1000)] == list(range(1000))
        conn.delete_stream(name)


def test_the_leader_killed_mid_publish(cluster):
    """SIGKILL the leader's node while a producer with a reference sends and a consumer
    reads: every future is confirmed, the stream holds each message once, in order, and
    the consumer reads each once."""
    from amqwire.client import stream

    total = 30_000
    name = f"failover-{uuid.uuid4().hex[:8]}"
    with stream.connect(stream_urls(cluster)) as conn:
        conn.create_stream(name, initial_cluster_size=3)
        where = wait_replicas(conn, name, 2)
        leader = node_of(cluster, where.leader)
        read: list[int] = []
        errors: list[BaseException] = []

        def consume():
            try:
                with conn.consumer(name, offset="first") as consumer:
                    while len(read) < total:
                        message = consumer.get(60)
                        if message is None:
                            break
                        read.append(message.offset)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        killed_at = None
        with conn.producer(name, reference="failover", max_in_flight=5000) as producer:
            futures = []
            for i in range(total):
                futures.append(producer.send(b"f-%d" % i))
                if i == total // 3:
                    killed_at = time.monotonic()
                    cluster.kill(leader)
            outcomes = []
            for future in futures:
                try:
                    outcomes.append(future.result(120))
                except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
                    outcomes.append(exc)
        recovered_in = time.monotonic() - killed_at
        failed = [o for o in outcomes if isinstance(o, Exception)]
        assert not failed, failed[:3]
        assert outcomes == list(range(1, total + 1))
        new_leader = conn.metadata(name).leader
        assert new_leader is not None and node_of(cluster, new_leader) != leader
        reader.join(120)
        assert not errors, errors
        assert read == list(range(total)), (len(read), len(set(read)))
        with conn.consumer(name, offset="first", end=total - 1) as check:
            bodies = [m.body for m in check]
        assert bodies == [b"f-%d" % i for i in range(total)]
        print(f"leader {leader} killed after {total // 3} sends; {producer.resent} resent; "
              f"all {total} confirmed {recovered_in:.1f} s after the kill, each stored once")
        conn.delete_stream(name)
    cluster.ensure_whole()
