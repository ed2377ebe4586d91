"""The host's timed net on measured costs (issue 15, item 5): the measured end-to-end time of every
run within the critical path of its measured segment and synchronisation costs, and not without
the synchronisation costs."""

from pathlib import Path

import pytest

from nnbuild.checks import multiitem as multiitem_check
from nnbuild.checks import multiitem_timing as timed
from nnbuild.frontends import nnef_items

EXAMPLE = Path(__file__).resolve().parents[1] / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"


@pytest.fixture(scope="module")
def example_system():
    return nnef_items.load(EXAMPLE)


def flags_run():
    """A run of the example under sync=flags, ns after the call: (arrive, done) per action."""
    actions = {("ITEM1", 0): (12, 30), ("ITEM1", 1): (31, 33), ("ITEM1", 2): (34, 120), ("ITEM1", 3): (121, 125),
               ("ITEM1", 4): (126, 140),
               ("ITEM2", 0): (41, 50), ("ITEM2", 1): (51, 100), ("ITEM2", 2): (101, 105),
               ("ITEM3", 0): (22, 45), ("ITEM3", 1): (46, 90), ("ITEM3", 2): (91, 95)}
    return {"end": 150, "start": {"ITEM1": 10, "ITEM2": 40, "ITEM3": 20},
            "actions": {k: {"arrive": a, "done": d} for k, (a, d) in actions.items()}}


def test_measured_costs_are_the_hand_offs_wait_to_wake_latencies(example_system):
    costs = timed.measured_costs(example_system, "flags", flags_run())
    # ITEM2's get woke 9 ns after ITEM1 published at 33; ITEM1's get of vsync2 15 ns after ITEM2's send
    assert costs[("wake", "ITEM2", 0)] == 50 - 41 and costs[("wake", "ITEM3", 0)] == 45 - 33
    assert costs[("wake", "ITEM1", 2)] == 120 - 105 and costs[("wake", "ITEM1", 3)] == 125 - 121
    assert costs[("segment", "ITEM2", 1)] == 49 and costs[("send", "ITEM1", 1)] == 2
    assert costs[("spawn", "ITEM2")] == 40 and costs[("join",)] == 10 and costs[("gap", "ITEM1", 4)] == 1


def test_critical_path_of_the_measured_costs_is_the_end_to_end_time(example_system):
    costs = timed.measured_costs(example_system, "flags", flags_run())
    path, share = timed.critical_path(example_system, "flags", costs)
    assert path == 150
    # spawn ITEM2, get, segment, send, ITEM1's get of vsync2, gaps, its tail, join
    assert share["spawn"] == 40 and share["segment"] == 49 + 14 and share["wake"] == 9 + 15 + 4
    bare, _ = timed.critical_path(example_system, "flags", costs, charged=timed.ITEM_TERMS)
    assert bare < 150


def test_the_check_fails_when_the_sync_costs_are_not_charged(example_system):
    costs = timed.measured_costs(example_system, "flags", flags_run())
    assert timed.soundness(example_system, "flags", [(costs, 150)])["first_violation"] is None
    uncharged = {k: v for k, v in costs.items() if k[0] not in timed.SYNC_TERMS}
    record = timed.soundness(example_system, "flags", [(costs, 150), (uncharged, 150)])
    assert record["within_critical_path"] == 1 and record["within_without_sync_costs"] == 0
    assert record["first_violation"].startswith("run 1: measured end-to-end 150 ns > critical path")
    failed = {"sanitizer_reports": 0, "exit_status": 0, "bit_equal_runs": 2, "runs": 2, "trace_violation": None,
              "timing": record}
    assert multiitem_check.failure(failed).startswith("host timing unsound: run 1:")


def test_barrier_writer_waits_for_its_readers(example_system):
    run = flags_run()
    # under barriers ITEM1's send of vsync1 opens when ITEM2 (arrived 41) and ITEM3 (22) have arrived
    run["actions"][("ITEM1", 1)]["release"] = 47
    run["actions"][("ITEM1", 2)]["arrive"] = 48
    costs = timed.measured_costs(example_system, "barrier", run)
    assert costs[("release", "ITEM1", 1)] == 47 - 41 and costs[("gap", "ITEM1", 2)] == 1
    assert costs[("wake", "ITEM2", 0)] == 50 - 41
    assert timed.critical_path(example_system, "barrier", costs)[0] == 150


@pytest.mark.e2e
@pytest.mark.parametrize("sync", ["flags", "barrier"])
def test_host_runs_are_within_the_timed_net_only_with_sync_costs(example_system, tmp_path, sync):
    record = multiitem_check.check_host(example_system, tmp_path, shape="v2", runs=300, max_delay_us=0, sync=sync,
                                        cases=4)
    timing = record["timing"]
    assert record["ok"] and timing["runs"] == 300 and timing["within_critical_path"] == 300
    assert timing["within_without_sync_costs"] < 300
    assert timing["bound_of_worst_costs_ns"] >= timing["max_end_to_end_ns"]
