"""Fixed point: overflow proofs, bit-exact C (host and simavr) against the emulator, activation
error bounds, and the precision gates."""

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, needs_avr
from nnbuild import codegen, pipeline
from nnbuild.checks.inputs import check_inputs
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from nnbuild.numerics import bitexact as fixed
from nnbuild.ir.graph import Dense, Model
from nnbuild.numerics import plan as quantize
from nnbuild.runners import CHECK_MAIN, check_main_defines, native, simavr

F1TENTH = REPO / "firmware_examples/f1tenth/architecture.json"
PRECISIONS = ["q16", "q16-acc32", "q8", "fix16", "fixed4.12", "fixed8.24"]


def mixed_model(name="mix"):
    """Every activation the fixed-point shape implements, with a wide pre-activation range."""
    rng = np.random.default_rng(4)
    mk = lambda i, o, s: (rng.standard_normal((i, o)) * s).astype(np.float32)  # noqa: E731
    return Model(name, (6,), [Dense("d1", mk(6, 9, 0.8), mk(1, 9, 0.1)[0], "relu"),
                               Dense("d2", mk(9, 7, 0.5), None, "sigmoid"),
                               Dense("d3", mk(7, 8, 1.5), mk(1, 8, 0.2)[0], "tanh"),
                               Dense("d4", mk(8, 5, 0.7), mk(1, 5, 0.1)[0], "linear"),
                               Dense("d5", mk(5, 4, 2.0), None, "softmax")])


def probe_inputs(n_in, lo=-1.0, hi=1.0):
    """In-range inputs plus out-of-range, infinite and NaN ones (clamped by contract)."""
    x = check_inputs(n_in, 60, 11, (lo, hi))
    odd = np.array([[5.0] * n_in, [-7.0] * n_in, [np.inf] * n_in, [-np.inf] * n_in, [np.nan] * n_in],
                   dtype=np.float32)
    return np.vstack([x, odd])


HOST_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-ffp-contract=off"]


def generate_far(folder, model, precision):
    out = folder / precision
    codegen.generate(model, out, precision=precision, storage="avr-progmem-far", input_range=(-1, 1))
    return out


#: the quick mixed precisions' host program (test_shape_v3_ops.one_program: each precision's C as
#: host_outputs compiles it, the model named mix_<precision> so that they link together), built at
#: the first of them
_MIXED_PROGRAM = {}


def mixed_host_outputs(tmp_path, precision, x):
    """The quick mixed model's host outputs in `precision`, from the module's one program."""
    from test_shape_v3_ops import one_program
    if not _MIXED_PROGRAM:
        folder = tmp_path / "mixed_quick"
        models = [(p, mixed_model("mix_" + p.replace("-", "_").replace(".", "_"))) for p in PRECISIONS
                  if ("mixed", p) in QUICK_HOST]
        generated = [(m, generate_far(folder, m, p)) for p, m in models]
        built = one_program(folder / "program", generated, HOST_FLAGS)
        _MIXED_PROGRAM.update({p: (built[m.name], m.output_size) for p, m in models})
    exe, n_out = _MIXED_PROGRAM[precision]
    if isinstance(exe, Exception):
        raise exe
    return native.run_cases(exe, x, n_out)


def host_outputs(tmp_path, model, precision, x):
    out = generate_far(tmp_path, model, precision)
    exe = out / "check"
    cmd = ["gcc", *HOST_FLAGS, f"-I{out}",
           *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size),
           str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return native.run_cases(exe, x, model.output_size)


#: f1tenth's host C in every precision but q16 is e2e: the quick tier keeps f1tenth-q16 (a real
#: model's sizes; q16 with 64-bit accumulators there) and the mixed model in every precision (each
#: precision's C and emulator path) but q16, whose C is mixed-q16-acc32's byte for byte (its sums
#: fit 32 bits): a repetition, e2e
QUICK_HOST = {("f1tenth", "q16")} | {("mixed", p) for p in PRECISIONS if p != "q16"}
HOST_CASES = [pytest.param(which, precision, id=f"{which}-{precision}",
                           marks=[] if (which, precision) in QUICK_HOST else [pytest.mark.e2e])
              for which in ("f1tenth", "mixed") for precision in PRECISIONS]


@pytest.mark.parametrize("which, precision", HOST_CASES)
def test_host_c_equals_the_emulator_bit_for_bit(tmp_path, precision, which):
    model = pipeline.load_model(F1TENTH, "f1tenth")[0] if which == "f1tenth" else mixed_model()
    x = probe_inputs(model.input_size)
    if (which, precision) in QUICK_HOST and which == "mixed":
        c = mixed_host_outputs(tmp_path, precision, x)
    else:
        c = host_outputs(tmp_path, model, precision, x)
    emulated = fixed.run(quantize.quantize(model, precision, (-1, 1)), x)
    assert np.array_equal(c.view(np.uint32), emulated.view(np.uint32))
    assert np.all(np.isfinite(c))


@pytest.mark.parametrize("precision, tolerance", [("q16", 3e-4), ("q16-acc32", 1.2e-3), ("q8", 1.6e-2), ("fix16", 3e-4)])
def test_error_against_float64_reference_on_f1tenth(precision, tolerance):
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    x = check_inputs(model.input_size, 300, 5, (-1, 1))
    error = np.abs(fixed.run(quantize.quantize(model, precision, (-1, 1)), x) - reference.run(model, x)).max()
    print(f"\n{precision}: max |fixed - float64| = {error:.3g}")
    assert error <= tolerance


@needs_avr
@pytest.mark.e2e  # avr-gcc + simavr
@pytest.mark.parametrize("precision", ["q16-acc32", "q16", "q8", "fix16", "fixed4.12", "fixed8.24"])
def test_avr_c_equals_the_emulator_bit_for_bit(tmp_path, precision):
    """On the MCU: the inline-asm MAC, near/far flash reads and 64-bit splits are exact."""
    model = mixed_model()
    board = pipeline.load_board("avr")
    src = tmp_path / "mix.h5"
    elf, harness = build_avr(tmp_path, model, precision, board)
    x = probe_inputs(model.input_size)
    y, cycles = simavr.run_cases(elf, x, model.output_size, entry_symbol="mix_infer", mcu=board["mcu"],
                                 freq=board["clock_hz"], harness=harness)
    emulated = fixed.run(quantize.quantize(model, precision, (-1, 1)), x)
    assert np.array_equal(y.view(np.uint32), emulated.view(np.uint32)), src
    assert cycles.min() > 0


def build_avr(tmp_path, model, precision, board):
    from nnbuild.compilers import gcc
    out = tmp_path / "gen"
    codegen.generate(model, out, precision=precision, storage=board["weights_storage"], input_range=(-1, 1))
    defines = [d[2:] for d in check_main_defines("mix.h", "mix_infer", model.input_size, model.output_size)]
    elf = gcc.build_executable(board, [out / "mix.c", out / "mix_weights.c", CHECK_MAIN], tmp_path / "mix.elf",
                               include_dirs=[out], defines=defines)
    return elf, simavr.build_harness(tmp_path / "simavr_run")


def accumulators(plan, x):
    """Every accumulator value the code computes on inputs x (emulated exactly)."""
    q = fixed.quantize_input(x, plan.input, plan.input_range)
    seen = []
    for layer in plan.layers:
        if layer.per_mac_shift:
            s = layer.per_mac_shift
            acc = layer.bias_q + ((q[:, None, :] * layer.kernel_q[None] + (1 << (s - 1))) >> s).sum(axis=2)
        else:
            acc = layer.bias_q + q @ layer.kernel_q.T
        seen.append(np.abs(acc).max())
        q = fixed.dense(layer, q)
    return seen


@pytest.mark.parametrize("precision", PRECISIONS)
def test_proven_accumulator_bound_holds_on_extreme_inputs(precision):
    model = mixed_model()
    plan = quantize.quantize(model, precision, (-1, 1))
    rng = np.random.default_rng(2)
    x = np.vstack([rng.choice([-1.0, 1.0], size=(2000, 6)), probe_inputs(6)]).astype(np.float32)
    for layer, seen in zip(plan.layers, accumulators(plan, x)):
        assert seen <= layer.acc_bound < 2 ** (layer.acc_bits - 1), layer.name


def overflowing_model():
    """One neuron summing 400 inputs of weight 0.5: |acc| reaches 200 (x in [-1, 1])."""
    return Model("big", (400,), [Dense("wide", np.full((400, 1), 0.5, np.float32), None, "linear")])


def test_overflow_gets_a_wider_accumulator_or_fewer_weight_bits():
    q16 = quantize.quantize(overflowing_model(), "q16", (-1, 1))
    assert q16.layers[0].acc_bits == 64  # 0.5 at Q15 times 1.0 at Q14, 400 times, exceeds int32
    fast = quantize.quantize(overflowing_model(), "q16-acc32", (-1, 1))
    assert fast.layers[0].acc_bits == 32 and fast.layers[0].weight.frac < q16.layers[0].weight.frac
    assert "lowered" in fast.layers[0].notes[0]


def test_q8_stores_int8_weights_and_proves_int32_accumulators():
    """q8: every weight tensor int8, activations int16, every accumulator proven within int32
    (weight fraction bits given up where the full int8 scale would overflow it)."""
    plan = quantize.quantize(mixed_model(), "q8", (-1, 1))
    for layer in plan.layers:
        assert layer.weight.bits == 8 and layer.input.bits == 16 and layer.output.bits == 16
        assert layer.acc_bits == 32 and layer.acc_bound < 2 ** 31 - 1
        assert np.abs(layer.kernel_q).max() <= 127
    wide = quantize.quantize(overflowing_model(), "q8", (-1, 1)).layers[0]
    assert wide.weight.frac == 7 and np.all(wide.kernel_q == 64)  # 0.5 at Q7: 64 * 16384 * 400 < 2^31
    lowered = Model("big", (4000,), [Dense("wide", np.full((4000, 1), 0.9, np.float32), None, "linear")])
    layer = quantize.quantize(lowered, "q8", (-1, 1)).layers[0]
    assert layer.acc_bits == 32 and "lowered" in layer.notes[0]
    assert layer.weight.frac < 7  # 0.9 at Q7 (115) times 16384 at Q14, 4000 times, exceeds int32


def test_q8_refuses_a_layer_no_int32_accumulator_can_hold():
    huge = Model("big", (20000,), [Dense("vast", np.full((20000, 1), 100.0, np.float32), None, "linear")])
    with pytest.raises(NNBuildError, match=r"Dense 'vast'.*no weight format keeps the accumulator within int32"):
        quantize.quantize(huge, "q8", (-1, 1))


def test_what_cannot_fit_is_refused_with_the_layer_named():
    with pytest.raises(NNBuildError, match=r"Dense 'wide' output: values up to 8e\+04 do not fit fix16"):
        quantize.quantize(Model("big", (400,), [Dense("wide", np.full((400, 1), 200.0, np.float32), None,
                                                      "linear")]), "fix16", (-1, 1))
    with pytest.raises(NNBuildError, match=r"Dense 'wide' output.*do not fit fixed3.5"):
        quantize.quantize(overflowing_model(), "fixed3.5", (-1, 1))


@pytest.mark.parametrize("frac", [12, 14, 16])
def test_table_activations_meet_their_documented_error(frac):
    z = np.arange(-(12 << 16), 12 << 16, 5, dtype=np.int64)
    x, lsb = z / 65536.0, 2.0 ** -frac
    assert np.abs(fixed.tanh_q(z, frac) * lsb - np.tanh(x)).max() <= 3e-5 + lsb
    assert np.abs(fixed.sigmoid_q(z, frac) * lsb - 1 / (1 + np.exp(-x))).max() <= 2e-5 + lsb
    zz = (np.random.default_rng(0).standard_normal((5000, 10)) * 4 * 65536).astype(np.int64)
    e = np.exp(zz / 65536.0 - (zz / 65536.0).max(axis=1, keepdims=True))
    assert np.abs(fixed.softmax_q(zz, frac) * lsb - e / e.sum(axis=1, keepdims=True)).max() <= 2e-4 + lsb


def test_unknown_precision_and_missing_range_are_one_line():
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    with pytest.raises(NNBuildError, match="precision 'int7' is not supported"):
        quantize.check_precision("int7")
    with pytest.raises(NNBuildError, match="needs the model's input range"):
        codegen.generate(model, "/nonexistent/never-written", precision="q16")


def awkward_floats(frac, lo, hi, seed=0):
    """Random bit patterns (NaN, infinities, subnormals, both zeros), the floats on and beside every
    rounding tie of x * 2^frac, and in-range values."""
    rng = np.random.default_rng(seed)
    bits = np.concatenate([rng.integers(0, 2 ** 32, 40000, dtype=np.uint64).astype(np.uint32),
                           np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 1, 0x807FFFFF], np.uint32)])
    ties = ((np.concatenate([[0, -1], rng.integers(-2 ** 20, 2 ** 20, 20000)]) + 0.5) / 2.0 ** frac).astype(np.float32)
    # just below 0.5 / 2^frac: adding 0.5 in float32 rounds up to 1 there (the exact rounding gives 0)
    return np.concatenate([bits.view(np.float32), ties, np.nextafter(ties, np.float32(np.inf)),
                           np.nextafter(ties, np.float32(-np.inf)), rng.uniform(lo, hi, 20000).astype(np.float32)])


#: the ranges give nn_quantize different shifts of one code path; the quick tier keeps the two ends
#: (-1000..1000: the fewest fraction bits, -1e-3..1e-3: the most), the other three are e2e
@pytest.mark.parametrize("lo, hi", [pytest.param(-1.0, 1.0, marks=pytest.mark.e2e),
                                    pytest.param(-3.5, 2.25, marks=pytest.mark.e2e),
                                    pytest.param(0.0, 255.0, marks=pytest.mark.e2e), (-1000.0, 1000.0), (-1e-3, 1e-3)])
def test_generated_input_rounding_equals_the_model_on_every_awkward_float(tmp_path, lo, hi):
    """nn_quantize works on the float's bits (no float arithmetic): the generated function itself,
    compiled on the host, against bitexact.quantize_input on 100,011 floats per range."""
    model = Model("qin", (1,), [Dense("d", np.ones((1, 1), np.float32), None, "linear")])
    out = tmp_path / "gen"
    codegen.generate(model, out, precision="q16-acc32", storage="avr-progmem-far", input_range=(lo, hi))
    plan = quantize.quantize(model, "q16-acc32", (lo, hi))
    (tmp_path / "probe.c").write_text(
        '#include <stdio.h>\n#include <string.h>\n#include "qin.c"\n'
        "int main(void) { float f; while (fread(&f, 4, 1, stdin) == 1) { int32_t q = nn_quantize(f);"
        " fwrite(&q, 4, 1, stdout); } return 0; }\n")
    exe = tmp_path / "probe"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", f"-I{out}",
                    str(tmp_path / "probe.c"), str(out / "qin_weights.c"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    x = awkward_floats(plan.input.frac, lo, hi)
    got = np.frombuffer(subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout,
                        np.int32)
    assert np.array_equal(got, fixed.quantize_input(x, plan.input, plan.input_range))



@needs_avr
@pytest.mark.e2e
@pytest.mark.parametrize("precision, lo, hi", [("q8", 0.0, 1.0), ("q16-acc32", -3.0, 5.0), ("fixed8.24", -100.0, 100.0),
                                               ("fixed12.20", 0.0, 1.0)])
def test_avr_float_conversions_are_exact_and_take_the_same_cycles_on_every_float(tmp_path, precision, lo, hi):
    """nn_quantize and nn_dequantize on AVR (branch-free selects in inline asm, the host's C fallback
    checked above): simavr == the bit-exact model on 6,000 awkward floats (clamps both ways, NaN,
    subnormals, ties, fixed8.24's left shifts), and each takes one cycle count for all (a 32-bit output
    is converted by the compiler's soft float instead)."""
    model = Model("qin", (1,), [Dense("d", np.ones((1, 1), np.float32), None, "linear")])
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, precision=precision, input_range=(lo, hi))
    plan = quantize.quantize(model, precision, (lo, hi))
    x = awkward_floats(plan.input.frac, lo, hi)
    x = x[np.random.default_rng(0).choice(len(x), 6000, replace=False)].reshape(-1, 1)
    run = lambda entry: simavr.run_cases(elf, x, 1, entry_symbol=entry, mcu=board["mcu"],  # noqa: E731
                                         freq=board["clock_hz"], harness=harness)
    y, _ = run("qin_infer")
    assert np.array_equal(y.view(np.uint32), np.asarray(fixed.run(plan, x), np.float32).view(np.uint32))
    for entry in ("nn_quantize",) + (("nn_dequantize",) if plan.output.bits <= 16 else ()):
        cycles = run(entry)[1]
        assert cycles.min() == cycles.max(), (entry, cycles.min(), cycles.max())

@needs_avr
@pytest.mark.e2e
@pytest.mark.parametrize("shape", ["mlp", "v2"])
def test_q8_weights_beyond_64k_of_flash_are_exact_on_avr(tmp_path, shape):
    """q8 weights past the near-flash limit (72 KB): the mlp shape's C loop with far byte reads, v2's
    NN_DOT8F rows (ELPM Z+); simavr == the bit-exact model, and the WCET bound holds on every run."""
    from nnbuild import wcet
    from nnbuild.numerics import graph_bitexact, graph_plan
    rng = np.random.default_rng(8)
    model = Model("far8", (256,), [Dense("wide", (rng.standard_normal((256, 280)) * 0.1).astype(np.float32),
                                         np.zeros(280, np.float32), "relu"),
                                   Dense("out", (rng.standard_normal((280, 4)) * 0.1).astype(np.float32), None,
                                         "linear")])
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, shape=shape, precision="q8",
                                                input_range=(-1.0, 1.0))
    code = (tmp_path / "gen" / "far8.c").read_text()
    assert "NN_DOT8(acc" not in code and ("NN_DOT8F(acc" in code) == (shape == "v2")
    x = probe_inputs(model.input_size)[[0, 1, 60, 64]]
    y, cycles = simavr.run_cases(elf, x, model.output_size, entry_symbol="far8_infer", mcu=board["mcu"],
                                 freq=board["clock_hz"], harness=harness)
    emulated = (fixed.run(quantize.quantize(model, "q8", (-1, 1)), x) if shape == "mlp" else
                graph_bitexact.run_graph(graph_plan.quantize_graph(model, "q8", (-1, 1)), x))
    assert np.array_equal(y.view(np.uint32), emulated.view(np.uint32))
    facts = json.loads((tmp_path / "gen" / "far8.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, "far8_infer", facts, tmp_path).cycles
    print(f"\nfar8 {shape} q8: WCET bound {bound:,}, simavr worst {int(cycles.max()):,}, "
          f"bound/measured {bound / cycles.max():.4f}")
    assert cycles.max() <= bound
