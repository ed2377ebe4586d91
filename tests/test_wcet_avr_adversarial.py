"""Adversarial search against the builtin-avr bound, one float32 build per code shape.

Per build (the xor model as shape mlp, v1, v2 and v3 for the avr board): range corners, zeros of
both signs, subnormals, NaN and infinities, huge and tiny magnitudes, random bit patterns, then a
coordinate-wise hill-climb on simavr cycles from the slowest of them; at least 500 inputs, run in
batches by one simavr process each. The bound must never be beaten; the worst ratio is printed
(run with -s). The MLP shape's value facts and the library path entries conditioned on them are
checked routine by routine in test_wcet_avr_value_facts.py; this is the whole-program check.
"""

import json

import numpy as np
import pytest

from conftest import REPO, needs_avr
from nnbuild import pipeline, wcet
from nnbuild.runners import simavr

from test_wcet_avr import float_cases, worst_case_search

pytestmark = [pytest.mark.e2e, needs_avr]

XOR = REPO / "firmware_examples/xor/xor.h5"
#: inputs per build: the fixed set plus this many hill-climb runs (>= 500 in all)
CLIMB_RUNS = 240


def special_rows(n_in, lo, hi):
    """Range corners and IEEE specials, alone and mixed with the corners."""
    specials = [0.0, -0.0, 1.4e-45, -1e-40, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1e30, -1e-30,
                np.inf, -np.inf, np.nan]
    corners = [np.array(c, dtype=np.float32) for c in np.array(np.meshgrid(*[[lo, hi]] * n_in)).reshape(n_in, -1).T]
    rows = corners + [np.full(n_in, v, np.float32) for v in specials]
    rows += [np.where(np.arange(n_in) % 2 == 0, v, hi).astype(np.float32) for v in specials]
    rows += [np.where(np.arange(n_in) % 2 == 1, v, lo).astype(np.float32) for v in specials]
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("shape", ["mlp", "v1", "v2", "v3"])
def test_adversarial_search_never_beats_the_bound(tmp_path, shape):
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(XOR, board, tmp_path, name="xor", shape=shape)
    facts = json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "wcet")

    def run(cases):
        _, cycles = simavr.run_cases(elf, np.asarray(cases, np.float32), 1, entry_symbol="xor_infer",
                                     mcu=board["mcu"], freq=board["clock_hz"], harness=harness)
        return cycles

    rng = np.random.default_rng(27)
    x = np.vstack([special_rows(2, 0.0, 1.0), float_cases(2, rng, n_random=120),
                   rng.uniform(0.0, 1.0, (40, 2)).astype(np.float32)])
    cycles = run(x)
    i = int(np.argmax(cycles))
    _, climbed, evals = worst_case_search(run, (x[i], cycles[i]), rng, "float", budget=CLIMB_RUNS)
    worst = max(int(cycles.max()), climbed)
    assert len(x) + evals >= 500
    print(f"\nxor {shape} float32: bound {bound.cycles:,}, simavr worst {worst:,} over {len(x) + evals} inputs "
          f"({len(x)} fixed, {evals} hill-climb), bound/measured {bound.cycles / worst:.3f}")
    assert worst <= bound.cycles, f"UNSOUND: {shape}: measured {worst} > bound {bound.cycles}"
