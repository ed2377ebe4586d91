"""Seeded check inputs: the corners of the declared input range first, then uniform random ones.

The corners (all-min, all-max, zeros, alternating) push saturating activations and sign-dependent
branches, which matters both for the semantic check and for measuring worst cases.
"""

import numpy as np

from nnbuild import limits
from nnbuild.errors import NNBuildError

#: the corner cases added before the random ones (at most)
CORNERS = 5


def check_inputs(n_in, count, seed, input_range):
    """float32 inputs [corners + count, n_in], reproducible from (count, seed, range); at most
    limits.MAX_DATA_ELEMENTS values, checked before they are drawn."""
    values = (int(count) + CORNERS) * int(n_in)
    if values > limits.MAX_DATA_ELEMENTS:
        raise NNBuildError(f"{count} check inputs of {n_in} values (and {CORNERS} corner cases) are {values} values, "
                           f"more than {limits.MAX_DATA_ELEMENTS} (limits.MAX_DATA_ELEMENTS)")
    lo, hi = (float(v) for v in input_range)
    corners = [np.full(n_in, lo), np.full(n_in, hi)]
    if lo < 0.0 < hi:
        corners.append(np.zeros(n_in))
    alternating = np.where(np.arange(n_in) % 2 == 0, lo, hi)
    corners += [alternating, alternating[::-1].copy() if n_in % 2 == 0 else np.where(np.arange(n_in) % 2 == 0, hi, lo)]
    random = np.random.default_rng(seed).uniform(lo, hi, size=(count, n_in))
    return np.vstack([np.array(corners), random]).astype(np.float32)
