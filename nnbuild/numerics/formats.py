"""Number formats: the precision names nnbuild knows, and integer tensor formats with the exact
rounding and storage rules every fixed-point stage shares (planning, C generation, bit-exact model).
"""

import math
import re
from dataclasses import dataclass

from nnbuild.errors import NNBuildError

FLOAT_PRECISIONS = ("float32", "float64")
FIXED_PRECISIONS = ("q16", "q16-acc32", "q8", "fix16")
#: TFLite Micro's int8 arithmetic (the model's own scales and zero points: full-integer models only)
QUANTIZED_PRECISIONS = ("int8",)
GENERIC_FIXED = re.compile(r"fixed(\d+)[.,_](\d+)$")

#: pre-activation format of table activations (tanh, sigmoid, softmax): Q16 in int32
Z_FRAC = 16
#: table activations clamp their Q16 input to +-Z_LIMIT when the proof says it could be larger
Z_LIMIT = 1 << 29
#: activations computed from a table at Z_FRAC (the others are exact integer operations)
TABLE_ACTIVATIONS = ("tanh", "sigmoid", "softmax")
INT32_MAX = (1 << 31) - 1

def is_fixed(precision):
    return precision in FIXED_PRECISIONS or bool(GENERIC_FIXED.match(precision))


def check_precision(precision):
    """The precision if known, else one line listing what is."""
    generic = GENERIC_FIXED.match(str(precision))
    if generic:
        whole, frac = int(generic.group(1)), int(generic.group(2))
        if whole < 1 or whole + frac > 32:
            raise NNBuildError(f"precision '{precision}': fixedW.F needs W >= 1 (sign included) and W + F <= 32 bits")
        return precision
    if precision in FLOAT_PRECISIONS + QUANTIZED_PRECISIONS or is_fixed(precision):
        return precision
    raise NNBuildError(f"precision '{precision}' is not supported "
                       f"(supported: {', '.join(FLOAT_PRECISIONS + FIXED_PRECISIONS + QUANTIZED_PRECISIONS)}, fixedW.F)")


@dataclass
class Tensor:
    """An integer tensor format: value = q * 2^-frac, q stored in `bits` (8, 16 or 32) bits."""

    frac: int
    bits: int

    @property
    def qmax(self):
        return (1 << (self.bits - 1)) - 1

    @property
    def ctype(self):
        return f"int{self.bits}_t"


def frac_for(bound, bits, cap=30):
    """Most fraction bits such that |v| <= bound fits `bits` signed bits, with 1 LSB to spare."""
    qmax = (1 << (bits - 1)) - 2
    if bound <= 0:
        return min(cap, bits - 2)
    return min(cap, math.floor(math.log2(qmax / bound)))


def round_half_away(values):
    import numpy as np  # here: precision names and formats are read without numpy (the CLI)
    return np.where(values >= 0, np.floor(values + 0.5), -np.floor(-values + 0.5))


def to_int(values, frac, bits, what):
    """Exact integer representation of float32 parameters at 2^-frac, refused if it overflows."""
    import numpy as np
    q = round_half_away(np.asarray(values, dtype=np.float64) * 2.0 ** frac)
    limit = (1 << (bits - 1)) - 1
    if np.any(np.abs(q) > limit):
        raise NNBuildError(f"{what} does not fit {bits}-bit storage at 2^-{frac}")
    return q.astype(np.int64)
