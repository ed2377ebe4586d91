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
    board, example = {"deadline_ms": 50, "clock_hz": 1}, {"deadline_ms": 100}
    assert deadline.resolve_deadline("20ms", board, example) == (20.0, "command line")
    assert deadline.resolve_deadline("", board, example) == (50.0, "board")
    assert deadline.resolve_deadline(None, {"deadline_ms": None, "clock_hz": 1}, example) == (100.0, "example")
    assert deadline.resolve_deadline(None, {"clock_hz": 1}, {}) == (None, None)


def test_an_example_deadline_does_not_apply_to_the_untimed_host():
    """The build machine has no clock: an example's real-time deadline is not its requirement (the
    host build checks semantics); a deadline given on the command line still applies."""
    host = {"deadline_ms": None, "clock_hz": None}
    assert deadline.resolve_deadline(None, host, {"deadline_ms": 100}) == (None, None)
    assert deadline.resolve_deadline("5ms", host, {"deadline_ms": 100}) == (5.0, "command line")


def verdict(cycles, deadline_ms, measured=None):
    return deadline.verdict({"analyzer": "builtin-avr", "cycles": cycles}, deadline_ms, 20_000_000, measured,
                            "f1tenth on avr @ 20 MHz")


def test_missed_deadline_is_the_documented_line():
    record = verdict(2_468_000, 100, measured=2_000_000)
    assert record["wcet_ms"] == pytest.approx(123.4) and not record["met"]
    assert record["bound_over_measured"] == pytest.approx(1.234)
    with pytest.raises(NNBuildError) as err:
        deadline.gate_deadline(record)
    assert str(err.value) == ("WCET 123.4 ms > deadline 100 ms (2,468,000 cycles > 2,000,000 cycles; "
                              "f1tenth on avr @ 20 MHz)")


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


def report_record(deadline_text=None, origin=None, wcet_record=None, wcet_unavailable="no WCET analyzer for target "
                  "cortex-m4 (no timing model)"):
    """The gate-relevant part of a report.json, built by the report module itself."""
    from nnbuild.checks import report
    fields = report.wcet_fields("m", {"name": "cortex-m4", "wcet_tool": None, "clock_hz": 168_000_000}, None,
                                wcet_record, deadline_text, origin)
    return {"tolerance": 1e-4, "max_abs_error_by_run": {"host": 1e-7}, "check_inputs": 4, **fields}


def test_a_deadline_that_cannot_be_checked_fails_unless_waived():
    """cortex-m4 has no analyzer: a deadline from any source fails in one line saying why; deadline=none
    and wcet=skip pass, and report.json says what was waived."""
    from nnbuild.checks import gates
    for origin in ("example", "board", "command line"):
        text, got_origin = deadline.deadline_spec("100ms" if origin == "command line" else None,
                                                  {"deadline_ms": 100 if origin == "board" else None, "clock_hz": 1},
                                                  {"deadline_ms": 100 if origin == "example" else None})
        record = report_record(text, got_origin)
        assert record["deadline_ms"] == 100.0 and record["deadline_origin"] == origin and record["waivers"] == []
        assert gates.violations(record) == [
            "deadline 100 ms cannot be checked: no WCET analyzer for target cortex-m4 (no timing model) "
            f"(deadline from the {origin}); waive it with deadline=none or wcet=skip"]
    text, origin = deadline.deadline_spec(None, {"deadline_ms": None, "clock_hz": 1}, {"deadline_ms": 100},
                                          wcet="skip")
    record = report_record(text, origin)
    assert gates.violations(record) == [] and record["deadline_ms"] is None
    assert record["waivers"] == ["wcet=skip: deadline 100 ms (example) not checked"]
    text, origin = deadline.deadline_spec("none", {"deadline_ms": 50}, {"deadline_ms": 100})
    record = report_record(text, origin)
    assert gates.violations(record) == [] and record["waivers"] == [
        "deadline=none: the board deadline 50 ms is not checked"]
    assert deadline.deadline_spec("none", {}, {}) == (None, None)
    assert deadline.deadline_spec(None, {}, {}, wcet="skip") == (None, None)
    with pytest.raises(NNBuildError, match="wcet 'never' is not one of auto, skip"):
        deadline.deadline_spec(None, {}, {}, wcet="never")


def test_no_deadline_is_null_not_the_string_none_and_the_summary_shows_waivers():
    from nnbuild.checks import report
    record = report_record(None, None)
    assert record["deadline_ms"] is None and record["deadline_origin"] is None and record["waivers"] == []
    waived = report_record(*deadline.deadline_spec("20ms", {}, {}, wcet="skip"))
    summary = report.summary_text({**waived, "model": "m", "target": "cortex-m4", "board": "b", "clock_hz": None,
                                   "precision": "float32", "shape": "mlp", "opt": "-O2", "measured_cycles": None,
                                   "flash_bytes": 1, "flash_capacity": 2, "ram_bytes": 1, "ram_capacity": 2})
    assert "  waived   : wcet=skip: deadline 20 ms (command line) not checked" in summary.splitlines()


def test_a_waived_deadline_is_not_gated_even_with_a_bound():
    """wcet=skip where the analyzer ran anyway: the bound is reported, the deadline not judged."""
    from nnbuild.checks import gates
    bound = {"analyzer": "builtin-avr", "cycles": 4_000_000_000, "per_layer": {}}
    record = report_record(*deadline.deadline_spec("1ms", {}, {}, wcet="skip"), wcet_record=bound)
    assert gates.violations(record) == [] and record["wcet"]["met"] is None
    record = report_record(*deadline.deadline_spec("1ms", {}, {}), wcet_record=bound)
    assert gates.violations(record) and "> deadline 1 ms" in gates.violations(record)[0]


@pytest.mark.parametrize("spec", ["maybe:100ms", "none:fast", "unchecked:"])
def test_bad_report_deadline_spec_is_one_line(spec):
    with pytest.raises(NNBuildError, match="deadline"):
        deadline.read_spec(spec)
