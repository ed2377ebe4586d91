"""The C generator: deterministic, static, warning-free, exact, NaN-free, traced and bounded."""

import json
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO, needs_avr
from nnbuild import codegen, pipeline
from nnbuild.codegen import common
from nnbuild.errors import NNBuildError
from nnbuild.compilers import gcc
from nnbuild.ir import reference
from nnbuild.ir.graph import Activation, Dense, Model
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

F1TENTH = REPO / "firmware_examples" / "f1tenth" / "architecture.json"
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def generated(tmp_path, storage="const", model=F1TENTH, name="f1tenth"):
    out = tmp_path / f"gen_{storage}"
    pipeline.generate(model, out, name=name, storage=storage)
    return out


#: storage -> f1tenth's generated folder, for the tests that only read it (generated once for the
#: module, in the first asking test's tmp_path; test_output_is_byte_identical_across_runs and the
#: tests that edit generate their own)
_READ_ONLY = {}


def generated_once(tmp_path, storage):
    if storage not in _READ_ONLY:
        _READ_ONLY[storage] = generated(tmp_path, storage)
    return _READ_ONLY[storage]


def test_output_is_byte_identical_across_runs(tmp_path):
    first = generated(tmp_path / "a", "avr-progmem-far")
    second = generated(tmp_path / "b", "avr-progmem-far")
    for name in codegen.outputs("f1tenth"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_weight_edit_leaves_the_code_file_identical(tmp_path):
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    out_a, out_b = tmp_path / "a", tmp_path / "b"
    codegen.generate(model, out_a)
    kernel = np.array(model.layers[0].kernel)
    kernel[3, 5] += np.float32(0.5)
    model.layers[0] = Dense(model.layers[0].name, kernel, model.layers[0].bias, model.layers[0].activation)
    codegen.generate(model, out_b)
    assert (out_a / "f1tenth.c").read_bytes() == (out_b / "f1tenth.c").read_bytes()
    assert (out_a / "f1tenth_weights.c").read_bytes() != (out_b / "f1tenth_weights.c").read_bytes()


def test_code_is_static_and_traced(tmp_path):
    out = generated_once(tmp_path, "avr-progmem-far")
    code = (out / "f1tenth.c").read_text()
    for forbidden in ("malloc", "free(", "calloc", "goto", "while"):
        assert forbidden not in code, forbidden
    assert not re.search(r"\(\s*\*\s*\w+\s*\)\s*\(", code), "function pointer"
    statics = [l for l in code.splitlines() if l.lstrip().startswith("static")]
    assert all(re.match(r"static NN_NOINLINE float nn_\w+\(float x\)", l) for l in statics), statics
    for layer in ("dense_1", "dense_2", "dense_3"):
        assert f"Dense '{layer}'" in code
    trace = json.loads((out / "f1tenth.trace.json").read_text())
    lines = code.splitlines()
    for layer in trace["layers"]:
        first, last = layer["lines"]
        assert any(layer["name"] in l for l in lines[first - 1:last])


def test_every_loop_has_a_literal_bound_in_the_flow_facts(tmp_path):
    out = generated_once(tmp_path, "avr-progmem-far")
    code = (out / "f1tenth.c").read_text().splitlines()
    facts = json.loads((out / "f1tenth.flowfacts.json").read_text())
    fors = [i + 1 for i, l in enumerate(code) if l.strip().startswith("for (")]
    assert sorted(f["line"] for f in facts["loops"]) == fors
    for fact in facts["loops"]:
        text = code[fact["line"] - 1]
        assert re.search(rf"< {fact['max_iterations']}u;", text), text
        assert code[fact["last_line"] - 1].strip() == "}"
    # 61x128 + three chunks of 128x128 + 128x1: every weight is read exactly once
    macs = sum(f["max_iterations"] * next(g["max_iterations"] for g in facts["loops"]
                                           if g["line"] > f["line"] and g["last_line"] < f["last_line"])
               for f in facts["loops"] if any(g["line"] > f["line"] and g["last_line"] < f["last_line"]
                                              for g in facts["loops"]))
    assert macs == 61 * 128 + 128 * 128 + 128


def test_flow_facts_come_from_the_emitter_and_follow_post_processing():
    """The recorder's bounds and layers land on the lines the text ends up with, even when lines
    are dropped after rendering (v1 drops unused kernels), and facts of dropped text vanish."""
    ff = common.FlowFacts("m", functions=True)
    text = "\n".join([
        f"void {ff.function('m_infer')}(void)", "{", f"    {ff.layer('a')}",
        f"    {ff.loop(7)}", "    for (k = 0; k < 7u; ++k) {", "        DROP", f"    }}{ff.end()}",
        f"    {ff.layer('b')}", f"    {ff.loop(3)}", "    for (k = 0; k < 3u; ++k) {",
        f"        {ff.loop(9)} DROP", "        for (j = 0; j < 9u; ++j) { DROP", f"        }}{ff.end()} DROP",
        f"    }}{ff.end()}", f"    {ff.layers_end()}", "}"])
    code, facts, _ = ff.resolve("\n".join(l for l in text.split("\n") if "DROP" not in l))
    lines = code.splitlines()
    assert "\x02" not in code and "\x03" not in code
    assert [(f["line"], f["last_line"], f["max_iterations"], f["layer"], f["function"]) for f in facts["loops"]] == [
        (5, 6, 7, "a", "m_infer"), (9, 10, 3, "b", "m_infer")]
    assert [(l["name"], l["first_line"], l["last_line"]) for l in facts["layers"]] == [("a", 3, 6), ("b", 7, 11)]
    assert lines[3].strip() == "NN_LOOPBOUND(7)" and lines[10].strip() == "/* nnbuild-end */"


def test_flow_fact_recorder_refuses_an_unclosed_loop():
    ff = common.FlowFacts("m")
    text = ff.loop(4) + "\nfor (;;) {\n}"
    with pytest.raises(NNBuildError, match="left open"):
        ff.resolve(text)


def test_avr_weight_arrays_stay_below_avr_gcc_object_limit(tmp_path):
    header = (generated_once(tmp_path, "avr-progmem-far") / "f1tenth_weights.h").read_text()
    sizes = [int(n) * 4 for n in re.findall(r"\[(\d+)\] F1TENTH_FLASH", header)]
    assert sum(sizes) == (61 * 128 + 128 * 128 + 128 + 128 + 128 + 1) * 4
    assert max(sizes) <= 32767


def compile_and_run(tmp_path, out, name, x, n_out, flags):
    exe = tmp_path / "check"
    cmd = ["gcc", *flags, *WARNINGS, f"-I{out}", *check_main_defines(f"{name}.h", f"{name}_infer", x.shape[1], n_out),
           str(out / f"{name}.c"), str(out / f"{name}_weights.c"), str(CHECK_MAIN), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return native.run_cases(exe, x, n_out)


#: each storage and each level once in the quick tier (-O2 const, -O0 far); the other two pairs are e2e
@pytest.mark.parametrize("opt, storage", [("-O0", "avr-progmem-far"), ("-O2", "const"),
                                          pytest.param("-O0", "const", marks=pytest.mark.e2e),
                                          pytest.param("-O2", "avr-progmem-far", marks=pytest.mark.e2e)])
def test_host_build_is_clean_and_exact(tmp_path, storage, opt):
    out = generated_once(tmp_path, storage)
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    x = np.random.default_rng(3).uniform(-1, 1, (20, 61)).astype(np.float32)
    y = compile_and_run(tmp_path, out, "f1tenth", x, 1, [opt, "-ffp-contract=off"])
    assert np.max(np.abs(y - reference.run(model, x))) <= 1e-5


@pytest.mark.e2e  # avr-gcc
@needs_avr
@pytest.mark.parametrize("opt", ["-Os", "-O0"])
def test_avr_build_is_clean_and_fits(tmp_path, opt):
    out = generated_once(tmp_path, "avr-progmem-far")
    board = pipeline.load_board("avr")
    elf = gcc.build_executable(board, [out / "f1tenth.c", out / "f1tenth_weights.c", REPO / "firmware_examples/f1tenth/main.c"],
                               tmp_path / "fw.elf", include_dirs=[out], opt=opt)
    sizes = gcc.section_sizes(board, elf)
    assert sizes["text"] + sizes["data"] <= 131072
    assert sizes["data"] + sizes["bss"] < 1024  # weights stay in flash


def test_activations_never_produce_nan(tmp_path):
    """Huge pre-activations: tanh/sigmoid saturate, softmax subtracts the max, relu passes."""
    rng = np.random.default_rng(0)
    k = (rng.standard_normal((4, 6)) * 1e6).astype(np.float32)
    model = Model("big", (4,), [Dense("d1", k, None, "tanh"),
                                Dense("d2", (rng.standard_normal((6, 6)) * 1e3).astype(np.float32), None, "linear"),
                                Activation("s", "sigmoid"),
                                Dense("d3", (rng.standard_normal((6, 5)) * 1e4).astype(np.float32), None, "relu"),
                                Dense("d4", (rng.standard_normal((5, 3)) * 1e4).astype(np.float32), None, "softmax")])
    out = tmp_path / "gen"
    codegen.generate(model, out)
    x = np.array([[1e3, -1e3, 30.0, -30.0], [1e-30, 0, 0, 0], [-88, 89, 1e38, -1e38]], dtype=np.float32)
    y = compile_and_run(tmp_path, out, "big", x, 3, ["-O2", "-ffp-contract=off"])
    assert np.all(np.isfinite(y))
    assert np.allclose(y.sum(axis=1), 1.0, atol=1e-6)


def test_unknown_precision_and_shape_are_refused(tmp_path):
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    with pytest.raises(Exception, match="precision 'bfloat16' is not supported"):
        codegen.generate(model, tmp_path, precision="bfloat16")
    with pytest.raises(Exception, match="unknown code shape 'v9'"):
        codegen.generate(model, tmp_path, shape="v9")
    assert not any(tmp_path.iterdir())


def v3_model(filters):
    """conv 3x3 (1 -> filters) relu on 12x12x1, flatten, dense 10 softmax: 2,000 terms a filter + 10."""
    from nnbuild.ir.graph import Conv2D, Flatten
    rng = np.random.default_rng(3)
    w = lambda *s: (rng.normal(size=s) * 0.3).astype(np.float32)  # noqa: E731
    layers = [Conv2D("conv", w(3, 3, 1, filters), w(filters), activation="relu"), Flatten("flat"),
              Dense("dense", w(100 * filters, 10), w(10), "softmax")]
    return Model(f"v3m{filters}", (12, 12, 1), layers, source_files=("m.h5",))


def test_v3_warns_before_a_long_compile_and_records_the_estimate(tmp_path, capsys):
    from nnbuild.codegen import v3
    codegen.generate(v3_model(1), tmp_path / "small", shape="v3")
    small = json.loads((tmp_path / "small" / "v3m1.trace.json").read_text())["compile_estimate"]
    assert capsys.readouterr().err == "" and not small["warned"]
    model = v3_model(20)                       # 40,010 terms: above the 10 s warning line
    codegen.generate(model, tmp_path / "big", shape="v3")
    err = capsys.readouterr().err.splitlines()
    big = json.loads((tmp_path / "big" / "v3m20.trace.json").read_text())["compile_estimate"]
    assert big["terms"] == 40_010 and big["warned"] and big["seconds_per_compile"] == round(40_010 * 0.32e-3, 1)
    assert len(err) == 1 and err[0].startswith("nnbuild: warning: shape v3 unrolls 40,010 terms of model 'v3m20': "
                                               "expect about 13 s per compile of v3m20.c (measured "), err
    assert v3.COMPILE_BASIS in err[0] and small["terms"] * v3.COMPILE_SECONDS_PER_TERM < v3.WARN_SECONDS


def every_path_model():
    """Dense layers through every path of the host mlp code: blocks of 16 neurons, a tail of vectors
    and rows left over (37 units), no bias, rows only (3 units), each activation, softmax."""
    rng = np.random.default_rng(7)

    def kernel(a, b):
        return rng.standard_normal((a, b)).astype(np.float32)
    return Model("paths", (7,), [Dense("d1", kernel(7, 37), rng.standard_normal(37).astype(np.float32), "relu"),
                                 Dense("d2", kernel(37, 16), None, "tanh"),
                                 Dense("d3", kernel(16, 3), rng.standard_normal(3).astype(np.float32), "linear"),
                                 Activation("s", "sigmoid"),
                                 Dense("d4", kernel(3, 6), None, "softmax")])


#: -O3 in the quick tier (every -O2 transformation and the vectoriser: the level most likely to
#: reorder a sum), -O0 and -O2 e2e
@pytest.mark.parametrize("opt", [pytest.param("-O0", marks=pytest.mark.e2e), pytest.param("-O2", marks=pytest.mark.e2e),
                                 "-O3"])
def test_host_scalar_blocks_sum_each_neuron_in_input_order(tmp_path, opt):
    """storage const computes up to 12 neurons per pass (37 rows: 3 blocks of 10 and 7 left; 13
    rows: 7 and 6) with `register` accumulators: each output is still the bias plus the products
    added in input order in float32, bit for bit, at any optimisation level."""
    rng = np.random.default_rng(11)
    k1, b1 = rng.standard_normal((9, 37)).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    k2 = rng.standard_normal((37, 13)).astype(np.float32)
    model = Model("blocks", (9,), [Dense("d1", k1, b1, "relu"), Dense("d2", k2, None, "linear")])
    x = rng.uniform(-2, 2, (16, 9)).astype(np.float32)
    out = tmp_path / "gen"
    codegen.generate(model, out, storage="const")
    code = (out / "blocks.c").read_text()
    assert "register float acc9 = b[9];" in code and "register float acc6 = 0.0f;" in code
    y = compile_and_run(tmp_path, out, "blocks", x, 13, [opt, "-ffp-contract=off"])

    def in_order(inputs, kernel, bias):
        acc = np.zeros((inputs.shape[0], kernel.shape[1]), np.float32) if bias is None else np.tile(bias, (inputs.shape[0], 1))
        for i in range(kernel.shape[0]):
            acc = (acc + (inputs[:, i:i + 1] * kernel[i]).astype(np.float32)).astype(np.float32)
        return acc
    hidden = np.maximum(in_order(x, k1, b1), np.float32(0))
    assert np.array_equal(y.view(np.uint32), in_order(hidden, k2, None).view(np.uint32))


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_host_vectors_give_the_scalar_results_bit_for_bit(tmp_path, precision):
    """const-simd (one neuron per vector lane) == const (up to 12 neurons per pass, one row each),
    bit for bit, optimised or not; the vector code is byte-identical across generations and bounded."""
    model = every_path_model()
    x = np.random.default_rng(8).uniform(-3, 3, (64, 7)).astype(np.float32)
    x[:8] *= np.float32(1e30)  # sums that overflow
    x[8:16] *= np.float32(1e-41)  # subnormal inputs
    x[16] = 0.0
    x[17] = -0.0
    runs = {}
    for storage, opt in (("const-simd", "-O2"), ("const-simd", "-O0"), ("const", "-O2"), ("const", "-O0")):
        out = tmp_path / f"{storage}{opt}"
        codegen.generate(model, out, precision=precision, storage=storage)
        runs[storage, opt] = compile_and_run(tmp_path, out, "paths", x, 6, [opt, "-ffp-contract=off"]).view(np.uint32)
    code = (tmp_path / "const-simd-O2" / "paths.c").read_text().splitlines()
    assert any("paths_vec" in line for line in code)
    facts = json.loads((tmp_path / "const-simd-O2" / "paths.flowfacts.json").read_text())
    for name in codegen.outputs("paths"):  # generated twice: byte-identical
        assert (tmp_path / "const-simd-O2" / name).read_bytes() == (tmp_path / "const-simd-O0" / name).read_bytes()
    assert sorted(f["line"] for f in facts["loops"]) == [i + 1 for i, l in enumerate(code) if l.strip().startswith("for (")]
    for key, y in runs.items():
        assert np.array_equal(y, runs["const", "-O2"]), key
    assert np.max(np.abs(runs["const-simd", "-O2"].view(np.float32) - reference.run(model, x))) <= 1e-5
