"""Adversarial input search against the built-in AVR WCET bound: range corners, special floats and a
hill-climb on simavr's cycle count, over at least 500 inputs per build, on the F1/10 controller in
q16-acc32 (mlp shape, four-neuron kernels) and LeNet-5 in q8 (v2 shape, data-dependent ReLU, max
pooling and tanh paths). No input may take more cycles than the bound, and every output must equal
the bit-exact model's. The worst bound/measured ratio is printed (pytest -s).

LeNet-5 runs about 7.5 million cycles an inference (about 1.5 s under simavr on a loaded machine),
so in the e2e tier its search stops after 75 inputs (the corners and two hill-climb rounds) and
runs its 500 with NNBUILD_SLOW_TESTS=1; NNBUILD_ADVERSARIAL_INPUTS sets the number of inputs of
both searches."""

import json
import os

import numpy as np
import pytest

from adversarial_search import check_bound
from conftest import REPO, needs_avr
from nnbuild import pipeline
from nnbuild.runners import simavr

SLOW = os.environ.get("NNBUILD_SLOW_TESTS") == "1"
#: inputs per search: (F1/10, LeNet-5)
INPUTS = (int(os.environ.get("NNBUILD_ADVERSARIAL_INPUTS", "500")),
          int(os.environ.get("NNBUILD_ADVERSARIAL_INPUTS", "500" if SLOW else "75")))


def check_build(tmp_path, model, board, elf, harness, entry, facts_path, emulate, lo, hi, seed, total):
    from nnbuild import wcet
    facts = json.loads(facts_path.read_text())
    bound = wcet.analyze(board, elf, entry, facts, tmp_path).cycles

    def run(x):
        return simavr.run_cases(elf, x, model.output_size, entry_symbol=entry, mcu=board["mcu"],
                                freq=board["clock_hz"], harness=harness)

    ratio, xs, _cycles, ys = check_bound(entry, bound, run, model.input_size, lo, hi, seed, total)
    assert np.array_equal(ys.view(np.uint32), emulate(xs).view(np.uint32))
    return ratio


@needs_avr
@pytest.mark.e2e
def test_f1tenth_q16_acc32_no_input_beats_the_bound(tmp_path):
    from nnbuild.numerics import bitexact, plan
    model = pipeline.load_model(REPO / "firmware_examples/f1tenth/architecture.json", "f1tenth")[0]
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, precision="q16-acc32", input_range=(-1.0, 1.0))
    q = plan.quantize(model, "q16-acc32", (-1.0, 1.0))
    ratio = check_build(tmp_path, model, board, elf, harness, "f1tenth_infer", tmp_path / "gen" / "f1tenth.flowfacts.json",
                        lambda x: bitexact.run(q, x), -1.0, 1.0, seed=27, total=INPUTS[0])
    assert ratio <= 1.01


@needs_avr
@pytest.mark.e2e
def test_lenet5_q8_no_input_beats_the_bound(tmp_path):
    from nnbuild.numerics import graph_bitexact, graph_plan
    example = REPO / "firmware_examples" / "lenet5"
    lo, hi = json.loads((example / "example.json").read_text())["input_range"]
    model = pipeline.load_model(example / "lenet5.h5", "lenet5")[0]
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(example / "lenet5.h5", board, tmp_path, name="lenet5", shape="v2",
                                                precision="q8", input_range=(lo, hi))
    q = graph_plan.quantize_graph(model, "q8", (lo, hi))
    ratio = check_build(tmp_path, model, board, elf, harness, "lenet5_infer", tmp_path / "gen" / "lenet5.flowfacts.json",
                        lambda x: graph_bitexact.run_graph(q, x), lo, hi, seed=5, total=INPUTS[1])
    assert ratio <= 1.03
