"""The `qemu-arm` runner: a cross-built check program run by QEMU's user-mode emulator, with the
host's pipes (newlib + semihosting, see toolchains/arm.json). QEMU counts no cycles; on a board with
`instruction_cycles` (the WCET analyzer's cost per instruction) the run logs QEMU's translated blocks
and their executions, counts each inference's executed instructions (from entering the inference
function to the return to its call site) and reports them times that cost: the measured figure the
soundness gate holds the bound to, with the same cost model as the bound. A board with
`instruction_timing: arm7tdmi` charges each executed instruction its ARM7TDMI TRM clocks instead
(`arm7tdmi_timing`, the table the OTAWA adapter gives owcet)."""

import re
import subprocess
import tempfile
from pathlib import Path

from nnbuild.errors import NNBuildError
from nnbuild.runners import arm7tdmi_timing, native

PROGRAM_SUFFIX = ".elf"
MEASURES_CYCLES = False
NEEDS_HARNESS = False
BOARD_NEEDS = ()
#: the whole batch runs in one emulated process; instruction-by-instruction emulation is slow
TIMEOUT_S = 600.0
#: a translated-block execution in QEMU's `-d exec` log: ... [flags/PC/...] symbol
_TRACE_RE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
_INSN_RE = re.compile(r"^0x([0-9a-f]+):")


def label(board):
    return board["simulator"]


#: per-instruction cost models a board can name (`instruction_timing`): objdump text -> {address: cycles}
TIMINGS = {"arm7tdmi": arm7tdmi_timing.cost_table}


def measures_cycles(board):
    return bool(board.get("instruction_cycles") or board.get("instruction_timing"))


def run(board, program, x, n_out, *, io, entry=None, harness=None):
    x = native.np.asarray(x, dtype=io.input)
    if not (entry and measures_cycles(board)):
        outputs = native.run_cases(program, x, n_out, prefix=[board["simulator"]], timeout=TIMEOUT_S,
                                   dtype=io.input, out_dtype=io.output)
        return outputs, None
    text = disassembly(board, program)
    start, returns = call_sites(text, program, entry)
    cost = instruction_cost(board, text, program)
    with tempfile.TemporaryDirectory(prefix="nnbuild-qemu-") as tmp:
        log = Path(tmp) / "exec.log"
        outputs = native.run_cases(program, x, n_out, timeout=TIMEOUT_S, dtype=io.input, out_dtype=io.output,
                                   prefix=[board["simulator"], "-d", "in_asm,exec,nochain", "-D", str(log)])
        counts = instructions_per_call(log, start, returns, cost)
    if len(counts) != len(x):
        raise NNBuildError(f"qemu-arm: {len(counts)} complete calls of {entry} in the exec log for {len(x)} inputs",
                           path=program)
    return outputs, native.np.asarray(counts, dtype=native.np.int64)


def disassembly(board, program):
    """`objdump -d --no-show-raw-insn` of the program, with the board's objdump."""
    done = subprocess.run([board["objdump"], "-d", "--no-show-raw-insn", str(program)], capture_output=True,
                          text=True, errors="replace")
    if done.returncode != 0:
        raise NNBuildError(f"{board['objdump']} failed: {done.stderr.strip()[:200]}", path=program)
    return done.stdout


def instruction_cost(board, text, program):
    """address -> cycles charged for one execution: the board's timing model, else a flat
    `instruction_cycles`. An executed address without a cost stops the count (see instructions_per_call)."""
    name = board.get("instruction_timing")
    if not name:
        flat = int(board["instruction_cycles"])
        return lambda addr: flat
    if name not in TIMINGS:
        raise NNBuildError(f"unknown instruction_timing {name!r} (known: {', '.join(sorted(TIMINGS))})",
                           item=board.get("name"))
    table, _unknown = TIMINGS[name](text)

    def cost(addr):
        if addr not in table:
            raise NNBuildError(f"qemu-arm executed 0x{addr:x}, which has no {name} cost", path=program)
        return table[addr]
    return cost


def call_sites(text, program, entry):
    """(address of `entry`, the return addresses of its `bl` call sites) from the objdump text (ARM
    `bl`/`blx` and Thumb-2 `bl`/`bl.w` are 4 bytes each)."""
    head = re.search(rf"^([0-9a-f]+) <{re.escape(entry)}>:$", text, re.M)
    if not head:
        raise NNBuildError(f"no function {entry} in the program", path=program)
    calls = re.findall(rf"^\s*([0-9a-f]+):\s+bl(?:x|\.w)?\s+[0-9a-f]+ <{re.escape(entry)}>$", text, re.M)
    if not calls:
        raise NNBuildError(f"no call of {entry} in the program", path=program)
    return int(head.group(1), 16), {int(a, 16) + 4 for a in calls}


def traced_pcs(lines):
    """The address of each translated-block execution in the lines of a `-d exec` log, in order
    (under -singlestep, of every executed instruction)."""
    for line in lines:
        m = _TRACE_RE.match(line)
        if m:
            yield int(m.group(1), 16)


def instructions_per_call(log, start, returns, cost=lambda addr: 1):
    """Cost of each call: `cost(address)` summed over the instructions of the translated blocks
    (`in_asm`) executed (`exec`, chaining off so every execution is logged) from `start` until one of
    `returns`; with the default cost, the executed instruction count."""
    sizes, counts = {}, []
    block, size, current = None, 0, None
    with open(log, errors="replace") as f:
        for line in f:
            m = _INSN_RE.match(line)
            if m:
                addr = int(m.group(1), 16)
                if block is None:
                    block, size = addr, 0
                size += cost(addr)
                continue
            m = _TRACE_RE.match(line)
            if not m:
                continue
            if block is not None:
                sizes[block], block = size, None
            pc = int(m.group(1), 16)
            if current is None:
                if pc == start:
                    current = sizes[pc]
            elif pc in returns:
                counts.append(current)
                current = None
            else:
                current += sizes[pc]
    return counts
