"""The board capability "dsp": "armv7e-m": the mlp shape's q16-acc32 and q8 layers run on SMLAD (and
SXTB16 for int8 weights) with their weights packed into words at generation; the packing reads back to
the kernel, the C (ACLE on the target, its C99 equivalent elsewhere) equals the bit-exact model, and a
board naming a capability nnbuild has no kernels for is refused in one line."""

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, copy_project, have, scons, slow
from nnbuild import boards, codegen, pipeline
from nnbuild.codegen import mlp_fixed
from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import Dense, Model
from nnbuild.numerics import bitexact
from nnbuild.numerics import plan as quantize
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

F1TENTH = REPO / "firmware_examples/f1tenth/architecture.json"
ARM = ["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-std=c99",
       "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off", "-O2"]


def ragged_model():
    """Every group remainder (units % 4 = 1..3) and input tail (inputs % 4 = 1..3), every activation."""
    rng = np.random.default_rng(26)
    mk = lambda i, o, s: (rng.standard_normal((i, o)) * s).astype(np.float32)  # noqa: E731
    return Model("ragged", (7,), [Dense("d1", mk(7, 9, 0.8), mk(1, 9, 0.1)[0], "tanh"),
                                  Dense("d2", mk(9, 6, 0.5), mk(1, 6, 0.1)[0], "relu"),
                                  Dense("d3", mk(6, 11, 0.9), None, "sigmoid"),
                                  Dense("d4", mk(11, 8, 0.7), mk(1, 8, 0.1)[0], "linear"),
                                  Dense("d5", mk(8, 3, 1.0), None, "softmax")])


def unpack(words, units, inputs, bits):
    """The [neuron][input] kernel back from a DSP layer's word stream, read as the kernels read it."""
    def halves(w):
        lo, hi = w & 0xFFFF, w >> 16
        return [v - (1 << 16) if v & 0x8000 else v for v in (lo, hi)]

    def sxtb16(w):
        return [v - 256 if v & 0x80 else v for v in (w & 0xFF, (w >> 16) & 0xFF)]

    kernel = np.zeros((units, inputs), dtype=np.int64)
    words = [int(w) for w in words]
    at = 0
    for start, rows in mlp_fixed.dsp_groups(units):
        for turn in range(inputs // 4):
            for r in range(rows):
                if bits == 16:
                    kernel[start + r, 4 * turn:4 * turn + 4] = halves(words[at]) + halves(words[at + 1])
                    at += 2
                else:
                    kernel[start + r, 4 * turn:4 * turn + 4] = sxtb16(words[at]) + sxtb16(words[at] >> 8)
                    at += 1
        tail, base = inputs % 4, inputs - inputs % 4
        if tail and bits == 16:
            for k in range((tail + 1) // 2):
                for r in range(rows):
                    lo, hi = halves(words[at])
                    kernel[start + r, base + 2 * k] = lo
                    if base + 2 * k + 1 < inputs:
                        kernel[start + r, base + 2 * k + 1] = hi
                    else:
                        assert hi == 0
                    at += 1
        elif tail:
            for r in range(rows):
                got = sxtb16(words[at]) + sxtb16(words[at] >> 8)
                kernel[start + r, base:] = got[:tail]
                assert not any(got[tail:])
                at += 1
    assert at == len(words)
    return kernel


@pytest.mark.parametrize("bits", [16, 8])
@pytest.mark.parametrize("units, inputs", [(1, 1), (3, 2), (4, 4), (5, 7), (6, 9), (128, 61), (9, 3)])
def test_the_word_stream_reads_back_to_the_kernel(bits, units, inputs):
    rng = np.random.default_rng(units * 100 + inputs)
    top = 1 << (bits - 1)
    kernel = rng.integers(-top, top, size=(units, inputs))
    kernel[0, 0] = -top   # the extremes pack too
    kernel[-1, -1] = top - 1
    words = np.concatenate([mlp_fixed.dsp_group_words(kernel[s:s + r], bits) for s, r in mlp_fixed.dsp_groups(units)])
    assert words.max(initial=0) < 2 ** 32
    assert np.array_equal(unpack(words, units, inputs, bits), kernel)


def test_groups_cover_every_neuron_once():
    for units in range(1, 14):
        groups = mlp_fixed.dsp_groups(units)
        assert [n for s, r in groups for n in range(s, s + r)] == list(range(units))
        loops = mlp_fixed.dsp_group_loops(units)
        assert sum(rows * count for _, rows, count in loops) == units


def generate(tmp_path, model, precision, dsp):
    out = tmp_path / f"{precision}-{dsp}"
    codegen.generate(model, out, precision=precision, storage="const", input_range=(-1, 1), dsp=dsp)
    return out


@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
def test_the_capability_selects_the_dsp_kernels(tmp_path, precision):
    model = ragged_model()
    plain = (generate(tmp_path, model, precision, None) / "ragged.c").read_text()
    out = generate(tmp_path, model, precision, "armv7e-m")
    dsp = (out / "ragged.c").read_text()
    assert "NN_SMLAD" not in plain and "arm_acle.h" not in plain
    assert dsp.count("NN_SMLAD(") > 10 and "#if defined(__ARM_FEATURE_DSP) && defined(__GNUC__)" in dsp
    assert ("NN_SXTB16(" in dsp) == (precision == "q8")
    # the loops stay C loops with their flow facts: every `for` line has its bound
    facts = json.loads((out / "ragged.flowfacts.json").read_text())
    fors = {n for n, line in enumerate(dsp.splitlines(), 1) if line.lstrip().startswith("for (")}
    assert fors and fors == {loop["line"] for loop in facts["loops"]}


def test_precisions_without_dsp_kernels_keep_the_plain_code(tmp_path):
    """float32 and fix16 (64-bit accumulators) are not the kernels' arithmetic: the capability changes nothing."""
    model = ragged_model()
    for precision in ("float32", "fix16"):
        plain = (generate(tmp_path, model, precision, None) / "ragged.c").read_text()
        assert (generate(tmp_path, model, precision, "armv7e-m") / "ragged.c").read_text() == plain


@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
@pytest.mark.parametrize("which", [pytest.param("f1tenth", marks=pytest.mark.e2e), "ragged"])
def test_the_portable_dsp_c_equals_the_bit_exact_model(tmp_path, precision, which):
    """On the host the kernels' C99 equivalent runs: the same integers as nnbuild.numerics.bitexact."""
    model = pipeline.load_model(F1TENTH, "f1tenth")[0] if which == "f1tenth" else ragged_model()
    out = generate(tmp_path, model, precision, "armv7e-m")
    exe = out / "check"
    cmd = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-ffp-contract=off", f"-I{out}",
           *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size),
           str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rng = np.random.default_rng(3)
    x = np.vstack([rng.uniform(-1, 1, (40, model.input_size)), np.ones((1, model.input_size)),
                   -np.ones((1, model.input_size))]).astype(np.float32)
    c = native.run_cases(exe, x, model.output_size)
    emulated = bitexact.run(quantize.quantize(model, precision, (-1, 1)), x)
    assert np.array_equal(c.view(np.uint32), emulated.view(np.uint32))


@pytest.mark.e2e
@pytest.mark.skipif(not have("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc not installed")
@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
def test_the_target_code_uses_smlad_and_compiles_clean(tmp_path, precision):
    out = generate(tmp_path, ragged_model(), precision, "armv7e-m")
    obj = tmp_path / "ragged.o"
    subprocess.run([*ARM, f"-I{out}", "-c", str(out / "ragged.c"), "-o", str(obj)], check=True,
                   capture_output=True, text=True)
    text = subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)], check=True, capture_output=True,
                          text=True).stdout
    assert "smlad" in text
    assert ("sxtb16" in text) == (precision == "q8")


def test_a_dsp_capability_nnbuild_has_no_kernels_for_is_refused(tmp_path):
    data = json.loads((REPO / "toolchains/stm32f407.json").read_text())
    path = tmp_path / "m4odd.json"
    path.write_text(json.dumps({**data, "name": "m4odd", "dsp": "armv7e"}))
    with pytest.raises(NNBuildError) as caught:
        boards.load_board(str(path))
    message = str(caught.value)
    assert "dsp" in message and "armv7e-m" in message and "\n" not in message


def test_the_stm32f407_board_has_the_capability_the_schema_and_the_generator_know():
    assert boards.load_board("stm32f407").get("dsp") == "armv7e-m"
    assert tuple(boards.schema()["properties"]["dsp"]["enum"]) == codegen.DSP_CAPABILITIES


def test_generate_refuses_an_unknown_capability(tmp_path):
    with pytest.raises(NNBuildError, match="DSP capability 'armv8' is unknown \\(known: armv7e-m\\)"):
        codegen.generate(ragged_model(), tmp_path, precision="q8", input_range=(-1, 1), dsp="armv8")


@pytest.mark.e2e   # LeNet-5's weights take seconds to compile
@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
def test_the_v2_kernels_equal_the_bit_exact_model(tmp_path, precision):
    """LeNet-5 in shape v2: a single-channel convolution through the aligned window copy, an
    even-channel one read in place a kernel row at a time, Dense layers, the softmax's division."""
    from nnbuild.numerics import graph_bitexact, graph_plan
    model = pipeline.load_model(REPO / "firmware_examples/lenet5/lenet5.h5", "lenet5")[0]
    out = tmp_path / precision
    codegen.generate(model, out, precision=precision, storage="const", input_range=(0, 1), dsp="armv7e-m")
    code = (out / "lenet5.c").read_text()
    assert "the window copied into an aligned buffer first" in code and "read in place, a kernel row at a time" in code
    exe = out / "check"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-ffp-contract=off", f"-I{out}",
                    *check_main_defines("lenet5.h", "lenet5_infer", model.input_size, model.output_size),
                    str(out / "lenet5.c"), str(out / "lenet5_weights.c"), str(CHECK_MAIN), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    x = np.random.default_rng(9).uniform(0, 1, (4, model.input_size)).astype(np.float32)
    c = native.run_cases(exe, x, model.output_size)
    emulated = graph_bitexact.run_graph(graph_plan.quantize_graph(model, precision, (0, 1)), x)
    assert np.array_equal(c.view(np.uint32), emulated.astype("<f4").reshape(len(x), -1).view(np.uint32))


needs_arm = pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                               reason="arm-none-eabi-gcc or qemu-system-arm not installed")


@pytest.mark.e2e
@needs_arm
@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
def test_the_kernels_on_the_cortex_m4_equal_the_bit_exact_model(tmp_path, precision):
    model = ragged_model()
    program, _ = pipeline.build_check_program(model, "stm32f407", tmp_path, precision=precision,
                                              input_range=(-1, 1))
    assert "smlad" in subprocess.run(["arm-none-eabi-objdump", "-d", str(program)], capture_output=True,
                                     text=True, check=True).stdout
    rng = np.random.default_rng(5)
    x = np.vstack([rng.uniform(-1, 1, (12, model.input_size)), np.ones((1, model.input_size)),
                   -np.ones((1, model.input_size))]).astype(np.float32)
    outputs, cycles = pipeline.run_cases("stm32f407", program, x, model.output_size, entry="ragged_infer")
    emulated = bitexact.run(quantize.quantize(model, precision, (-1, 1)), x)
    assert np.array_equal(np.asarray(outputs, dtype=np.float32).view(np.uint32), emulated.view(np.uint32))
    assert cycles is not None and (cycles > 0).all()


@pytest.mark.e2e
@needs_arm
# q16-acc32 (the example's own precision) is tests/test_cortexm.py's stm32f407 f1tenth build
@pytest.mark.parametrize("precision, tolerance", [pytest.param("q8", "tolerance=0.02", marks=slow(
    "test_the_kernels_on_the_cortex_m4_equal_the_bit_exact_model[q8] (the q8 kernels through ACLE on the M4 under "
    "qemu-system-arm equal the bit-exact model, every group remainder and input tail); "
    "test_the_portable_dsp_c_equals_the_bit_exact_model[f1tenth-q8] (F1/10's q8 DSP C); "
    "test_the_target_code_uses_smlad_and_compiles_clean[q8] (smlad and sxtb16 in the code); "
    "tests/test_cortexm.py[stm32f407-f1tenth-None] (the SCons chain and gates with the DSP kernels on the M4)"))])
def test_f1tenth_builds_with_the_dsp_kernels_and_passes_the_gate(tmp_path, precision, tolerance):
    project = copy_project(tmp_path)
    result = scons(project, "target=stm32f407", "model=f1tenth", f"precision={precision}", "deadline=none",
                   *([tolerance] if tolerance else []))
    assert result.returncode == 0, result.stdout + result.stderr
    build = project / "build/stm32f407/f1tenth"
    assert "NN_SMLAD" in (build / "gen/f1tenth.c").read_text()
    target, host = np.load(build / "run_qemu-system-arm.npz"), np.load(build / "run_host.npz")
    assert np.array_equal(target["outputs"], host["outputs"])   # ACLE on the core = the C99 kernels on the host
    report = json.loads((build / "report.json").read_text())
    assert report["passed"] and (build / "gate.json").exists() and report["measured_cycles"] > 0
    text = subprocess.run(["arm-none-eabi-objdump", "-d", str(build / "check.elf")], capture_output=True, text=True,
                          check=True).stdout
    assert "smlad" in text and ("sxtb16" in text) == (precision == "q8")   # the kernels, not the plain C, ran
