"""Writes check_inputs.npz: the inputs the acasxu example is checked with (x only; the expected
outputs are nnbuild's float64 reference of the loaded network, which the tests hold to the golden
values of ../shared/data/nnet/README.md).

ACAS Xu's five inputs have ranges five orders of magnitude apart (rho 0..60760 ft, theta and psi
-pi..pi rad, v_own 100..1200 ft/s, v_int 0..1200 ft/s), so one input_range for all of them would
check mostly clamped inputs. Instead, from the network's own minimums and maximums (the header of
ACASXU_run2a_1_1_batch_2000.nnet; all 45 networks share them):
  - the 32 corners of the input box,
  - 40 uniform random points inside it (seed 1),
  - 8 points outside it (each input up to half a range beyond its limits: the clamp runs),
  - the two inputs of the README's golden values.
Deterministic: `python3 make_check_data.py` rewrites the same file.
"""

import itertools
from pathlib import Path

import numpy as np

MINIMUMS = np.array([0.0, -3.141593, -3.141593, 100.0, 0.0])
MAXIMUMS = np.array([60760.0, 3.141593, 3.141593, 1200.0, 1200.0])
GOLDEN_INPUTS = [[5000.0, 0.5, -0.5, 500.0, 400.0], [19791.091, 0.0, 0.0, 650.0, 600.0]]


def check_inputs(seed=1):
    rng = np.random.default_rng(seed)
    span = MAXIMUMS - MINIMUMS
    corners = np.array([[MAXIMUMS[i] if bit else MINIMUMS[i] for i, bit in enumerate(bits)]
                        for bits in itertools.product((0, 1), repeat=5)])
    inside = MINIMUMS + span * rng.random((40, 5))
    outside = MINIMUMS - span / 2 + 2 * span * rng.random((8, 5))
    x = np.vstack([corners, inside, outside, GOLDEN_INPUTS])
    return x.astype(np.float32)


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "check_inputs.npz"
    np.savez(out, x=check_inputs())
    print(f"{out}: {len(check_inputs())} inputs")
