"""A multi-item build as tasks of the pipeline's step table (issue 15): its checks, report and gate
as separate steps (SCons re-runs only what a change touches), and `nnbuild check` on its data."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnbuild import pipeline, steps
from nnbuild.errors import NNBuildError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"


def test_host_and_board_plans_are_checks_then_report_then_gate():
    host = pipeline.multiitem_plan(name="m", model=str(EXAMPLE), board="host", deadline="100ms")
    assert [(t.step, t.targets[0]) for t in host.tasks] == [
        ("multiitem_check", "host.json"), ("multiitem_check", "timing.json"), ("multiitem_check", "tsan.json"),
        ("multiitem_report", "report.json"), ("multiitem_gate", "gate.json")]
    timing, tsan = host.tasks[1].options, host.tasks[2].options
    assert timing["max_delay_us"] == 0 and tsan["sanitize"] and not timing.get("sanitize")
    # the deadline and tolerance reach the report only: a new deadline re-runs report and gate alone
    assert all("deadline" not in t.options for t in host.tasks[:3]) and host.tasks[3].options["deadline"] == "100ms"
    board = pipeline.multiitem_plan(name="m", model=str(EXAMPLE), board="avr", precision="q8")
    assert [t.targets[0] for t in board.tasks] == ["board.json", "report.json", "gate.json"]
    check = pipeline.multiitem_plan(name="m", model=str(EXAMPLE), board="host", data="d.npz", purpose="check")
    assert [t.targets[0] for t in check.tasks] == ["host.json"] and check.tasks[0].sources["data"] == "d.npz"
    for task in host.tasks + board.tasks:   # every task is a command line of the step table
        assert steps.command(task.step, **task.options).startswith(task.step)


def test_a_split_is_the_first_task_and_the_checks_read_what_it_makes(tmp_path):
    """items=N / map: the multiitem_split task makes split/<name>.nnef, which the checks and the
    report read; its options leave out precision, tolerance and deadline (they keep the split)."""
    model = ROOT / "firmware_examples" / "cifarnet" / "cifarnet.h5"
    the_plan = pipeline.multiitem_plan(name="c", model=str(model), board="avr", items=2, precision="q8",
                                       deadline="5s")
    split, check, report, _ = the_plan.tasks
    assert (split.step, split.targets) == ("multiitem_split", ["split/cifarnet.nnef/graph.nnef",
                                                               "split/cifarnet.nnef/split.json"])
    assert split.options == {"target": "avr", "shape": "v2", "items": 2, "item_map": None}
    assert check.sources["model"] == report.sources["model"] == "split/cifarnet.nnef/graph.nnef"
    assert report.sources["split"] == "split/cifarnet.nnef/split.json"
    (tmp_path / "map.json").write_text("{}")
    by_map = pipeline.multiitem_plan(name="c", model=str(model), board="host", item_map=str(tmp_path / "map.json"))
    assert by_map.tasks[0].options["item_map"] == str(tmp_path / "map.json") and by_map.nodes["split"]
    assert steps.command("multiitem_split", **split.options).startswith("multiitem_split")


@pytest.mark.e2e
def test_nnbuild_check_runs_the_items_on_the_data_and_fails_on_its_outputs(tmp_path):
    x = np.random.RandomState(0).uniform(-1, 1, (3, 128)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    record = pipeline.check(str(EXAMPLE), str(tmp_path / "data.npz"), precision="q16-acc32", tolerance=1e-2)
    assert record["bit_equal_runs"] == record["runs"] and len(record["first_outputs"]) == 3
    np.savez(tmp_path / "wrong.npz", x=x, y=np.zeros((3, 10), np.float32))
    result = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(EXAMPLE), "--data", str(tmp_path / "wrong.npz")],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0 and "max |C - y| = " in result.stdout
    assert "max error" in result.stderr and "> tolerance 0.0001" in result.stderr
    with pytest.raises(NNBuildError):
        pipeline.check(str(EXAMPLE), str(tmp_path / "wrong.npz"))


def test_a_failing_check_leaves_no_gate_of_an_earlier_build(tmp_path):
    """The build folder is one for every precision: a gate passed in float32 must not stay beside
    a check that fails in another precision (here refused: fixed point in shape v1)."""
    gate = tmp_path / "gate.json"
    gate.write_text('{"gates": "passed"}\n')
    with pytest.raises(NNBuildError) as exc:
        steps.multiitem_check(str(EXAMPLE), str(tmp_path / "host.json"), precision="q16-acc32", shape="v1")
    assert "fixed point by shape v2 only" in str(exc.value)
    assert not gate.exists() and not (tmp_path / "host.json").exists()
