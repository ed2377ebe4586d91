"""Activation tables of the fixed-point precisions: tanh and exp sampled at power-of-two steps,
rounded half away from zero; the C tables and the bit-exact model are made from these."""

import numpy as np

from nnbuild.numerics.formats import round_half_away

#: tanh table: 513 points at step 1/64 over [0, 8]; exp table: 257 points at step 1/16 over [-16, 0]
TANH_STEP_BITS, TANH_POINTS = 6, 513
EXP_STEP_BITS, EXP_POINTS = 4, 257




def tanh_table(out_frac):
    """tanh(k/64) for k = 0..512 at 2^-out_frac, rounded half away."""
    k = np.arange(TANH_POINTS) / 2.0 ** TANH_STEP_BITS
    return round_half_away(np.tanh(k) * 2.0 ** out_frac).astype(np.int64)


def exp_table(frac=15):
    """exp(-k/16) for k = 0..256 at 2^-15 (int32)."""
    k = np.arange(EXP_POINTS) / 2.0 ** EXP_STEP_BITS
    return round_half_away(np.exp(-k) * 2.0 ** frac).astype(np.int64)
