"""WCET soundness on every AVR example model: bound >= every simavr run, on random inputs and on
inputs chosen to push data-dependent paths (saturation, sign, huge and tiny magnitudes)."""

import json

import numpy as np
import pytest

from conftest import REPO, needs_avr, shared_file, slow
from nnbuild import pipeline, wcet
from nnbuild.checks.inputs import check_inputs
from nnbuild.runners import simavr

#: runs scons, cross-compilers or simulators: the e2e tier
pytestmark = pytest.mark.e2e

EXAMPLES = {
    "f1tenth": (REPO / "firmware_examples/f1tenth/architecture.json", (-1.0, 1.0)),
    "xor": (REPO / "firmware_examples/xor/xor.h5", (0.0, 1.0)),
    "f1real21": (("data", "f1tenth", "TD3_L21_64x64_C1.h5"), (-0.5, 0.5)),
    "f1real61": (("data", "f1tenth", "TD3_L61_128x128_C1.h5"), (-0.5, 0.5)),
}


def adversarial(n_in, rng):
    """Inputs that push soft-float paths: huge and tiny magnitudes, signs, zeros, subnormals."""
    rows = [np.full(n_in, v) for v in (0.0, 1e-38, -1e-38, 1e-45, 3.0, -3.0, 1e4, -1e4, 1e30, -1e30)]
    rows.append(np.where(np.arange(n_in) % 2 == 0, 1e4, -1e4))
    rows.append(rng.choice([-1e6, -1.0, -1e-6, 0.0, 1e-6, 1.0, 1e6], size=n_in))
    rows += list(rng.standard_normal((4, n_in)) * 10.0 ** rng.integers(-20, 20, size=(4, 1)))
    return np.array(rows, dtype=np.float32)


#: the examples whose run re-tests a code path another example covers by default: the slow tier's
SLOW_EXAMPLES = {
    "f1real61": "[f1real21] (the same trained TD3 controller family: the float32 MLP code and its soft-float "
                "paths on the same adversarial inputs) and [f1tenth]",
}


@needs_avr
@pytest.mark.parametrize("example", [pytest.param(e, marks=slow(SLOW_EXAMPLES[e])) if e in SLOW_EXAMPLES else e
                                     for e in sorted(EXAMPLES)])
def test_bound_is_never_below_a_measured_run(tmp_path, example):
    model_ref, input_range = EXAMPLES[example]
    model = shared_file(*model_ref) if isinstance(model_ref, tuple) else model_ref
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, name=example)
    loaded, _ = pipeline.load_model(model, example)
    rng = np.random.default_rng(7)
    x = np.vstack([check_inputs(loaded.input_size, 24, 3, input_range), adversarial(loaded.input_size, rng)])
    _, cycles = simavr.run_cases(elf, x, loaded.output_size, entry_symbol=f"{example}_infer", mcu=board["mcu"],
                                 freq=board["clock_hz"], harness=harness)
    facts = json.loads((tmp_path / "gen" / f"{example}.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, f"{example}_infer", facts, tmp_path)
    worst = int(cycles.max())
    print(f"\n{example}: WCET bound {bound.cycles:,} cycles, simavr worst {worst:,} over {len(x)} inputs, "
          f"bound/measured {bound.cycles / worst:.4f}")
    assert bound.cycles >= worst
    assert set(bound.per_layer) <= {l["name"] for l in facts["layers"]}


def every_rounding_path(n_in, rng):
    """Fixed-point input rounding and output conversion inputs: every power of two from 1 down to below
    the format's last bit (each shift count), halves that round up, out of range, NaN, infinities."""
    values = [s * 2.0 ** -i * m for i in range(0, 30) for m in (1.0, 1.5, 1.9999) for s in (1, -1)]
    values += [0.0, -0.0, 1e-45, 2.0, 1e30, -1e30, float("nan"), float("inf"), float("-inf")]
    rows = [np.full(n_in, v) for v in values] + [rng.choice(values, size=n_in) for _ in range(16)]
    return np.array(rows, dtype=np.float32)


@needs_avr
@pytest.mark.parametrize("shape, precision", [("v3", "q16-acc32"), ("v3", "q8"), ("mlp", "q16-acc32"), ("mlp", "q8")])
def test_fixed_point_conversions_bound_every_path(tmp_path, shape, precision):
    """The fixed shapes' float API (nn_quantize, nn_dequantize) has no loop and no data-dependent time:
    its bound must cover every shift count and clamp, and stay within issue 13's 1.03 of the worst run,
    here on xor (where the conversions are most of the cycles)."""
    model, input_range = EXAMPLES["xor"]
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, name="xor", shape=shape, precision=precision,
                                                input_range=input_range)
    x = np.vstack([check_inputs(2, 24, 3, input_range), every_rounding_path(2, np.random.default_rng(3))])
    _, cycles = simavr.run_cases(elf, x, 1, entry_symbol="xor_infer", mcu=board["mcu"], freq=board["clock_hz"],
                                 harness=harness)
    facts = json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, "xor_infer", facts, tmp_path)
    worst = int(cycles.max())
    print(f"\nxor {shape} {precision}: WCET bound {bound.cycles:,}, simavr worst {worst:,} over {len(x)} inputs, "
          f"bound/measured {bound.cycles / worst:.4f}")
    assert worst <= bound.cycles <= 1.03 * worst
