"""Adversarial input search against builtin-thumb2's bound on the Cortex-M boards (the search of
tests/adversarial_search.py, shared with the AVR test): range corners, special floats (subnormals,
NaN, infinities, huge values) and a hill-climb on the executed-path cycles the qemu-system-arm
runner charges, each batch of inputs run by one QEMU process. Builds: the F1/10 controller in
q16-acc32 on the stm32f407 (Cortex-M4F) and the rp2040 (Cortex-M0+), xor in float32 on the rp2040
(soft float: libgcc's data-dependent paths) and LeNet-5 in q16-acc32 on the stm32f407. No input
may take more cycles than the bound; fixed-point outputs equal the bit-exact model's, float outputs
of finite in-range inputs the float64 reference's within the example's tolerance. The worst
bound/executed-path ratio is printed (pytest -s).

The runner reads QEMU's exec log at a few microseconds per executed cycle on a loaded machine: the
M0+'s xor searches its 500 inputs in the e2e tier in half a minute; the F1/10 controller (80 thousand
cycles an inference on the M4 with the DSP kernels, 340 thousand on the M0+) 60 and 40 inputs, and
LeNet-5 on the M4 (1.3 million cycles) 20 (corners only), to keep the suite's time: their 500-input
searches (5 to 10 minutes each) run with NNBUILD_SLOW_TESTS=1;
NNBUILD_ADVERSARIAL_INPUTS sets the number of inputs of every search."""

import json
import os

import numpy as np
import pytest

from adversarial_search import check_bound
from conftest import REPO, have
from nnbuild import pipeline, wcet

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]
SLOW = os.environ.get("NNBUILD_SLOW_TESTS") == "1"


def inputs(e2e_tier):
    """The number of inputs of a search: 500, or `e2e_tier` unless NNBUILD_SLOW_TESTS=1."""
    return int(os.environ.get("NNBUILD_ADVERSARIAL_INPUTS", 500 if SLOW else e2e_tier))


#: inputs per search: the M0+'s xor runs its 500 in the e2e tier, the others 500 in the slow tier
INPUTS = {"stm32f407 f1tenth": inputs(60), "rp2040 f1tenth": inputs(40), "rp2040 xor": inputs(500),
          "stm32f407 lenet5": inputs(20)}
#: inputs per QEMU process in the hill-climb
BATCH = 50


def build(tmp_path, board_name, example, precision):
    """(model, board, check program, flow facts, example.json) of a firmware example built for the board."""
    meta = json.loads((REPO / "firmware_examples" / example / "example.json").read_text())
    model = pipeline.load_model(REPO / "firmware_examples" / example / meta["model"], example)[0]
    board = pipeline.load_board(board_name)
    elf, _ = pipeline.build_check_program(model, board, tmp_path, name=example, precision=precision,
                                          input_range=tuple(meta["input_range"]))
    facts = json.loads((tmp_path / "gen" / f"{example}.flowfacts.json").read_text())
    return model, board, elf, facts, meta


def search_build(tmp_path, board_name, example, precision, seed, total):
    """(bound / worst executed-path cycles, inputs, outputs, model, example.json) of one build's search."""
    model, board, elf, facts, meta = build(tmp_path, board_name, example, precision)
    entry = f"{example}_infer"
    bound = wcet.analyze(board, elf, entry, facts, tmp_path / "wcet").cycles

    def run(x):
        return pipeline.run_cases(board, elf, x, model.output_size, entry=entry)

    lo, hi = meta["input_range"]
    ratio, xs, _cycles, ys = check_bound(f"{board_name} {example} {precision}", bound, run, model.input_size, lo, hi,
                                         seed, total, batch=BATCH)
    return ratio, xs, ys, model, meta


def bit_exact(model, precision, lo, hi, xs):
    from nnbuild.numerics import bitexact, plan
    return bitexact.run(plan.quantize(model, precision, (lo, hi)), xs)


@pytest.mark.parametrize("board_name", ["stm32f407", "rp2040"])
def test_f1tenth_q16_acc32_no_input_beats_the_bound(tmp_path, board_name):
    ratio, xs, ys, model, _ = search_build(tmp_path, board_name, "f1tenth", "q16-acc32", seed=26,
                                             total=INPUTS[f"{board_name} f1tenth"])
    assert np.array_equal(ys.view(np.uint32), bit_exact(model, "q16-acc32", -1.0, 1.0, xs).view(np.uint32))
    assert ratio <= 1.01


def test_xor_float32_on_the_m0plus_no_input_beats_the_bound(tmp_path):
    from nnbuild.ir import reference
    ratio, xs, ys, model, meta = search_build(tmp_path, "rp2040", "xor", "float32", seed=6, total=INPUTS["rp2040 xor"])
    lo, hi = meta["input_range"]
    ordinary = np.all(np.isfinite(xs) & (xs >= 2 * lo - 1) & (xs <= 2 * hi), axis=1)
    assert ordinary.sum() > len(xs) // 4
    expected = reference.run_flat(model, xs[ordinary].astype(np.float64))
    assert np.max(np.abs(ys[ordinary] - expected)) <= 10 * meta["tolerance"]
    assert ratio <= 1.3   # 1.27 with the expf facts (1.35 before them, 1.37 before the split layers)


def test_lenet5_q16_acc32_on_the_m4_no_input_beats_the_bound(tmp_path):
    from nnbuild.numerics import graph_bitexact, graph_plan
    ratio, xs, ys, model, meta = search_build(tmp_path, "stm32f407", "lenet5", "q16-acc32", seed=5,
                                              total=INPUTS["stm32f407 lenet5"])
    lo, hi = meta["input_range"]
    q = graph_plan.quantize_graph(model, "q16-acc32", (lo, hi))
    assert np.array_equal(ys.view(np.uint32), graph_bitexact.run_graph(q, xs).view(np.uint32))
    assert ratio <= 1.03
