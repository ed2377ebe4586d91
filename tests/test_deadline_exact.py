"""The deadline gate in exact arithmetic: integer cycles against the deadline in cycles, a rational
from the deadline's decimal text and the board's clock (issue: 870,028 cycles at 20 MHz is exactly
43.5014 ms, which float milliseconds made 43.501400000000004 and failed)."""

import os
import math
from fractions import Fraction

import pytest

from nnbuild.checks import deadline, gates
from nnbuild.errors import NNBuildError


def record(cycles, deadline_ms, clock_hz=20_000_000):
    return deadline.verdict({"analyzer": "builtin-avr", "cycles": cycles}, deadline_ms, clock_hz, None,
                            f"m on avr @ {clock_hz / 1e6:g} MHz")


def test_a_bound_equal_to_the_deadline_passes():
    assert 870_028 / 20e6 * 1e3 > 43.5014            # what float milliseconds got wrong
    met = record(870_028, deadline.parse_deadline("43.5014ms"))
    assert met["met"] and met["deadline_cycles"] == 870_028
    deadline.gate_deadline(met)


def test_one_cycle_more_fails_with_two_different_numbers():
    missed = record(870_029, deadline.parse_deadline("43.5014ms"))
    assert not missed["met"]
    with pytest.raises(NNBuildError) as err:
        deadline.gate_deadline(missed)
    assert str(err.value) == ("WCET 43.50145 ms > deadline 43.5014 ms (870,029 cycles > 870,028 cycles; "
                              "m on avr @ 20 MHz)")


def test_units_are_exact_decimals():
    assert deadline.exact_deadline_ms("0.0435014s") == Fraction("43.5014")
    assert deadline.exact_deadline_ms("43501.4us") == Fraction("43.5014")
    assert deadline.exact_deadline_ms(43.5014) == Fraction("43.5014")
    assert deadline.parse_deadline("0.0435014s") == 43.5014


@pytest.mark.parametrize("text", ["1.0000000000000001ms", "43.50140000000000001ms"])
def test_more_digits_than_a_report_can_hold_are_refused(text):
    with pytest.raises(NNBuildError, match="more than 15 significant digits"):
        deadline.parse_deadline(text)


@pytest.mark.parametrize("text", ["1e9999s", "1e-9999s", "1e99999ms"])
def test_absurd_exponents_are_one_line(text):
    with pytest.raises(NNBuildError, match="not a (positive, finite )?duration"):
        deadline.parse_deadline(text)


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_the_gate_agrees_with_exact_arithmetic():
    """Any deadline written as a decimal: the bound passes exactly when cycles/clock <= deadline,
    the bound's own time rounded to `digits` decimals (up and down) included; a failing message never
    shows two equal numbers. (hypothesis is imported here: the quick tier's collection skips it.)"""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    clocks = st.sampled_from([1_000_000, 8_000_000, 16_000_000, 20_000_000, 48_000_000, 72_000_000, 168_000_000,
                              3_686_400, 11_059_200]) | st.integers(1, 10**9)

    @settings(max_examples=int(os.environ.get("NNBUILD_HYPOTHESIS_EXAMPLES", "400")), deadline=None)
    @given(cycles=st.integers(1, 10**10), clock_hz=clocks, digits=st.integers(1, 12))
    def agrees(cycles, clock_hz, digits):
        exact_ms = Fraction(cycles * 1000, clock_hz)
        for rounding in (math.floor, math.ceil):
            scaled = rounding(exact_ms * 10**digits)
            if scaled <= 0:
                continue
            text = str(scaled).rjust(digits + 1, "0")
            text = f"{text[:-digits]}.{text[-digits:]}ms"
            try:
                deadline_ms = deadline.parse_deadline(text)
            except NNBuildError:
                continue                                    # more than 15 significant digits: refused
            wanted = exact_ms <= Fraction(scaled, 10**digits)
            got = record(cycles, deadline_ms, clock_hz)
            assert got["met"] is wanted, (cycles, clock_hz, text)
            assert (not gates.violations(dict(base_report(), wcet=got))) is wanted
            if not wanted:
                line = deadline.deadline_violation(got)
                shown = line.split(" (")[0].replace("WCET ", "").split(" > deadline ")
                assert shown[0] != shown[1], line

    agrees()


def base_report():
    return {"tolerance": 1e-4, "max_abs_error_by_run": {}, "check_inputs": 1}


@pytest.mark.parametrize("cycles, met", [(870_028, True), (870_029, False)])
def test_a_multiitem_schedule_is_held_to_the_deadline_in_cycles_too(cycles, met):
    from nnbuild.kinds import multiitem
    board = {"wcet": {"schedule_cycles": cycles, "clock_hz": 20_000_000},
             "timing": {"end_to_end_cycles": cycles, "item_cycles": {"a": cycles}}, "measured_cycles": [cycles - 9]}
    record = multiitem.deadline_verdict(board, deadline.parse_deadline("43.5014ms"))
    assert record["met"] is met and record["deadline_cycles"] == 870_028
    assert record["verdict"].endswith(f"({cycles:,} cycles {'<=' if met else '>'} 870,028 cycles)")
