"""The v3 shape (fully unrolled, weights and tables as literals, no loops) on the IR's N-d
operations: data movement (transpose, every pad mode, negative-step slices, scalar and vector
gather, gather-elements, tile, nearest resize), broadcasting element-wise ops with constants,
reductions over one and two axes with and without keepdims, softmax on a middle axis, LRN,
linear/cubic resize and grouped / depthwise convolution with padding and dilation. Each model is
compiled with the strict flags and run against nnbuild.ir.reference in float32 and float64 on the
host; two models run on AVR under simavr."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import needs_avr
from nnbuild import boards, codegen, pipeline, steps
from nnbuild.errors import NNBuildError
from nnbuild.compilers.gcc import compile_flags
from nnbuild.codegen import v3
from nnbuild.ir import graph as g
from nnbuild.ir import reference
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]
#: what tests/test_c_warnings.py adds on top (float64 code mixes the float API with double arithmetic)
STRICT = ["-Wconversion", "-Wdouble-promotion", "-Wfloat-equal", "-Wswitch-default"]
RNG = np.random.default_rng(13)
S = (3, 4, 5)


def f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def model(name, layers, shape=S, edges=None, planned=False):
    """planned: the arena placed by liveness (element-wise layers then write over a dying input)."""
    return g.Model(name, shape, layers, edges=edges, meta={"plan_buffers": True} if planned else {})


def broadcast_dag(name, planned=False):
    return model(name, [g.Reduce("r", "sum", (1,), True), g.Unary("a", "abs"),
                        g.Elementwise("e", "div", (), "linear"), g.Elementwise("m", "max", ((2, f32(5)),)),
                        g.Elementwise("n", "mean", ((0, f32(1)),)),
                        g.Elementwise("one", "mean", (), "sigmoid"),
                        g.Elementwise("corner", "add", ((1, f32(3, 1, 5)),), "softmax")],
                 edges={"r": ("input",), "a": ("input",), "e": ("r", "a"), "m": ("input", "e"),
                        "n": ("m", "e"), "one": ("n",), "corner": ("r", "one")}, planned=planned)


CASES = {
    "transpose": model("transpose", [g.Transpose("t", (2, 0, 1))]),
    "transpose_inner": model("transpose_inner", [g.Transpose("t", (0, 2, 1))]),
    "pad_constant": model("pad_constant", [g.Pad("p", ((1, 2), (0, 1), (2, -1)), "constant", 3.5)]),
    "pad_constant_tenth": model("pad_constant_tenth", [g.Pad("p", ((0, 1), (1, 0), (0, 0)), "constant", 0.1),
                                                       g.Unary("n", "neg")]),
    "pad_edge": model("pad_edge", [g.Pad("p", ((1, 2), (3, 1), (2, 1)), "edge")]),
    "pad_reflect": model("pad_reflect", [g.Pad("p", ((1, 2), (0, 1), (2, 1)), "reflect")]),
    "pad_wrap": model("pad_wrap", [g.Pad("p", ((1, 2), (0, 4), (2, 1)), "wrap")]),
    "slice_negative": model("slice_negative", [g.Slice("s", (2, 0, 4), (-1, 2, -2), (3, 2, 3))]),
    "slice_stride": model("slice_stride", [g.Slice("s", (0, 3, 1), (2, -3, 3), (2, 2, 2))]),
    "gather_vector": model("gather_vector", [g.Gather("g", 1, np.array([3, 0, 0, 2]))]),
    "gather_scalar": model("gather_scalar", [g.Gather("g", 2, np.array(1))]),
    "gather_first": model("gather_first", [g.Gather("g", 0, np.array([2, 0, 2, 1, 0]))]),
    "gather_elements": model("gather_elements", [g.GatherElements("ge", 1, RNG.integers(0, 4, size=(3, 2, 5)))]),
    "tile": model("tile", [g.Tile("t", (2, 1, 3))]),
    "resize_nearest": model("resize_nearest", [g.Resize("r", (3, 7, 11), (1, 1.75, 2.2), "nearest",
                                                        "asymmetric", "floor")]),
    "resize_nearest_down": model("resize_nearest_down", [g.Resize("r", (2, 3, 5), (0.7, 0.75, 1), "nearest",
                                                                  "half_pixel", "round_prefer_ceil")]),
    "resize_linear": model("resize_linear", [g.Resize("r", (3, 7, 3), (1, 1.75, 0.6), "linear")]),
    "resize_linear_3axes": model("resize_linear_3axes", [g.Resize("r", (5, 3, 7), (5 / 3, 0.75, 1.4), "linear",
                                                                  "align_corners")]),
    "resize_cubic": model("resize_cubic", [g.Resize("r", (3, 7, 11), (1, 1.75, 2.2), "cubic", "align_corners",
                                                    exclude_outside=True)]),
    "resize_cubic_half": model("resize_cubic_half", [g.Resize("r", (3, 6, 4), (1, 1.5, 0.8), "cubic")]),
    "unary_chain": model("unary_chain", [g.Unary("a", "elu", (0.7,)), g.Unary("b", "hard_sigmoid", (0.2, 0.5)),
                                         g.Unary("c", "tanh"), g.Unary("d", "clip", (-0.5, float("inf"))),
                                         g.Unary("e", "leaky_relu", (0.1,)), g.Unary("f", "softplus"),
                                         g.Unary("h", "selu", (1.67, 1.05)), g.Unary("i", "softsign"),
                                         g.Unary("j", "exp"), g.Unary("k", "log"), g.Unary("l", "sqrt"),
                                         g.Unary("m", "neg"), g.Unary("n", "abs"), g.Unary("o", "reciprocal"),
                                         g.Unary("elu", "elu", (0.3,)), g.Unary("r", "relu"),
                                         g.Unary("s", "sigmoid")]),
    "broadcast_constant": model("broadcast_constant", [g.Elementwise("e", "sub", ((0, f32(4, 1)),), "relu")]),
    "broadcast_rank_up": model("broadcast_rank_up", [g.Elementwise("e", "mul", ((1, f32(2, 1, 1, 5)),))]),
    "broadcast_scalar_div": model("broadcast_scalar_div", [g.Elementwise("e", "div", ((1, np.float32(-0.3)),)),
                                                           g.Elementwise("m", "min", ((0, f32(3, 1, 1)),),
                                                                         "tanh")]),
    "broadcast_tensors": broadcast_dag("broadcast_tensors"),
    "broadcast_planned": broadcast_dag("broadcast_planned", planned=True),
    "broadcast_mutual": model("broadcast_mutual", [g.Reduce("rows", "max", (1,), True),
                                                   g.Reduce("cols", "mean", (2,), True),
                                                   g.Elementwise("sum", "sub", (), "relu"),
                                                   g.Unary("neg", "neg"),
                                                   g.Elementwise("x3", "mul", ((2, f32(4, 1)),))],
                              edges={"rows": ("input",), "cols": ("input",), "sum": ("rows", "cols"),
                                     "neg": ("sum",), "x3": ("neg", "sum")}, planned=True),
    "reduce": model("reduce", [g.Reduce("r", "mean", (0, 2), False), g.Reduce("r2", "max", (-1,), True)]),
    "reduce_keep_two": model("reduce_keep_two", [g.Reduce("r", "sum", (1, 2), True),
                                                 g.Reduce("q", "mean", (0,), False)]),
    "reduce_prod_min": model("reduce_prod_min", [g.Reduce("r", "prod", (1,), True), g.Reduce("q", "min", (0, 2))]),
    "softmax_middle": model("softmax_middle", [g.Softmax("s", 1)]),
    "softmax_first": model("softmax_first", [g.Softmax("s", 0), g.Softmax("t", -1)]),
    "lrn": model("lrn", [g.LRN("l", 3, 0.01, 0.75, 1.0)]),
    "lrn_even": model("lrn_even", [g.LRN("l", 4, 0.3, 0.6, 2.0)]),
    "conv_groups": model("conv_groups", [g.Conv2D("c", f32(3, 2, 2, 6), f32(6), (1, 2), (1, 1), (1, 0, 1, 1), "relu",
                                                  groups=2)], shape=(5, 6, 4)),
    "conv_depthwise": model("conv_depthwise", [g.Conv2D("c", f32(3, 3, 1, 8), None, (1, 1), (2, 1), (2, 2, 1, 1),
                                                        groups=4)], shape=(5, 6, 4)),
    "conv_depthwise_stride": model("conv_depthwise_stride",
                                   [g.Conv2D("c", f32(3, 3, 1, 3), f32(3), (2, 2), (1, 2), (1, 1, 2, 2), "tanh",
                                             groups=3)], shape=(7, 6, 3)),
}


def generate(tmp_path, m, precision):
    out = tmp_path / f"{m.name}_{precision}"
    codegen.generate(m, out, shape="v3", precision=precision, storage="const", passes_log=[])
    return out


#: the dispatcher of one_program: per case, check_main.c's record loop (check_io.h's nnbuild_serve)
#: around that case's <name>_infer, chosen by the name the program is run under (argv[0])
DISPATCH_STEP = """
static void step_{name}(const unsigned char *inbuf, unsigned char *outbuf)
{{
    static float in[{n_in}];
    static float out[{n_out}];
    int i;

    for (i = 0; i < {n_in}; ++i)
        in[i] = nnbuild_get_f32(inbuf + 4 * i);
    {name}_infer(in, out);
    for (i = 0; i < {n_out}; ++i)
        nnbuild_put_f32(outbuf + 4 * i, out[i]);
}}
"""
DISPATCH_CASE = """
    if (strcmp(name, "{name}") == 0) {{
        static unsigned char inbuf[4 * {n_in}];
        static unsigned char outbuf[4 * {n_out}];
        return nnbuild_serve(name, "input vector", inbuf, sizeof inbuf, outbuf, sizeof outbuf, step_{name});
    }}"""


def one_program(folder, generated, flags):
    """One host program for many float32 cases (one input, one output each): each case's
    generated C compiled with `flags` as its own check program compiles it, one main (check_main's
    record loop per case) and one link, instead of a check main and a link per case.
    `generated`: [(model, folder of its generated C)]. Returns {name: executable or the exception
    of that case's compile}: the executable is a link to the program under the case's name."""
    folder.mkdir(parents=True, exist_ok=True)
    objects, built = [], {}
    for m, out in generated:
        objdir = folder / "obj" / m.name
        objdir.mkdir(parents=True)
        try:
            subprocess.run(["gcc", *flags, f"-I{out}", "-c", str(out / f"{m.name}.c"), str(out / f"{m.name}_weights.c")],
                           check=True, capture_output=True, text=True, cwd=objdir)
        except subprocess.CalledProcessError as error:
            built[m.name] = error
            continue
        objects += [objdir / f"{m.name}.o", objdir / f"{m.name}_weights.o"]
        built[m.name] = m
    cases = [m for m in built.values() if isinstance(m, g.Model)]
    (folder / "dispatch.c").write_text(
        "#include <string.h>\n#include \"check_io.h\"\n"
        + "".join(f'#include "{m.name}.h"\n' for m in cases)
        + "".join(DISPATCH_STEP.format(name=m.name, n_in=m.input_size, n_out=m.output_size) for m in cases)
        + "\nint main(int argc, char **argv)\n{\n    const char *name = strrchr(argv[0], '/');\n\n"
        + "    (void)argc;\n    name = name ? name + 1 : argv[0];"
        + "".join(DISPATCH_CASE.format(name=m.name, n_in=m.input_size, n_out=m.output_size) for m in cases)
        + '\n    fprintf(stderr, "%s: no such case\\n", name);\n    return 4;\n}\n')
    names = {m.name for m in cases}
    includes = [f"-I{CHECK_MAIN.parent}", *(f"-I{out}" for m, out in generated if m.name in names)]
    program = folder / "check"
    subprocess.run(["gcc", *flags, *includes, str(folder / "dispatch.c"), *map(str, objects), "-o", str(program), "-lm"],
                   check=True, capture_output=True, text=True)
    (folder / "bin").mkdir()
    for m in cases:
        (folder / "bin" / m.name).symlink_to(program)
        built[m.name] = folder / "bin" / m.name
    return built


#: the quick cases' float32 program, built at the first quick case (test_v3_matches_the_reference)
_QUICK_PROGRAM = {}


def build(tmp_path, m, precision):
    """(generated folder, executable) of `m`: a quick case in float32 runs in the module's one
    program of the quick cases (one_program), any other model in a check program of its own."""
    if precision == "float32" and m.name in QUICK_CASES and CASES.get(m.name) is m:
        quick = [CASES[c] for c in sorted(QUICK_CASES)]
        return in_one_program(_QUICK_PROGRAM, tmp_path / "quick_cases", quick, m,
                              lambda folder, q: generate(folder, q, precision), ["-O0", *WARNINGS, *STRICT])
    out = generate(tmp_path, m, precision)
    return out, check_program(out, m, ["-O0", *WARNINGS, *STRICT])


def in_one_program(cache, folder, models, m, generate, flags):
    """(generated folder, executable) of `m`, one of `models`, from their one_program kept in `cache`
    (built in `folder` with `flags` at the first call); a case that failed raises its exception."""
    if not cache:
        generated = [(q, generate(folder, q)) for q in models]
        cache.update(folders={q.name: out for q, out in generated},
                     built=one_program(folder / "program", generated, flags))
    exe = cache["built"][m.name]
    if isinstance(exe, Exception):
        raise exe
    return cache["folders"][m.name], exe


def check_program(out, m, flags):
    """The host check program of `m`'s code generated in `out`, compiled with `flags`."""
    exe = out / "check"
    subprocess.run(["gcc", *flags, f"-I{out}",
                    *check_main_defines(f"{m.name}.h", f"{m.name}_infer", m.input_size, m.output_size),
                    str(out / f"{m.name}.c"), str(out / f"{m.name}_weights.c"), str(CHECK_MAIN), "-o", str(exe),
                    "-lm"], check=True, capture_output=True, text=True)
    return exe


def inputs(m, count=4):
    """Random inputs, positive where log/sqrt/reciprocal need them."""
    x = np.random.default_rng(5).normal(size=(count,) + tuple(m.input_shape))
    if m.name == "unary_chain":
        x = np.abs(x) + 0.1
    return x.astype(np.float32)


def check(exe, m, precision, count=4):
    x = inputs(m, count)
    y = native.run_cases(exe, x.reshape(len(x), -1), m.output_size)
    want = reference.run(m, x.astype(np.float64 if precision == "float64" else np.float32)).reshape(len(x), -1)
    error = float(np.max(np.abs(y - want)))
    assert error <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), (m.name, precision, error)
    return x, y


#: one case per family of operation compiles and runs in the quick tier (under 60 s overall); the
#: other cases and float64 run in the e2e tier
QUICK_CASES = {"transpose", "pad_reflect", "slice_stride", "gather_elements", "tile", "resize_linear",
               "unary_chain", "broadcast_mutual", "reduce", "softmax_middle", "lrn", "conv_groups"}


@pytest.mark.parametrize("precision", ["float32", pytest.param("float64", marks=pytest.mark.e2e)])
@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c in QUICK_CASES else [pytest.mark.e2e]) for c in CASES])
def test_v3_matches_the_reference(tmp_path, case, precision):
    m = CASES[case]
    g.validate(m)
    out, exe = build(tmp_path, m, precision)
    check(exe, m, precision)
    code = (out / f"{m.name}.c").read_text()
    assert f"(shape v3, {precision})" in code
    for forbidden in ("malloc", "while", "for (", "goto"):
        assert forbidden not in code, forbidden
    body = "\n".join(l for l in code.splitlines() if not l.startswith("#define"))
    assert "NN_READ" not in body and "NN_ADDR" not in body     # no table, no weight array is read
    facts = json.loads((out / f"{m.name}.flowfacts.json").read_text())
    assert facts["loops"] == []
    assert "typedef int" in (out / f"{m.name}_weights.c").read_text()   # no array: literals in the code
    if precision == "float64":
        assert "float m" not in code and re.search(r"static double \w+_arena\[", code) or "_arena[" not in code


def test_literals_are_exact_in_both_precisions():
    num32, num64 = v3.Numbers("float32"), v3.Numbers("float64")
    for value in (0.1, -1e-30, 3.0, 1 / 3, 65504.0, -0.0, 1e-45):
        f = np.float32(value)
        assert np.float32(float(num32.weight(value).rstrip("f"))) == f
        assert float(num64.weight(value)) == float(f)            # the float32 value exactly, as a double
        assert float(num64.param(value)) == float(value)         # parameters keep their double value
    assert num32.weight(2) == "2.0f" and num64.weight(2) == "2.0" and num64.param(float("-inf")) == "(double)-INFINITY"


def test_movement_is_exact_and_needs_no_arithmetic(tmp_path):
    """Data movement copies bits: exact equality, each element one assignment at constant addresses."""
    m = CASES["pad_constant"]
    out, exe = build(tmp_path, m, "float32")
    x, y = check(exe, m, "float32")
    np.testing.assert_array_equal(y, reference.run(m, x).reshape(len(x), -1))
    code = (out / "pad_constant.c").read_text()
    statements = [l.strip() for l in code.splitlines() if l.strip().startswith("out[")]
    assert len(statements) == m.output_size
    assert all(re.fullmatch(r"out\[\d+\] = (in\[\d+\]|3\.5f);", s) for s in statements), statements[:5]


def test_generation_is_deterministic_and_counts_terms(tmp_path):
    m = CASES["resize_cubic"]
    a, b = generate(tmp_path / "a", m, "float64"), generate(tmp_path / "b", m, "float64")
    for name in ("resize_cubic.c", "resize_cubic_weights.c", "resize_cubic.h", "resize_cubic.trace.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    trace = json.loads((a / "resize_cubic.trace.json").read_text())
    assert trace["compile_estimate"]["terms"] == 3 * 7 * 11 * 16   # 231 values, two cubic axes: 4 x 4 taps a value
    assert trace["layers"][0]["weights"] == []


def test_parts_stay_within_part_terms(tmp_path):
    """A reduction of 600 values is one expression (its own part); the rest are cut at PART_TERMS."""
    m = model("big_reduce", [g.Reduce("r", "sum", (0, 1), False), g.Elementwise("e", "add", ((1, f32(6)),))],
              shape=(20, 30, 6))
    out, exe = build(tmp_path, m, "float32")
    check(exe, m, "float32", 2)
    code = (out / "big_reduce.c").read_text()
    parts = re.findall(r"^static NN_NOINLINE void (nn_\w+_p\d+)\(const float \*in, float \*out\)$", code, re.M)
    assert parts == [f"nn_r_p{k}" for k in range(6)] + ["nn_e_p0"]   # definitions: one sum a part, then the add


def test_v3_refuses_beyond_its_limit_counting_the_new_operations(tmp_path, monkeypatch):
    monkeypatch.setenv("NNBUILD_V3_MAX_TERMS", "1000")
    m = CASES["resize_cubic"]
    with pytest.raises(Exception, match=r"shape v3 would unroll about 3,696 terms \(limit 1,000"):
        codegen.generate(m, tmp_path / "x", shape="v3", precision="float32")


def test_layer_named_like_a_helper_does_not_collide(tmp_path):
    """A layer 'elu' (part functions nn_elu_p0..) beside the unary helper nn_elu_0 and nn_max."""
    m = model("names", [g.Unary("elu", "elu", (0.5,)), g.Elementwise("max", "max", ((1, f32(5)),))])
    out, exe = build(tmp_path, m, "float32")
    check(exe, m, "float32")


def every_kind():
    """One DAG with every render kind v3 writes (and the activation softmax, pool, dense around them)."""
    layers = [g.Conv2D("dw", f32(3, 3, 1, 4), f32(4), (1, 1), (2, 1), (2, 2, 1, 1), "relu", groups=4),
              g.Pad("pad", ((0, 1), (1, 0), (0, 0)), "constant", float("-inf")),
              g.Pool2D("pool", "max", (2, 2), (2, 2)),
              g.Transpose("t", (2, 0, 1)),
              g.Unary("clip", "clip", (-1.0, float("inf"))),
              g.Unary("sig", "sigmoid"),
              g.Elementwise("mix", "min", ((1, f32(1, 3, 1)),), "tanh"),
              g.Reduce("red", "max", (1,), True),
              g.Elementwise("sub", "sub", (), "linear"),
              g.Softmax("soft", 1),
              g.LRN("lrn", 3, 0.01, 0.75, 1.0),
              g.Resize("up", (4, 5, 3), (1, 5 / 3, 1), "cubic"),
              g.Reduce("mean", "mean", (0, 2), False),
              g.Dense("head", f32(5, 3), f32(3), "softmax")]
    edges = {"dw": ("input",), "pad": ("dw",), "pool": ("pad",), "t": ("pool",), "clip": ("t",), "sig": ("clip",),
             "mix": ("sig",), "red": ("mix",), "sub": ("mix", "red"), "soft": ("sub",), "lrn": ("soft",),
             "up": ("lrn",), "mean": ("up",), "head": ("mean",)}
    return model("every_kind", layers, shape=(5, 6, 4), edges=edges)


STRICT_ALL = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Wdouble-promotion",
              "-Wfloat-equal", "-Wswitch-default", "-Werror"]


def strict_variants():
    for board in ("host", "avr", "arm"):
        for precision in ("float32", "float64"):
            if precision == "float64" and board == "avr":
                continue    # avr-gcc's double is 32 bits: codegen refuses float64 there
            yield pytest.param(board, precision, id=f"{board}-{precision}")


@pytest.mark.e2e
@pytest.mark.parametrize("board,precision", list(strict_variants()))
def test_every_kind_is_clean_under_the_strict_warnings(tmp_path, board, precision):
    """The test_c_warnings flag set with each board's compiler and flags (AVR: far flash storage)."""
    spec = boards.load_board(board)
    if not shutil.which(spec["cc"]):
        pytest.skip(f"{spec['cc']} not installed")
    m = every_kind()
    g.validate(m)
    out = tmp_path / "gen"
    codegen.generate(m, out, shape="v3", precision=precision, passes_log=[],
                     storage="avr-progmem-far" if board == "avr" else "const")
    cmd = [spec["cc"], *compile_flags(spec), *STRICT_ALL, f"-I{out}", "-c", str(out / "every_kind.c"),
           str(out / "every_kind_weights.c")]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr[:4000]
    if board == "host":
        _, exe = build(tmp_path, m, precision)
        check(exe, m, precision)


@pytest.mark.skipif(not shutil.which("cppcheck"), reason="cppcheck not installed")
@pytest.mark.e2e
def test_cppcheck_finds_nothing_in_every_kind(tmp_path):
    from test_c_cppcheck import CPPCHECK
    out = generate(tmp_path, every_kind(), "float64")
    result = subprocess.run([*CPPCHECK, f"-I{out}", str(out / "every_kind.c"), str(out / "every_kind_weights.c")],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr[:4000]


@pytest.mark.e2e
@needs_avr
@pytest.mark.parametrize("name", ["movement", "arithmetic"])
def test_avr_simavr_runs_the_new_operations(tmp_path, name):
    """Two small DAGs on the ATmega1284 under simavr: data movement and depthwise conv (no array
    anywhere), and broadcasting, reductions, axis softmax, LRN and linear resize."""
    if name == "movement":
        layers = [g.Conv2D("dw", f32(3, 3, 1, 4), f32(4), (1, 1), (1, 1), (1, 1, 1, 1), "relu", groups=4),
                  g.Pad("pad", ((1, 0), (0, 1), (0, 0)), "reflect"),
                  g.Transpose("chw", (2, 0, 1)),
                  g.Slice("s", (3, 4, 0), (-1, -2, 2), (4, 3, 2)),
                  g.Gather("gat", 2, np.array([1, 0, 1]))]
    else:
        layers = [g.Resize("up", (5, 6, 4), (1, 1.5, 1.0), "linear"),
                  g.LRN("lrn", 3, 0.05, 0.75, 1.0),
                  g.Reduce("mean", "mean", (1,), False),
                  g.Elementwise("scale", "mul", ((1, f32(4)),), "linear"),
                  g.Softmax("soft", 0)]
    m = model(f"avr_{name}", layers, shape=(5, 4, 4))
    board = pipeline.load_board("avr")
    program, harness = pipeline.build_check_program(m, board, tmp_path, shape="v3", passes_log=[])
    x = inputs(m, 3)
    y, cycles = pipeline.run_cases(board, program, x.reshape(3, -1), m.output_size, entry=f"{m.name}_infer",
                                   harness=harness)
    want = reference.run(m, x).reshape(3, -1)
    assert np.max(np.abs(y - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want))))
    assert min(cycles) > 100
    print(f"{m.name}: {max(cycles)} cycles, max error {np.max(np.abs(y - want)):.3g}")


def unfit_dense(name, rows):
    """A dense layer of `rows` x 160 random weights (v3: one distinct sum per output)."""
    return model(name, [g.Flatten("f"), g.Dense("d", f32(160, rows), f32(rows), "linear")], shape=(4, 4, 10))


@pytest.mark.parametrize("precision", ["q8", pytest.param("float32", marks=pytest.mark.e2e)])  # float32: 3 s to generate
def test_v3_too_big_for_the_flash_is_refused_before_any_compile(tmp_path, precision):
    """About 32,000 distinct terms at the ATmega328P's 8 bytes each need about 256 KB of its 32 KB: one
    line after generation, no object compiled (LeNet-5 v3 q8 on avr: 3 s instead of 8.5 min)."""
    m = unfit_dense("unfit", 200)
    line = (r"gen/unfit\.c: unfit does not fit the ATmega328P's flash: it needs at least [\d,]+ bytes \([\d,]+ "
            r"unrolled terms of at least 8 bytes each\), the board has 32,768 \(shape=v3 unrolls every multiply; "
            r"try shape=v2\)$")
    with pytest.raises(Exception, match=line):
        pipeline.build_check_program(m, pipeline.load_board("atmega328p"), tmp_path, shape="v3", precision=precision,
                                     input_range=(-1.0, 1.0), passes_log=[])
    assert not list(tmp_path.rglob("*.o")) and not list(tmp_path.rglob("*.elf"))


def test_v3_generate_step_too_big_for_the_flash_leaves_no_files(tmp_path):
    """`nnbuild generate --board atmega328p --shape v3`: the same line, and none of the C it wrote."""
    with pytest.raises(NNBuildError, match=r"unfit does not fit the ATmega328P's flash: it needs at least"):
        steps.generate(unfit_dense("unfit", 200), tmp_path / "gen", shape="v3", precision="q8", target="atmega328p",
                       input_range=(-1.0, 1.0))
    assert not [p for p in (tmp_path / "gen").rglob("*") if p.is_file()]


@needs_avr
@pytest.mark.e2e
@pytest.mark.parametrize("precision", ["q8", "q16-acc32", "float32"])
def test_v3_flash_bound_per_term_is_below_the_compiled_code(tmp_path, precision):
    """The boards' v3_term_flash_bytes is a true lower bound: avr-gcc's object of each model's code is at
    least (distinct terms) x that many bytes, for random rows and for equal rows (whose sums the
    compiler may share: counted once). float32 takes fewer rows (4 random, 10 equal): avr-gcc's time on
    one unrolled function grows faster than its terms, and a float term takes 40 B against the bound's 8."""
    board = boards.load_board("avr")
    small = precision == "float32"
    ones = model("ones", [g.Flatten("f"), g.Dense("d", np.ones((48, 10 if small else 40), np.float32), None,
                                                  "linear")], shape=(4, 4, 3))
    for m in (unfit_dense("rand", 4 if small else 12), ones):
        out = tmp_path / m.name
        codegen.generate(m, out, shape="v3", precision=precision, storage=board["weights_storage"],
                         input_range=(-1.0, 1.0), passes_log=[])
        terms = json.loads((out / f"{m.name}.trace.json").read_text())["distinct_terms"]
        obj = out / f"{m.name}.o"
        subprocess.run([board["cc"], *compile_flags(board), f"-I{out}", "-c", str(out / f"{m.name}.c"), "-o", str(obj)],
                       check=True, capture_output=True)
        listing = subprocess.run([board["size"], "-A", str(obj)], capture_output=True, text=True, check=True).stdout
        code = sum(int(line.split()[1]) for line in listing.splitlines()
                   if line.startswith((".text", ".data", ".rodata", ".progmem")))
        print(f"\n{m.name} {precision}: {terms:,} distinct terms, {code:,} bytes, {code / terms:.1f} B/term")
        assert code >= terms * board["v3_term_flash_bytes"]
