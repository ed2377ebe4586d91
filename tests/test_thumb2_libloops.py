"""The loops of nnbuild/wcet/thumb2_libloops.json driven to their bounds on qemu-system-arm: each
routine is called from a small program built for its board, every executed instruction is traced
(-singlestep), the loop header's executions per call reach the table's bound and never pass it,
and builtin-thumb2's bound of the calling function is >= the cycles the runner charges each call."""

import json
import subprocess

import pytest

from conftest import have
from nnbuild import boards
from nnbuild.runners import cortexm_timing, qemu_system
from nnbuild.runners.qemu_user import call_sites, disassembly
from nnbuild.wcet import thumb2_decode, thumb2_ipet, thumb2_loops

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]
TABLE = {(e["symbol"], e["offset"]): e for e in thumb2_loops.load_table()}

FDIV_C = r"""
volatile float num[] = {NUM};
volatile float den[] = {DEN};
volatile float sink;
__attribute__((noinline)) float divide(float x, float y) { return x / y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof num / sizeof num[0]; ++k)
        sink = divide(num[k], den[k]);
    return 0;
}
"""
#: mantissa(x) < mantissa(y): the 27-pass way in; >=: 26 passes; subnormals, zeros, infinities and
#: NaNs take the other ways of the class dispatch (a jump table the analyzer reads from the image)
FDIV_CASES = [("1.0f", "1.5f"), ("1.5f", "1.0f"), ("1.0f", "1.99999988f"), ("3.0f", "7.0f"), ("1e-40f", "3.0f"),
              ("3.0f", "1e-40f"), ("0.0f", "2.0f"), ("2.0f", "0.0f"), ("1.0f/0.0f", "2.0f"), ("0.0f/0.0f", "1.0f"),
              ("1e38f", "1e-38f"), ("1e-38f", "1e38f")]


def build(tmp_path, board, name, source):
    src, elf = tmp_path / f"{name}.c", tmp_path / f"{name}.elf"
    src.write_text(source)
    parts = qemu_system.check_program(board)
    board.compiler.build_executable(board, [src, *parts["sources"]], elf, ldscript=parts["ldscript"])
    return elf


def traced(board, elf, log, *extra):
    subprocess.run([*qemu_system.command(board, log)[:-1], *extra, "-kernel", str(elf)], stdin=subprocess.DEVNULL,
                   check=True, timeout=300, capture_output=True)
    with open(log, errors="replace") as lines:
        yield from lines


def charged_cycles(board, elf, entry, log):
    """The clocks the qemu-system-arm runner charges each call of `entry` (its own reader)."""
    text = disassembly(board, elf)
    start, returns = call_sites(text, elf, entry)
    table, _ = cortexm_timing.cost_table(text, board["instruction_timing"])
    return qemu_system.cycles_per_call(traced(board, elf, log), start, returns, table)


def header_passes(board, elf, entry, header, log):
    """Executions of `header` during each call of `entry` (every instruction traced)."""
    text = disassembly(board, elf)
    start, _ = call_sites(text, elf, entry)
    counts = []
    for line in traced(board, elf, log, "-singlestep"):
        pc = qemu_system._traced_pc(line) if line.startswith("Trace ") else None
        if pc == start:
            counts.append(0)
        elif pc == header and counts:
            counts[-1] += 1
    return counts


def test_soft_float_division_loop_runs_27_passes_at_most_and_the_bound_holds(tmp_path):
    board = boards.load_board("rp2040")
    source = FDIV_C.replace("NUM", ", ".join(n for n, _ in FDIV_CASES)).replace("DEN", ", ".join(d for _, d in FDIV_CASES))
    elf = build(tmp_path, board, "fdiv", source)
    prog = thumb2_decode.load(str(elf), board)
    fdiv = prog.address_of("__aeabi_fdiv")
    entry = TABLE[("__aeabi_fdiv", 480)]
    assert thumb2_loops.code_hash(prog, fdiv) == entry["sha256"]   # the table's code is this build's
    passes = header_passes(board, elf, "divide", fdiv + entry["offset"], tmp_path / "step.log")
    assert len(passes) == len(FDIV_CASES)
    assert max(passes) == entry["header_max"] and passes[0] == 27 and passes[1] == 26
    measured = charged_cycles(board, elf, "divide", tmp_path / "exec.log")
    bound = thumb2_ipet.analyze(elf, "divide", {"loops": []}, board, tmp_path / "wcet")
    assert len(measured) == len(FDIV_CASES)
    assert bound.cycles >= max(measured), (bound.cycles, measured)
    loops = json.dumps(bound.details["loops"])
    assert "table __aeabi_fdiv+0x1e0 header_max=27" in loops
