"""The v2 shape on the IR's N-d operations (issue 12): data movement (transpose, every pad mode,
negative-step slices, scalar and vector gather, gather-elements, tile, nearest resize), broadcasting
element-wise ops with constants, reductions, axis softmax, LRN, linear/cubic resize and grouped /
depthwise convolution, each compiled with the strict flags and run against nnbuild.ir.reference in
float32 and float64 on the host; a model of many of them on AVR under simavr with its WCET bound."""

import numpy as np
import pytest

from conftest import needs_avr
from nnbuild import codegen, pipeline, wcet
from nnbuild.ir import graph as g
from nnbuild.ir import reference
from nnbuild.runners import native
from test_shape_v3_ops import WARNINGS, check, check_program, in_one_program, inputs

RNG = np.random.default_rng(12)
S = (3, 4, 5)


def f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def model(name, layers, shape=S, edges=None):
    return g.Model(name, shape, layers, edges=edges)


CASES = {
    "transpose": model("transpose", [g.Transpose("t", (2, 0, 1))]),
    "transpose_inner": model("transpose_inner", [g.Transpose("t", (0, 2, 1))]),
    "pad_constant": model("pad_constant", [g.Pad("p", ((1, 2), (0, 1), (2, -1)), "constant", 3.5)]),
    "pad_edge": model("pad_edge", [g.Pad("p", ((1, 2), (3, 1), (2, 1)), "edge")]),
    "pad_reflect": model("pad_reflect", [g.Pad("p", ((1, 2), (0, 1), (2, 1)), "reflect")]),
    "pad_wrap": model("pad_wrap", [g.Pad("p", ((1, 2), (0, 4), (2, 1)), "wrap")]),
    "slice_negative": model("slice_negative", [g.Slice("s", (2, 0, 4), (-1, 2, -2), (3, 2, 3))]),
    "gather_vector": model("gather_vector", [g.Gather("g", 1, np.array([3, 0, 0, 2]))]),
    "gather_scalar": model("gather_scalar", [g.Gather("g", 2, np.array(1))]),
    "gather_elements": model("gather_elements", [g.GatherElements("ge", 1, RNG.integers(0, 4, size=(3, 2, 5)))]),
    "tile": model("tile", [g.Tile("t", (2, 1, 3))]),
    "resize_nearest": model("resize_nearest", [g.Resize("r", (3, 7, 11), (1, 1.75, 2.2), "nearest",
                                                        "asymmetric", "floor")]),
    "resize_linear": model("resize_linear", [g.Resize("r", (3, 7, 3), (1, 1.75, 0.6), "linear")]),
    "resize_cubic": model("resize_cubic", [g.Resize("r", (3, 7, 11), (1, 1.75, 2.2), "cubic", "align_corners",
                                                    exclude_outside=True)]),
    "unary_chain": model("unary_chain", [g.Unary("a", "elu", (0.7,)), g.Unary("b", "hard_sigmoid", (0.2, 0.5)),
                                         g.Unary("c", "tanh"), g.Unary("d", "clip", (-0.5, float("inf"))),
                                         g.Unary("e", "leaky_relu", (0.1,)), g.Unary("f", "softplus"),
                                         g.Unary("h", "selu", (1.67, 1.05)), g.Unary("i", "softsign"),
                                         g.Unary("j", "exp"), g.Unary("k", "log"), g.Unary("l", "sqrt"),
                                         g.Unary("m", "neg"), g.Unary("n", "abs"), g.Unary("o", "reciprocal")]),
    "broadcast_constant": model("broadcast_constant", [g.Elementwise("e", "sub", ((0, f32(4, 1)),), "relu")]),
    "broadcast_rank_up": model("broadcast_rank_up", [g.Elementwise("e", "mul", ((1, f32(2, 1, 1, 5)),))]),
    "broadcast_tensors": model("broadcast_tensors",
                               [g.Reduce("r", "sum", (1,), True), g.Unary("a", "abs"),
                                g.Elementwise("e", "div", (), "linear"), g.Elementwise("m", "max", ((2, f32(5)),)),
                                g.Elementwise("n", "mean", ((0, f32(1)),))],
                               edges={"r": ("input",), "a": ("input",), "e": ("r", "a"), "m": ("input", "e"),
                                      "n": ("m", "e")}),
    "reduce": model("reduce", [g.Reduce("r", "mean", (0, 2), False), g.Reduce("r2", "max", (-1,), True)]),
    "reduce_prod_min": model("reduce_prod_min", [g.Reduce("r", "prod", (1,), True), g.Reduce("q", "min", (0, 2))]),
    "softmax_middle": model("softmax_middle", [g.Softmax("s", 1)]),
    "lrn": model("lrn", [g.LRN("l", 3, 0.01, 0.75, 1.0)]),
    "conv_groups": model("conv_groups", [g.Conv2D("c", f32(3, 2, 2, 6), f32(6), (1, 2), (1, 1), (1, 0, 1, 1), "relu",
                                                  groups=2)], shape=(5, 6, 4)),
    "conv_depthwise": model("conv_depthwise", [g.Conv2D("c", f32(3, 3, 1, 8), None, (1, 1), (2, 1), (2, 2, 1, 1),
                                                        groups=4)], shape=(5, 6, 4)),
}
#: the quick tier compiles these; the rest run with the e2e tests
QUICK = ("transpose", "pad_constant", "broadcast_tensors", "resize_cubic")


#: precision -> the QUICK cases' program in that precision (test_shape_v3_ops.one_program), built at
#: the first quick case; test_movement_is_exact_and_needs_no_arithmetic runs pad_constant's float32 in it
_QUICK_PROGRAM = {}


def generate(folder, m, precision):
    out = folder / f"{m.name}_{precision}"
    codegen.generate(m, out, shape="v2", precision=precision, storage="const", passes_log=[])
    return out


def build(tmp_path, m, precision):
    """(generated folder, executable) of `m`: a QUICK case runs in the module's one program of the
    QUICK cases in its precision, any other in a check program of its own."""
    if m.name in QUICK and CASES.get(m.name) is m:
        return in_one_program(_QUICK_PROGRAM.setdefault(precision, {}), tmp_path / f"quick_cases_{precision}",
                              [CASES[c] for c in QUICK], m, lambda folder, q: generate(folder, q, precision),
                              ["-O2", *WARNINGS])
    return _build(tmp_path, m, precision)


def _build(tmp_path, m, precision):
    out = generate(tmp_path, m, precision)
    return out, check_program(out, m, ["-O2", *WARNINGS])


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.e2e) for c in CASES])
def test_v2_matches_the_reference(tmp_path, case, precision):
    m = CASES[case]
    g.validate(m)
    out, exe = build(tmp_path, m, precision)
    check(exe, m, precision)
    code = (out / f"{m.name}.c").read_text()
    assert "malloc" not in code and "while" not in code
    assert f"(shape v2, {precision})" in code


def test_movement_is_exact_and_needs_no_arithmetic(tmp_path):
    """Data movement copies bits: exact equality, and no float operator on the moved values."""
    m = CASES["pad_constant"]
    out, exe = build(tmp_path, m, "float32")
    x = inputs(m)
    y = native.run_cases(exe, x.reshape(len(x), -1), m.output_size)
    np.testing.assert_array_equal(y, reference.run(m, x).reshape(len(x), -1))


@pytest.mark.e2e
@needs_avr
def test_avr_runs_the_new_operations_within_the_wcet_bound(tmp_path):
    """One DAG of many new operations on the ATmega1284 (weights and index tables in far flash):
    simavr's outputs equal the reference and the built-in WCET bound covers every measured run."""
    layers = [g.Conv2D("dw", f32(3, 3, 1, 4), f32(4), (1, 1), (1, 1), (1, 1, 1, 1), "relu", groups=4),
              g.Pad("pad", ((1, 0), (0, 1), (0, 0)), "reflect"),
              g.Transpose("chw", (2, 0, 1)),
              g.Resize("up", (4, 7, 5), (1, 1.4, 1.0), "linear"),
              g.Reduce("mean", "mean", (1, 2), False),
              g.Elementwise("scale", "mul", ((1, f32(4)),), "linear"),
              g.Softmax("soft", 0)]
    bound, cycles = avr_runs_within_the_bound(tmp_path, model("avr_ops", layers, shape=(5, 4, 4)), "v2")
    assert bound.cycles <= 4 * max(cycles), (bound.cycles, cycles)


def avr_runs_within_the_bound(tmp_path, m, shape):
    """`m` generated in `shape` on the ATmega1284 under simavr: three inputs within 1e-5 of the
    reference, each run within the WCET bound; returns (bound, each run's cycles)."""
    board = pipeline.load_board("avr")
    program, harness = pipeline.build_check_program(m, board, tmp_path, shape=shape, passes_log=[])
    x = inputs(m, 3)
    y, cycles = pipeline.run_cases(board, program, x.reshape(3, -1), m.output_size, entry=f"{m.name}_infer",
                                   harness=harness)
    want = reference.run(m, x).reshape(3, -1)
    assert np.max(np.abs(y - want)) <= 1e-5
    bound = wcet.analyze(board, program, f"{m.name}_infer", tmp_path / "gen" / f"{m.name}.flowfacts.json", tmp_path)
    assert bound.cycles >= max(cycles)
    print(f"{m.name}: WCET {bound.cycles} cycles, measured max {max(cycles)}")
    return bound, cycles
