"""The network-fault harness's own housekeeping (tests/netns_cluster.py), without RabbitMQ:
leftovers of a test process killed with SIGKILL are removed by the next run, and nothing
of a live process is touched."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

import netns_cluster
from netns_cluster import CLIENT, OWNERS, NetnsCluster, netns_unsupported, reap_stale


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _leftover(owner_pid: int) -> str:
    """A namespace and a bridge named as a cluster's, with an owner file naming ``owner_pid``."""
    cluster_id = f"{netns_cluster.PREFIX}{uuid.uuid4().hex[:6]}"
    assert _ip("netns", "add", f"{cluster_id}-1").returncode == 0
    assert _ip("link", "add", cluster_id, "type", "bridge").returncode == 0
    OWNERS.mkdir(parents=True, exist_ok=True)
    (OWNERS / cluster_id).write_text(f"{owner_pid}\n")
    return cluster_id


def _exists(cluster_id: str) -> tuple[bool, bool, bool]:
    namespaces = _ip("netns", "list").stdout
    return (f"{cluster_id}-1" in namespaces, _ip("link", "show", cluster_id).returncode == 0,
            (OWNERS / cluster_id).exists())


@pytest.fixture
def root_with_netns():
    reason = netns_unsupported()
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.fail("the network-fault harness needs root (ip netns add)", pytrace=False)


def test_leftovers_of_a_dead_owner_are_removed_and_a_live_ones_kept(root_with_netns):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    gone = _leftover(int(dead.stdout))
    mine = _leftover(os.getpid())
    try:
        reaped = reap_stale()
        assert gone in reaped
        assert _exists(gone) == (False, False, False)
        assert _exists(mine) == (True, True, True), "a live process's cluster was touched"
    finally:
        netns_cluster._remove(gone)
        netns_cluster._remove(mine)
        (OWNERS / mine).unlink(missing_ok=True)
        (OWNERS / gone).unlink(missing_ok=True)


def test_faults_name_real_members(root_with_netns):
    """A fault naming something that is not a node, or a share out of range, is refused
    before any rule is made (the cluster is not even started)."""
    with pytest.raises(ValueError, match="size must be at least 1"):
        NetnsCluster(0)
    cluster = NetnsCluster(3)
    with pytest.raises(ValueError, match="not a node of the cluster: 7"):
        cluster.partition({CLIENT}, {7})
    with pytest.raises(ValueError, match="a member on both sides"):
        cluster.partition({1, 2}, {2, 3})
    with pytest.raises(ValueError, match="cannot be partitioned from itself"):
        cluster.drop(0.5, between=(CLIENT, CLIENT))
    with pytest.raises(ValueError, match=r"share must be in \(0, 1\], got 1.5"):
        cluster.drop(1.5, between=(CLIENT, 1))
