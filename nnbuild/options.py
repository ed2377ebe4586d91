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
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise NNBuildError(f"{what} '{text}' is not a positive integer")
    return value

