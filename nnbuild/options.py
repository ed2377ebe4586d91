"""The user's options, parsed once for SCons, the CLI and the API.

Each parser takes the text a user typed and returns the value, or raises one NNBuildError line
saying what is allowed: a bad option fails before anything is built, never half-way through.
"""

import math

from nnbuild import codegen
from nnbuild.checks import deadline
from nnbuild.errors import NNBuildError

#: optimisation levels every supported gcc (host, avr-gcc, arm-none-eabi-gcc) accepts
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og")


def tolerance(text):
    """max |C - reference| allowed: a finite number >= 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise NNBuildError(f"tolerance '{text}' is not a finite number >= 0 (for example 1e-4)")
    return value


def tolerance_of(precision, tolerance, tolerances=None):
    """The tolerance a build of `precision` is judged by: its own entry in `tolerances`
    ({precision: tolerance}: a 16-bit format cannot hold a float tolerance), else `tolerance`."""
    return (tolerances or {}).get(precision, tolerance)


#: `nnbuild check`'s tolerance when none is given, per precision: (value, why). The numerics plan
#: proves no end-to-end error bound yet, so fixed point takes a documented default above the errors
#: tests/test_fixed.py measures on the F1/10 controller (q16, fix16 3e-4; q16-acc32 1.2e-3; q8 1.6e-2).
DEFAULT_TOLERANCES = {
    "float32": (1e-4, "the float default"),
    "float64": (1e-4, "the float default"),
    "q16": (1e-3, "the q16 default: the tested F1/10 error is <= 3e-4"),
    "q16-acc32": (2e-3, "the q16-acc32 default: the tested F1/10 error is <= 1.2e-3"),
    "q8": (2e-2, "the q8 default: the tested F1/10 error is <= 1.6e-2 (int8 weights)"),
    "fix16": (1e-3, "the fix16 default: the tested F1/10 error is <= 3e-4"),
    "int8": (0.0, "the int8 default: bit-exact with TFLite Micro's int8 kernels"),
}
#: fixedW.F: this many steps of the format (2^-F each), and never below DEFAULT_FIXED_FLOOR
DEFAULT_FIXED_LSBS, DEFAULT_FIXED_FLOOR = 64, 1e-3


def default_tolerance(precision):
    """(tolerance, why) for a check without --tolerance: the documented default of the precision
    (DEFAULT_TOLERANCES; fixedW.F from its step)."""
    if precision in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[precision]
    from nnbuild.numerics.formats import GENERIC_FIXED
    match = GENERIC_FIXED.match(str(precision))
    if not match:
        raise NNBuildError(f"no default tolerance for precision '{precision}'; give one")
    frac = int(match.group(2))
    value = max(DEFAULT_FIXED_FLOOR, DEFAULT_FIXED_LSBS * 2.0 ** -frac)
    return value, f"the fixedW.F default: {DEFAULT_FIXED_LSBS} steps of 2^-{frac}, at least {DEFAULT_FIXED_FLOOR:g}"


def deadline_ms(value):
    """A deadline in ms; text needs its unit (see checks.deadline.parse_deadline)."""
    return deadline.parse_deadline(value)


def opt(text):
    """An optimisation flag from OPT_LEVELS (None/'' for the board's default)."""
    if text in (None, ""):
        return None
    if text not in OPT_LEVELS:
        raise NNBuildError(f"optimisation flag '{text}' is not one of {', '.join(OPT_LEVELS)}")
    return text


def precision(text, *, auto=False):
    """A number format codegen knows (and 'auto' where a selection step exists)."""
    if auto and text == "auto":
        return text
    return codegen.check_precision(text)


def model_name(text):
    """The C prefix of a model's API: a checked identifier, never a path or C syntax."""
    if text in (None, ""):
        return None
    return codegen.check_model_name(text)


def input_range(text):
    """'lo,hi' (or a pair) -> (lo, hi), finite with lo < hi."""
    try:
        lo, hi = (float(v) for v in (text.split(",") if isinstance(text, str) else text))
    except (TypeError, ValueError):
        raise NNBuildError(f"input range '{text}' is not lo,hi (for example -1,1)") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise NNBuildError(f"input range '{text}': lo and hi must be finite with lo < hi")
    return lo, hi


def count(text, what="check inputs"):
    """A whole number >= 1, from an integer or its decimal text (2.5, '2.5', true are refused, not
    truncated)."""
    if isinstance(text, float) and text.is_integer():
        value = int(text)
    elif isinstance(text, bool) or not isinstance(text, (int, str)):
        value = 0
    else:
        try:
            value = int(text)
        except ValueError:
            value = 0
    if value < 1:
        raise NNBuildError(f"{what} '{text}' is not a positive integer")
    return value


def item_count(text):
    """--items N: a number of items >= 1."""
    return count(text, "items")


def items(text):
    """items=: a multi-item split of a single-graph model: N >= 1 items (automatic) as
    ("items", N), or a JSON map file layer -> item as ("map", path); '' is no split (None)."""
    text = str(text or "").strip()
    if not text:
        return None
    if text.isdigit() and int(text) >= 1:
        return ("items", int(text))
    if text.endswith(".json"):
        import os
        if not os.path.isfile(text):
            raise NNBuildError(f"items map '{text}' not found")
        return ("map", text)
    raise NNBuildError(f"items '{text}' is neither a number of items >= 1 nor a JSON map file (.json)")


def argparse_type(parse):
    """An argparse `type` from one of these parsers, keeping its one-line message."""
    import argparse

    def convert(text):
        try:
            return parse(text)
        except NNBuildError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = parse.__name__
    return convert


def refuse_unknown(given, known, where, what="keyword"):
    """One line for the first keyword of `given` that `known` does not hold, with the nearest
    known one ("did you mean deadline?"), never a traceback or a silent drop."""
    import difflib
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    word = unknown[0]
    near = difflib.get_close_matches(word, sorted(known), n=1)
    hint = f"; did you mean {near[0]}?" if near else f"; known: {', '.join(sorted(known))}"
    more = f" (and {', '.join(unknown[1:])})" if unknown[1:] else ""
    raise NNBuildError(f"{where}: unknown {what} '{word}'{more}{hint}")
