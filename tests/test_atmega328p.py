"""The ATmega328P board (32 KB flash, 2 KB SRAM, no ELPM) and the weights storage it needs,
`avr-progmem-near`: weights in flash (PROGMEM), read with LPM through 16-bit pointers.

Quick: the board file and the storage are known; the near C puts every weight array in
.progmem.data (not .data: avr-gcc copies plain const data to SRAM) and reads it with LPM only;
the near-flash placement check covers the arrays; the fixed-point C on the MCU equals the bit-exact
model. e2e: scons builds of the xor example (q16 and float32) pass their gates with a WCET bound
at least the measured cycles, and a model too big for 32 KB fails the memory gate in one line.
"""

import json
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO, copy_project, needs_avr, scons
from nnbuild import boards, codegen, pipeline
from nnbuild.checks import memory
from nnbuild.compilers import gcc
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference
from nnbuild.ir.graph import Conv2D, Dense, Flatten, Model, Pool2D
from nnbuild.numerics import bitexact
from nnbuild.numerics import plan as quantize
from nnbuild.runners import CHECK_MAIN, check_main_defines, simavr

NEAR = "avr-progmem-near"
XOR = REPO / "firmware_examples/xor/xor.h5"
SIPS22_GAME = (REPO.parent / "shared/data/tpg/sips22/cleaned/out_best_cleaned.fishing_derby.9.t48.dot")


def test_board_is_shipped_valid_and_listed(run_cli):
    board = boards.load_board("atmega328p")
    assert (board["mcu"], board["clock_hz"], board["flash_bytes"], board["ram_bytes"]) == \
        ("atmega328p", 16_000_000, 32_768, 2_048)
    assert board["weights_storage"] == NEAR and board["double_bits"] == 32
    assert "-mmcu=atmega328p" in board["cflags"] and "-mmcu=atmega328p" in board["ldflags"]
    assert (board["simulator"], board["wcet_tool"], board["stack_tool"]) == ("simavr", "builtin-avr", "builtin-avr")
    assert board["timing_model"] == "avre-16bit-pc"
    schema = json.loads((REPO / "nnbuild/board.schema.json").read_text())
    assert NEAR in schema["properties"]["weights_storage"]["enum"] and NEAR in codegen.STORAGES
    result = run_cli("boards")
    assert result.returncode == 0, result.stderr
    listing = result.stdout
    assert re.search(r"^atmega328p +atmega328p +16 MHz +32 KB +2 KB +simavr +builtin-avr", listing, re.M), listing


def test_float64_is_refused_with_near_storage(tmp_path):
    model = tiny_mlp()
    with pytest.raises(NNBuildError, match="64-bit double"):
        codegen.generate(model, tmp_path, precision="float64", storage=NEAR)


def tiny_mlp(name="mix"):
    rng = np.random.default_rng(3)
    w = lambda *s: (rng.normal(size=s) * 0.5).astype(np.float32)  # noqa: E731
    return Model(name, (4,), [Dense("d_tanh", w(4, 6), w(6), "tanh"), Dense("d_sig", w(6, 5), w(5), "sigmoid"),
                              Dense("d_soft", w(5, 3), w(3), "softmax")], source_files=(f"{name}.h5",))


def tiny_cnn():
    rng = np.random.default_rng(4)
    w = lambda *s: (rng.normal(size=s) * 0.3).astype(np.float32)  # noqa: E731
    layers = [Conv2D("conv", w(3, 3, 1, 3), w(3), activation="relu"), Pool2D("pool", "max", (2, 2), (2, 2)),
              Flatten("flat"), Dense("dense", w(48, 3), w(3), "softmax")]
    return Model("tcnn", (10, 10, 1), layers, source_files=("tcnn.h5",))


def weights_of(out, name):
    """Names of the arrays the weights header declares for this target: a TPG's composition tables
    are hosts-only (`#if DBL_MANT_DIG > 24`), never compiled where double is binary32, as on AVR."""
    header = re.sub(r"^#if DBL_MANT_DIG > 24 /\* compositions: hosts only.*?^#endif\n", "",
                    (out / f"{name}_weights.h").read_text(), flags=re.M | re.S)
    return sorted(re.findall(r"^extern const \w+ (\w+)\[", header, re.M))


@needs_avr
@pytest.mark.parametrize("which, shape, precision", [
    ("mlp", "mlp", "float32"), ("mlp", "mlp", "q16"), ("mlp", "mlp", "q16-acc32"), ("mlp", "mlp", "fix16"),
    ("mlp", "mlp", "fixed8.24"), ("cnn", "v1", "float32"), ("cnn", "v2", "float32"), ("tpg", "switch", "float32")])
@pytest.mark.e2e  # avr-gcc
def test_near_weights_are_in_flash_read_with_lpm_and_traced(tmp_path, which, shape, precision):
    board = boards.load_board("atmega328p")
    if which == "tpg":
        if not SIPS22_GAME.exists():
            pytest.skip(f"{SIPS22_GAME} not present")
        model, log = pipeline.load_model(str(SIPS22_GAME), environment="sips22-atari")
    else:
        model, log = (tiny_mlp() if which == "mlp" else tiny_cnn()), []
    fixed = precision not in ("float32", "float64")
    codegen.generate(model, tmp_path, shape=shape, precision=precision, storage=NEAR, passes_log=log,
                     input_range=(-1, 1) if fixed else None)
    name = model.name
    trace = json.loads((tmp_path / f"{name}.trace.json").read_text())
    declared = weights_of(tmp_path, name)
    near = trace["near_flash_symbols"]
    # the weight arrays, plus the fixed-point activation tables defined in the code file
    assert declared and set(declared) <= set(near)
    assert all(re.fullmatch(r"nn_(tanh_table_q\d+|exp_table)", s) for s in set(near) - set(declared)), near
    objects = []
    for src in (f"{name}.c", f"{name}_weights.c"):
        obj = tmp_path / src.replace(".c", ".o")
        subprocess.run([board["cc"], *gcc.compile_flags(board), "-Os", f"-I{tmp_path}", "-c", str(tmp_path / src),
                        "-o", str(obj)], check=True, capture_output=True, text=True)
        objects.append(obj)
    table = subprocess.run(["avr-objdump", "-t", *map(str, objects)], capture_output=True, text=True,
                           check=True).stdout
    sections = {parts[-1]: parts[3] for parts in map(str.split, table.splitlines()) if len(parts) >= 6}
    assert {sections.get(s) for s in near} == {".progmem.data"}, table
    for obj in objects:   # nothing copied to SRAM
        headers = subprocess.run(["avr-size", "-A", str(obj)], capture_output=True, text=True, check=True).stdout
        assert not re.search(r"^\.data\s+[1-9]", headers, re.M), headers
    code = subprocess.run(["avr-objdump", "-d", str(objects[0])], capture_output=True, text=True, check=True).stdout
    assert re.search(r"\slpm\s", code) and not re.search(r"\selpm\s", code)


def far_placed_elf(tmp_path, board):
    """An ATmega ELF with 90 KB of other flash data before the array `late` (linked with the board's
    widened regions): `late` ends beyond 64 KB."""
    head = "#include <avr/pgmspace.h>\n#include <stdint.h>\n"
    pads, late = tmp_path / "pads.c", tmp_path / "late.c"   # linked in this order: pads first
    pads.write_text(head + "".join(f"const uint8_t pad{i}[30000] PROGMEM = {{1}};\n" for i in range(3)))
    late.write_text(head + "extern const uint8_t pad0[], pad1[], pad2[];\n"
                    "const uint8_t late[16] PROGMEM = {2};\nvolatile uint8_t sink;\n"
                    "int main(void) { sink = (uint8_t)(pgm_read_byte(&pad0[1]) + pgm_read_byte(&pad1[1]) + "
                    "pgm_read_byte(&pad2[1]) + pgm_read_byte(&late[1])); return 0; }\n")
    elf = tmp_path / f"late-{board['name']}.elf"
    subprocess.run([board["cc"], *gcc.compile_flags(board), "-Os", str(pads), str(late), *board["ldflags"],
                    "-o", str(elf)], check=True, capture_output=True, text=True)
    nm = subprocess.run(["avr-nm", "-S", str(elf)], capture_output=True, text=True, check=True).stdout
    late = next(l.split() for l in nm.splitlines() if l.endswith(" late"))
    assert int(late[0], 16) + int(late[1], 16) > memory.NEAR_FLASH_END
    return elf


@pytest.mark.e2e  # avr-gcc
@needs_avr
def test_near_flash_check_covers_the_arrays(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"near_flash_symbols": ["late"]}))
    big = boards.load_board("avr")
    with pytest.raises(NNBuildError, match="'late' ends beyond 64 KB"):
        memory.check_near_flash(big, far_placed_elf(tmp_path, big), trace)
    # on the 32 KB chip the image does not fit at all: the memory gate says so, with the bytes
    small = boards.load_board("atmega328p")
    elf = far_placed_elf(tmp_path, small)
    assert memory.check_near_flash(small, elf, trace) is None
    use = memory.usage(small, small.compiler.section_sizes(small, elf))
    with pytest.raises(NNBuildError, match=r"^flash \d{2},\d{3} bytes needed > 32,768 bytes on atmega328p$"):
        memory.gate_memory(small, use)


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
@pytest.mark.parametrize("precision", ["q16", "q16-acc32", "q8", "fix16", "fixed8.24", "float32"])
def test_simavr_results_equal_the_bit_exact_model_or_reference(tmp_path, precision):
    board = boards.load_board("atmega328p")
    model = tiny_mlp()
    fixed = precision != "float32"
    out = tmp_path / "gen"
    codegen.generate(model, out, precision=precision, storage=board["weights_storage"],
                     input_range=(-1, 1) if fixed else None)
    defines = [d[2:] for d in check_main_defines("mix.h", "mix_infer", model.input_size, model.output_size)]
    elf = gcc.build_executable(board, [out / "mix.c", out / "mix_weights.c", CHECK_MAIN], tmp_path / "mix.elf",
                               include_dirs=[out], defines=defines)
    x = np.random.default_rng(9).uniform(-1, 1, (12, model.input_size)).astype(np.float32)
    y, cycles = simavr.run_cases(elf, x, model.output_size, entry_symbol="mix_infer", mcu=board["mcu"],
                                 freq=board["clock_hz"], harness=simavr.build_harness(tmp_path / "simavr_run"))
    if fixed:
        want = bitexact.run(quantize.quantize(model, precision, (-1, 1)), x)
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    else:
        assert np.max(np.abs(y - reference.run(model, x))) <= 1e-5
    assert cycles.min() > 0


def built_report(project, *args):
    result = scons(project, *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((project / "build/atmega328p/xor/report.json").read_text())


@pytest.mark.e2e
@needs_avr
def test_xor_q16_and_float32_pass_their_gates_with_a_sound_wcet(tmp_path):
    project = copy_project(tmp_path)
    # the example's tolerance (1e-5) is a float32 one: q16 takes nnbuild check's documented 1e-3
    q16 = built_report(project, "target=atmega328p", "model=xor", "precision=q16", "tolerance=1e-3")
    f32 = built_report(project, "target=atmega328p", "model=xor")
    for report, error in ((q16, 1e-3), (f32, 1e-5)):
        assert report["target"] == "atmega328p" and report["deadline_ms"] == 5.0
        assert report["wcet_cycles"] >= report["measured_cycles"] > 0
        assert report["wcet_ms"] < 5.0 and report["max_abs_error"] <= error
        assert report["flash_bytes"] <= 32_768 and report["ram_bytes"] <= 2_048 and report["data_bytes"] < 64
    assert q16["precision"] == "q16" and f32["precision"] == "float32"


@pytest.mark.e2e
@needs_avr
def test_a_model_too_big_for_32_kb_fails_the_memory_gate_in_one_line(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=atmega328p", "model=f1tenth", "precision=float32")
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.startswith("nnbuild: error:")]
    assert len(errors) == 1, result.stderr
    assert re.search(r"flash \d{3},\d{3} bytes needed > 32,768 bytes on atmega328p$", errors[0]), errors[0]
    assert not (project / "build/atmega328p/f1tenth/run_simavr.npz").exists()
