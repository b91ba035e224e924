"""The network-fault checker's verdicts (tests/fault_checker.py), without a broker: a
checker that could not see a lost confirmed message would make every fault test pass."""
from __future__ import annotations

import pytest

from fault_checker import FaultChecker


def test_counts_every_outcome_and_each_stored_copy():
    check = FaultChecker("unit", "none")
    bodies = [check.body(n) for n in range(6)]
    for n in (0, 1, 2):
        check.confirmed(n)
    check.failed(3, ConnectionError("lost"))
    check.failed(4, TimeoutError("late"))
    check.confirmed(5)
    stored = [bodies[0], bodies[1], bodies[1], bodies[2], bodies[3], bodies[5]]
    report = check.report(stored)
    assert (report.sent, report.confirmed, report.failed, report.unsettled) == (6, 4, 2, 0)
    assert (report.stored, report.missing, report.failed_present, report.duplicates, report.unknown) == (6, 0, 1, 1, 0)
    assert report.failure_kinds == {"ConnectionError": 1, "TimeoutError": 1}
    report.verify()
    assert "missing=0" in report.line() and "duplicates=1" in report.line()


def test_a_confirmed_message_missing_fails_naming_it():
    check = FaultChecker("unit", "none")
    for n in range(3):
        check.body(n)
        check.confirmed(n)
    report = check.report([check.body(0), check.body(2)])
    assert report.missing == 1 and report.missing_ids == [1]
    with pytest.raises(AssertionError, match=r"1 sends reported confirmed are not in the queue \(first ids: \[1\]\)"):
        report.verify()


def test_a_send_without_an_outcome_is_unsettled_and_fails():
    check = FaultChecker("unit", "none")
    check.body(0)
    check.confirmed(0)
    check.body(1)  # never settled
    check.body(2)
    check.unsettled(2)
    report = check.report([check.body(0)])
    assert report.unsettled == 2
    with pytest.raises(AssertionError, match="2 sends never reported an outcome"):
        report.verify()


def test_bodies_of_another_run_are_unknown():
    check, other = FaultChecker("unit", "none"), FaultChecker("unit", "none")
    check.body(0)
    check.confirmed(0)
    report = check.report([check.body(0), other.body(0), b"garbage"])
    assert report.unknown == 2
    with pytest.raises(AssertionError, match="2 stored messages match no send"):
        report.verify()


def test_resume_time_runs_from_the_fault_to_the_first_success_after_it():
    check = FaultChecker("unit", "none")
    check.body(0)
    check.confirmed(0)
    assert check.resume_s is None  # no fault yet
    check.fault_started()
    check.body(1)
    check.failed(1, ConnectionError("lost"))
    assert check.resume_s is None
    check.body(2)
    check.confirmed(2)
    assert check.resume_s is not None and check.resume_s >= 0
