"""Static stack bound of the Cortex-M boards (nnbuild.wcet.thumb2_stack, "builtin-thumb2").

Small functions compiled with each board's flags (stm32f407: Cortex-M4F, Thumb-2 with the FPU;
rp2040: Cortex-M0+, ARMv6-M) and linked without a C library: frames from push/vpush/sub sp, frames
beyond an immediate, the call graph and its deepest path, flow-fact targets of calls through a
pointer, switch tables; and the one-line refusals (a variable-size frame, recursion, a call
through a pointer without a fact). The e2e tests hold the bound to the stack the check program
measures under qemu-system-arm (painted before each inference, high-water mark after it): equal
where the deepest path always runs and writes its whole frame, never below."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import have
from nnbuild import boards
from nnbuild.errors import NNBuildError
from nnbuild.wcet import stack_analyzer_for
from nnbuild.wcet.thumb2_stack import stack_bound

ROOT = Path(__file__).resolve().parents[1]
BOARDS = ("stm32f407", "rp2040")
pytestmark = pytest.mark.skipif(not have("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc not installed")


def board_flags(name):
    data = json.loads((ROOT / "toolchains" / f"{name}.json").read_text())
    return [f for f in data["cflags"] if f.startswith(("-mcpu", "-mthumb", "-mfloat", "-mfpu"))]


def link(tmp_path, board, source, entry, opt="-O2"):
    """`source` compiled and linked alone (no C library, `entry` as the ELF entry) for `board`."""
    c = tmp_path / f"{entry}_{board}.c"
    c.write_text(source)
    elf = tmp_path / f"{entry}_{board}.elf"
    subprocess.run(["arm-none-eabi-gcc", *board_flags(board), opt, "-g", "-std=c99", "-ffreestanding", "-nostdlib",
                    "-Wl,-e," + entry, "-Wl,--gc-sections", "-o", str(elf), str(c), "-lgcc"], check=True,
                   capture_output=True)
    return elf


NESTED = """\
static volatile unsigned char sink;
__attribute__((noinline)) static void leaf(unsigned char v)
{
    volatile unsigned char buf[20];
    buf[0] = v; buf[19] = v;
    sink = buf[0] ^ buf[19];
}
__attribute__((noinline)) static void mid(unsigned char v)
{
    volatile unsigned char buf[100];
    buf[0] = v; buf[99] = v;
    leaf(buf[0]);
    sink = buf[99];
}
__attribute__((noinline)) static void top(unsigned char v)
{
    volatile unsigned char buf[%SIZE%];
    buf[0] = v; buf[%SIZE% - 1] = v;
    mid(buf[%SIZE% - 1]);
    sink = buf[0];
}
void nested_infer(const float in[4], float out[2])
{
    top((unsigned char)in[0]);
    out[0] = in[1];
    out[1] = (float)sink;
}
"""


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("size", [300, 5000])
def test_nested_frames_add_up_along_the_deepest_path(tmp_path, board, size):
    """Each function's frame holds at least its array; the path runs entry -> top -> mid -> leaf;
    5000 bytes is beyond every sub-sp immediate of ARMv6-M (508) and of a Thumb-2 modified constant."""
    elf = link(tmp_path, board, NESTED.replace("%SIZE%", str(size)), "nested_infer")
    result = stack_bound(elf, "nested_infer")
    assert result["path"] == ["nested_infer", "top", "mid", "leaf"]
    own = result["per_function"]
    assert own["top"] >= size and own["mid"] >= 100 and own["leaf"] >= 20
    assert result["bytes"] == sum(own[f] for f in result["path"])
    assert result["bytes"] < size + 100 + 20 + 4 * 64   # no more than a few saved registers each


def test_vpush_counts_the_saved_fpu_registers(tmp_path):
    """Callee-saved s16/s17 clobbered: the Cortex-M4F prologue saves them with vpush (8 bytes)."""
    source = """\
void vp(float *x)
{
    __asm__ volatile("vmov.f32 s16, #1.0\\n\\tvmov.f32 s17, #1.0" ::: "s16", "s17");
    x[0] = 1.0f;
}
"""
    elf = link(tmp_path, "stm32f407", source, "vp")
    assert stack_bound(elf, "vp")["bytes"] == 8


def test_a_variable_length_array_is_refused_in_one_line(tmp_path):
    source = """\
int vla(int n)
{
    volatile char buf[n];
    buf[0] = 1;
    return buf[0];
}
"""
    elf = link(tmp_path, "stm32f407", source, "vla")
    with pytest.raises(NNBuildError) as error:
        stack_bound(elf, "vla")
    text = str(error.value)
    assert "\n" not in text
    assert re.search(r"stack: SP changed by '.*', which the analysis cannot bound .* in vla\+0x[0-9a-f]+ at 0x[0-9a-f]+$",
                     text), text


@pytest.mark.parametrize("board", BOARDS)
def test_recursion_is_refused(tmp_path, board):
    source = """\
__attribute__((noinline)) int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1) + 1; }
int rec(int n) { return fact(n); }
"""
    elf = link(tmp_path, board, source, "rec", opt="-O1")
    with pytest.raises(NNBuildError, match=r"recursion \(rec -> fact -> fact\): no static stack bound in fact at 0x"):
        stack_bound(elf, "rec")


POINTER = """\
typedef void (*op)(volatile char *);
__attribute__((noinline)) void small(volatile char *p) { volatile char b[16]; b[0] = *p; *p = b[0]; }
__attribute__((noinline)) void big(volatile char *p) { volatile char b[400]; b[0] = *p; b[399] = *p; *p = b[399]; }
op table[2] = {small, big};
void ptr(int i, volatile char *p)
{
    table[i & 1](p);
}
"""


@pytest.mark.parametrize("board", BOARDS)
def test_calls_through_a_pointer_need_their_flow_fact(tmp_path, board):
    """A call through a pointer (BLX rN, or BX rN as a tail call) has the targets its source line's
    'indirect' fact names, as on AVR; without one it is refused."""
    elf = link(tmp_path, board, POINTER, "ptr")
    with pytest.raises(NNBuildError, match=r"indirect (call 'blx|jump 'bx) r\d': (callee|target) unknown .* in ptr\+0x[0-9a-f]+ at 0x"):
        stack_bound(elf, "ptr")
    line = next(i for i, text in enumerate(POINTER.splitlines(), 1) if "table[i & 1](p)" in text)
    facts = {"indirect": [{"file": f"ptr_{board}.c", "line": line, "targets": ["small", "big"]}]}
    result = stack_bound(elf, "ptr", None, facts)
    assert result["path"] == ["ptr", "big"] and result["per_function"]["big"] >= 400


SWITCH = """\
volatile int sink;
__attribute__((noinline)) void deep(void) { volatile char b[200]; b[0] = 1; b[199] = 2; sink = b[0] + b[199]; }
int sw(int k)
{
    switch (k) {
    case 0: sink = 3; break;
    case 1: sink = 5; break;
    case 2: deep(); break;
    case 3: sink = 9; break;
    case 4: sink = 11; break;
    case 5: sink = 13; break;
    case 6: sink = 17; break;
    default: return 0;
    }
    return sink;
}
"""


@pytest.mark.parametrize("board, opt", [("stm32f407", "-O2"), ("rp2040", "-O2"), ("rp2040", "-Os")])
def test_switch_tables_are_followed(tmp_path, board, opt):
    """A dense switch compiles to a jump table (TBB on Thumb-2, a table of addresses on ARMv6-M, and
    `bl __gnu_thumb1_case_uqi` with the table after the call at -Os); a call behind one case counts."""
    elf = link(tmp_path, board, SWITCH, "sw", opt=opt)
    result = stack_bound(elf, "sw")
    assert result["path"][-1] == "deep" and result["per_function"]["deep"] >= 200


@pytest.mark.parametrize("board", BOARDS)
def test_libgcc_double_routines_are_followed(tmp_path, board):
    """Soft double on both cores: libgcc's __aeabi_f2d jumps into __adddf3's tail with its registers
    pushed, and __aeabi_dmul's `bleq label` enters code that returns to it with `bx lr` or pops the
    whole frame; both are walked as the function's own code."""
    source = "double fd(float x, double y, double z) { return (x + y) * z; }\n"
    elf = link(tmp_path, board, source, "fd")
    result = stack_bound(elf, "fd")
    assert result["path"][0] == "fd" and result["bytes"] >= 8
    assert any(name in result["per_function"] for name in ("__aeabi_dmul", "__muldf3"))


def test_the_cortex_m_boards_name_the_thumb2_analyzer():
    for name in BOARDS:
        board = boards.load_board(name)
        assert board["stack_tool"] == "builtin-thumb2"
        assert stack_analyzer_for(board).__name__ == "nnbuild.wcet.thumb2_stack"


# ------------------------------------------------------------------------------ under qemu-system-arm

HEADER = "void {name}_infer(const float in[4], float out[2]);\n"


def check_program(tmp_path, board_name, name, source):
    """check_main.c around `source`'s {name}_infer, linked with the board runner's reset code."""
    from nnbuild.runners import check_main_defines, check_program_parts, CHECK_MAIN
    board = boards.load_board(board_name)
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    (tmp_path / f"{name}.h").write_text(HEADER.format(name=name))
    parts = check_program_parts(board)
    elf = tmp_path / f"{name}_{board_name}_check.elf"
    defines = [d[2:] for d in check_main_defines(f"{name}.h", f"{name}_infer", 4, 2)]
    board.compiler.build_executable(board, [src, CHECK_MAIN, *parts["sources"]], elf, include_dirs=[str(tmp_path)],
                                    defines=defines, ldscript=parts["ldscript"])
    return board, elf


@pytest.mark.e2e
@pytest.mark.skipif(not have("qemu-system-arm"), reason="qemu-system-arm not installed")
@pytest.mark.parametrize("board_name", BOARDS)
def test_measured_stack_equals_the_bound_when_the_deepest_path_always_runs(tmp_path, board_name):
    from nnbuild.runners import CheckIO, qemu_system
    source = '#include "nested.h"\n' + NESTED.replace("%SIZE%", "300")
    board, elf = check_program(tmp_path, board_name, "nested", source)
    x = np.random.default_rng(1).uniform(0, 50, size=(5, 4)).astype(np.float32)
    _outputs, _cycles, stack = qemu_system.run_with_stack(board, elf, x, 2, io=CheckIO())
    bound = stack_bound(elf, "nested_infer")["bytes"]
    assert stack is not None and len(stack) == len(x)
    # volatile arrays written at both ends, every pushed register stored: the probe sees the whole bound
    # but the alignment padding a frame may leave unwritten below its last array element
    assert (stack <= bound).all() and (stack >= bound - 8).all(), (stack, bound)


def test_a_measured_stack_above_the_bound_fails_the_report_in_one_line():
    """The gate compares the run's high-water mark with the bound in size.json: more than the bound
    breaks the build (the analysis missed something) in one clause, naming both figures."""
    from nnbuild.checks import gates, memory
    record = {"measured_stack_bytes": 700, "stack_bytes": 688, "stack": {"entry": "f1tenth_infer"}}
    clause = memory.stack_violation(record)
    assert clause == ("measured stack 700 bytes > static stack bound 688 bytes of f1tenth_infer: the bound is "
                      "unsound for this program")
    assert memory.stack_violation(dict(record, measured_stack_bytes=688)) is None
    report = {"tolerance": 1e-3, "max_abs_error_by_run": {"host": 0.0}, "check_inputs": 1, **record}
    assert gates.violations(report) == [clause]
    # with a firmware, RAM counts main's bound; the inference's run is held to the inference's own
    firmware = {"measured_stack_bytes": 690, "measured_stack_entry": "f1tenth_infer", "stack_bytes": 944,
                "stack": {"entry": "main", "entries": {"main": 944, "f1tenth_infer": 688}}}
    assert memory.stack_violation(firmware) == ("measured stack 690 bytes > static stack bound 688 bytes of "
                                                "f1tenth_infer: the bound is unsound for this program")
    assert memory.stack_gate_detail(dict(firmware, measured_stack_bytes=684)) == (
        "pass", "measured 684 bytes <= static bound 688 bytes of f1tenth_infer")


def test_an_image_that_does_not_fit_stops_the_build_but_is_a_row_for_precision_auto(tmp_path):
    """RAM = data + bss + the stack bound against ram_bytes: too much fails the memory step in one
    line; a precision=auto candidate (record_errors) writes its figures and its gates refuse it."""
    from nnbuild import steps
    from nnbuild.checks import gates
    elf = link(tmp_path, "stm32f407", NESTED.replace("%SIZE%", "300"), "nested_infer")
    data = json.loads((ROOT / "toolchains" / "stm32f407.json").read_text())
    board = tmp_path / "tiny.json"
    board.write_text(json.dumps({**data, "name": "tiny", "ram_bytes": 256}))
    out = tmp_path / "size.json"
    with pytest.raises(NNBuildError) as error:
        steps.size(str(elf), str(out), board=str(board), entry=["nested_infer"])
    assert not out.exists()
    steps.size(str(elf), str(out), board=str(board), entry=["nested_infer"], record_errors=True)
    use = json.loads(out.read_text())
    bound = stack_bound(elf, "nested_infer")["bytes"]
    assert use["ram_bytes"] == use["data_bytes"] + use["bss_bytes"] + bound > 256
    assert use["stack"]["entries"] == {"nested_infer": bound}
    line = f"ram {use['ram_bytes']:,} bytes needed > 256 bytes on tiny"
    assert str(error.value) == line
    report = {"tolerance": 1e-3, "max_abs_error_by_run": {"host": 0.0}, "check_inputs": 1, "target": "tiny", **use}
    assert gates.violations(report) == [line]
