"""The deadline gate: a sound WCET bound against the deadline, in one verdict line.

Deadline precedence (lowest to highest): the example's config, the board, the command line.

A deadline that cannot be checked (the board has no WCET analyzer, or its tool is missing) fails
the build unless the user waives it: `deadline=none` (no deadline at all) or `wcet=skip` (build and
check without WCET; the deadline is not checked). The report step's --deadline carries the waiver
(`deadline_spec` writes it, `read_spec` reads it) and report.json lists it under "waivers".
"""

import decimal
import math
import re
from fractions import Fraction

from nnbuild.errors import NNBuildError

_UNITS_MS = {"s": Fraction(1000), "ms": Fraction(1), "us": Fraction(1, 1000), "µs": Fraction(1, 1000),
             "ns": Fraction(1, 10**6)}
#: a deadline's significant digits at most: every such decimal survives the float of report.json
#: exactly (DBL_DIG), so the gate's rational arithmetic compares against what the user wrote
MAX_DEADLINE_DIGITS = 15


def exact_deadline_ms(value):
    """A deadline in ms as an exact rational, from its decimal text. Text needs its unit ('100ms',
    '800us', '0.1s'): a bare '5' could mean seconds or milliseconds. Numbers (example.json's and a
    board's `deadline_ms`) are ms, read through their shortest decimal (what the JSON file says)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (math.isfinite(value) and value > 0):
            raise NNBuildError(f"deadline '{value}' is not a positive, finite duration")
        digits, ms = repr(float(value)), Fraction(repr(float(value)))
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d{1,4})?)\s*(s|ms|us|µs|ns)\s*", str(value))
        if not match:
            raise NNBuildError(f"deadline '{value}' is not a duration with its unit, like 100ms, 800us or 0.1s")
        digits, ms = match.group(1), Fraction(match.group(1)) * _UNITS_MS[match.group(2)]
    significant = re.sub(r"[eE].*", "", digits).replace(".", "").lstrip("0").rstrip("0")
    if len(significant) > MAX_DEADLINE_DIGITS:
        raise NNBuildError(f"deadline '{value}' has more than {MAX_DEADLINE_DIGITS} significant digits")
    if not (0 < ms < Fraction(10) ** 300) or float(ms) == 0:
        raise NNBuildError(f"deadline '{value}' is not a positive, finite duration")
    return ms


def parse_deadline(value):
    """A deadline in ms (the float nearest its exact value; see exact_deadline_ms)."""
    return float(exact_deadline_ms(value))


def deadline_cycles(deadline_ms, clock_hz):
    """The most cycles that meet a deadline (ms) at clock_hz, exactly: floor(deadline * clock / 1000),
    the deadline read back from its shortest decimal. A bound of exactly this many cycles passes."""
    exact = Fraction(repr(float(deadline_ms))) * Fraction(repr(float(clock_hz))) / 1000
    return math.floor(exact)


def cycles_ms(cycles, clock_hz):
    """Cycles as ms (float, for display and report.json; the gate compares cycles)."""
    return float(Fraction(int(cycles)) * 1000 / Fraction(repr(float(clock_hz))))


#: the deadline= value that waives every deadline (the board's and the example's too)
NO_DEADLINE = "none"
#: the wcet= values: run the board's analyzer (and check the deadline), or skip both
WCET_MODES = ("auto", "skip")
#: how each interface spells the two waivers (the same words everywhere: none, skip), so a hint
#: shows the syntax of the interface the user is in
WAIVER_SYNTAX = {
    "scons": ("deadline=none", "wcet=skip"),            # scons ... deadline=none (an SConstruct's options)
    "nnmodel": ('deadline="none"', 'wcet="skip"'),      # env.NNModel(..., deadline="none")
    "cmake": ("DEADLINE none", "WCET skip"),            # nnbuild_add_model(... DEADLINE none)
    "cli": ("--deadline none", "--wcet skip"),          # nnbuild check ... --deadline none
}
INTERFACES = tuple(WAIVER_SYNTAX)


def waiver_hint(interface=None):
    """'waive it with deadline=none or wcet=skip' in the syntax of `interface` (default: scons)."""
    no_deadline, skip = WAIVER_SYNTAX.get(interface or "scons", WAIVER_SYNTAX["scons"])
    return f"waive it with {no_deadline} or {skip}"


def is_no_deadline(value):
    """deadline=none in any interface's spelling (none, "none", None is not a waiver)."""
    return isinstance(value, str) and value.strip().lower() == NO_DEADLINE


def resolve_deadline(command_line=None, board=None, example=None):
    """The deadline in ms that applies, and where it came from (None when nobody set one, or when
    the command line says deadline=none).

    An example's deadline is a real-time requirement of a timed target: it applies to boards with
    a clock, not to an untimed board (the build machine, `host`, has no clock_hz: its builds check
    semantics only). A deadline given on the command line always applies."""
    if is_no_deadline(command_line):
        return None, None
    timed = board is None or board.get("clock_hz") is not None
    for origin, value in (("command line", command_line), ("board", (board or {}).get("deadline_ms")),
                          ("example", (example or {}).get("deadline_ms") if timed else None)):
        if value not in (None, ""):
            return parse_deadline(value), origin
    return None, None


def deadline_spec(command_line=None, board=None, example=None, wcet="auto"):
    """(report step --deadline value, origin): the deadline that applies as '<ms>ms', or a waived one
    as 'none:<ms>ms' (deadline=none) or 'unchecked:<ms>ms' (wcet=skip); (None, None) when there is
    no deadline to check or waive."""
    if wcet not in WCET_MODES:
        raise NNBuildError(f"wcet '{wcet}' is not one of {', '.join(WCET_MODES)}")
    if is_no_deadline(command_line):
        ms, origin = resolve_deadline(None, board, example)
        return (f"none:{ms!r}ms", origin) if ms else (None, None)
    ms, origin = resolve_deadline(command_line, board, example)
    if ms is None:
        return None, None
    return (f"unchecked:{ms!r}ms" if wcet == "skip" else f"{ms!r}ms"), origin


def read_spec(spec, origin=None):
    """The report step's --deadline: (deadline in ms to check or None, waiver line or None)."""
    if spec in (None, ""):
        return None, None
    waived, _, text = str(spec).rpartition(":")
    if waived == "none":
        return None, f"deadline=none: the {origin or 'given'} deadline {fmt_ms(parse_deadline(text))} is not checked"
    if waived == "unchecked":
        return None, f"wcet=skip: deadline {fmt_ms(parse_deadline(text))} ({origin or 'given'}) not checked"
    if waived:
        raise NNBuildError(f"deadline '{spec}' is not a duration, none:DURATION or unchecked:DURATION")
    return parse_deadline(text), None


def verdict(wcet, deadline_ms, clock_hz, measured_cycles, label):
    """The gate's record: bound, deadline, margin, and bound/measured (the tightness)."""
    wcet_ms = cycles_ms(wcet["cycles"], clock_hz)
    budget = None if deadline_ms is None else deadline_cycles(deadline_ms, clock_hz)
    record = {
        "analyzer": wcet["analyzer"], "wcet_cycles": wcet["cycles"], "wcet_ms": wcet_ms,
        "deadline_ms": deadline_ms, "deadline_cycles": budget, "clock_hz": clock_hz,
        "margin_ms": None if deadline_ms is None else deadline_ms - wcet_ms,
        "margin": None if deadline_ms is None else (deadline_ms - wcet_ms) / deadline_ms,
        "measured_cycles": measured_cycles,
        "bound_over_measured": (wcet["cycles"] / measured_cycles) if measured_cycles else None,
        "met": None if deadline_ms is None else int(wcet["cycles"]) <= budget, "label": label,
    }
    return record


def soundness_violation(record):
    """A bound below a measured run is an analyzer bug: the clause that fails the build, or None."""
    measured = record.get("measured_cycles")
    if measured and record["wcet_cycles"] < measured:
        return (f"unsound WCET bound: {record['wcet_cycles']:,} cycles < measured {measured:,} "
                f"({record['label']}, analyzer {record['analyzer']})")
    return None


def deadline_violation(record):
    """The missed deadline's clause, in cycles (integers, never equal when the gate fails) and in ms
    with as many digits as tell the two apart."""
    if record["deadline_ms"] is not None and not record["met"]:
        wcet_text, deadline_text = distinct_ms(*exact_ms(record))
        budget = record.get("deadline_cycles")
        cycles = (f"{record['wcet_cycles']:,} cycles > {budget:,} cycles" if budget is not None
                  else f"{record['wcet_cycles']:,} cycles")
        return f"WCET {wcet_text} > deadline {deadline_text} ({cycles}; {record['label']})"
    return None


def exact_ms(record):
    """(bound, deadline) in ms as exact fractions: the bound's cycles over the clock, the deadline's
    decimal text (at most 15 significant digits, so its float's repr gives it back)."""
    clock, cycles = record.get("clock_hz"), record.get("wcet_cycles")
    bound = Fraction(cycles * 1000, clock) if clock and cycles is not None else Fraction(repr(record["wcet_ms"]))
    return bound, Fraction(repr(record["deadline_ms"]))


def distinct_ms(a_ms, b_ms):
    """Two durations as text, with the fewest significant digits (4 at least) that show them differ;
    exact fractions are written from their exact values, so different durations never read alike."""
    for digits in range(4, 60):
        a, b = fmt_ms(a_ms, digits), fmt_ms(b_ms, digits)
        if a != b:
            return a, b
    return fmt_ms(a_ms, 60), fmt_ms(b_ms, 60)


def gate_soundness(record):
    message = soundness_violation(record)
    if message:
        raise NNBuildError(message)


def gate_deadline(record):
    message = deadline_violation(record)
    if message:
        raise NNBuildError(message)


def fmt_ms(ms, digits=4):
    """A duration in ms (us below 0.01 ms) with `digits` significant digits; a Fraction is rounded
    from its exact value."""
    if isinstance(ms, Fraction):
        unit, value = ("ms", ms) if ms >= Fraction(1, 100) else ("us", ms * 1000)
        exact = decimal.Context(prec=digits).divide(decimal.Decimal(value.numerator), decimal.Decimal(value.denominator))
        return f"{exact:.{digits}g} {unit}"
    return f"{ms:.{digits}g} ms" if ms >= 0.01 else f"{ms * 1e3:.{digits}g} us"


def bar(record, width=10):
    """`WCET: [====      ] 42% (41.2 ms of 100 ms deadline)`."""
    if record["deadline_ms"] is None:
        return f"WCET: {fmt_ms(record['wcet_ms'])} ({record['wcet_cycles']:,} cycles), no deadline set"
    frac = record["wcet_ms"] / record["deadline_ms"]
    filled = min(width, int(round(frac * width)))
    return (f"WCET: [{'=' * filled}{' ' * (width - filled)}] {100 * frac:.0f}% "
            f"({fmt_ms(record['wcet_ms'])} of {fmt_ms(record['deadline_ms'])} deadline)")
