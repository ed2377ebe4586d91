"""Gates: deadline parsing and precedence, verdicts, the soundness gate, the semantic gate."""

import math

import numpy as np
import pytest

from nnbuild.checks import deadline, memory, semantic
from nnbuild.checks.inputs import check_inputs
from nnbuild.errors import NNBuildError


@pytest.mark.parametrize("text, ms", [("100ms", 100.0), ("0.5s", 500.0), ("800us", 0.8), (2, 2.0),
                                      (" 1.5 ms ", 1.5), ("1e3us", 1.0)])
def test_deadline_units(text, ms):
    assert math.isclose(deadline.parse_deadline(text), ms)


@pytest.mark.parametrize("text", ["", "fast", "-1ms", "0ms", "10 min", "5", "1e400ms", "infms"])
def test_bad_deadline_is_one_clear_error(text):
    """Text needs its unit (a bare '5' could mean s or ms); numbers from config files are ms."""
    with pytest.raises(NNBuildError, match="is not a (positive, finite )?duration"):
        deadline.parse_deadline(text)


def test_command_line_beats_board_beats_example():
    board, example = {"deadline_ms": 50}, {"deadline_ms": 100}
    assert deadline.resolve_deadline("20ms", board, example) == (20.0, "command line")
    assert deadline.resolve_deadline("", board, example) == (50.0, "board")
    assert deadline.resolve_deadline(None, {"deadline_ms": None}, example) == (100.0, "example")
    assert deadline.resolve_deadline(None, {}, {}) == (None, None)


def verdict(cycles, deadline_ms, measured=None):
    return deadline.verdict({"analyzer": "builtin-avr", "cycles": cycles}, deadline_ms, 20_000_000, measured,
                            "f1tenth on avr @ 20 MHz")


def test_missed_deadline_is_the_documented_line():
    record = verdict(2_468_000, 100, measured=2_000_000)
    assert record["wcet_ms"] == pytest.approx(123.4) and not record["met"]
    assert record["bound_over_measured"] == pytest.approx(1.234)
    with pytest.raises(NNBuildError) as err:
        deadline.gate_deadline(record)
    assert str(err.value) == "WCET 123.4 ms > deadline 100 ms (f1tenth on avr @ 20 MHz)"


def test_met_deadline_reports_margin():
    record = verdict(1_000_000, 100)
    deadline.gate_deadline(record)
    assert record["margin_ms"] == pytest.approx(50.0) and record["margin"] == pytest.approx(0.5)
    assert "50% (50 ms of 100 ms deadline)" in deadline.bar(record)


def test_bound_below_measurement_fails_as_unsound():
    with pytest.raises(NNBuildError, match="unsound WCET bound"):
        deadline.gate_soundness(verdict(999, None, measured=1000))
    deadline.gate_soundness(verdict(1000, None, measured=1000))


def test_semantic_error_counts_nan_as_infinite():
    ref = np.array([[0.5, 0.25]])
    assert semantic.max_abs_error(np.array([[0.5, 0.3]]), ref)[0] == pytest.approx(0.05)
    assert semantic.max_abs_error(np.array([[np.nan, 0.25]]), ref)[0] == math.inf
    with pytest.raises(NNBuildError, match=r"max error inf > tolerance 1e-05 \(simavr\)"):
        semantic.gate_error(math.inf, 1e-5, "simavr")


def test_memory_gate_names_needed_and_available():
    board = {"name": "avr", "flash_bytes": 131072, "ram_bytes": 16384}
    use = memory.usage(board, {"text": 140000, "data": 0, "bss": 10}, stack_bytes=20)
    assert use["ram_bytes"] == 30
    with pytest.raises(NNBuildError, match="flash 140,000 bytes needed > 131,072 bytes on avr"):
        memory.gate_memory(board, use)


def test_check_inputs_are_reproducible_and_start_with_the_range_corners():
    a, b = check_inputs(4, 10, 5, (-1, 1)), check_inputs(4, 10, 5, (-1, 1))
    assert a.dtype == np.float32 and np.array_equal(a, b) and len(a) == 15
    assert np.all(a[0] == -1) and np.all(a[1] == 1) and np.all(a[2] == 0)
    assert np.all((a >= -1) & (a <= 1))
