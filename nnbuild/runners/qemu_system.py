"""The `qemu-system-arm` runner: the check program of a Cortex-M board runs on a QEMU machine with
that core's instruction set (the board's `qemu_machine`: mps2-an386 for a Cortex-M4, microbit's
Cortex-M0 for ARMv6-M), linked with nnbuild's reset code and the machine's linker script
(nnbuild/runners/cortexm/), reading its inputs from stdin and writing its outputs to stdout
through semihosting (newlib's rdimon, `-semihosting-config enable=on,target=native`).

QEMU counts no cycles. On a board with `instruction_timing` the run logs QEMU's translated blocks
and their executions (`-d in_asm,exec,nochain`) and charges each instruction executed inside each
call of the inference function, from its entry to the return to its call site, the clocks of the
core's TRM table (nnbuild/runners/cortexm_timing.py): the timing model applied to the executed
path, not a measurement of the silicon. A conditional branch is charged taken when the next
executed block does not start right after it. An executed instruction without a cost stops the
count in one line naming its address."""

import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing, native
from nnbuild.runners.qemu_user import call_sites, disassembly  # one objdump reading for both ARM runners

PROGRAM_SUFFIX = ".elf"
MEASURES_CYCLES = False
NEEDS_HARNESS = False
BOARD_NEEDS = ("qemu_machine",)
EMULATOR = "qemu-system-arm"
INSTALL_HINT = "apt-get install qemu-system-arm"
#: the whole batch runs in one emulated machine; logging and counting every executed block is slow
#: (a soft-float model on ARMv6-M: millions of blocks per inference)
TIMEOUT_S = 3600.0
#: where the reset code and the linker scripts of the machines live
SOURCES = Path(__file__).with_name("cortexm")
STARTUP = SOURCES / "startup.c"
#: the QEMU machines a board may name, and the core each one emulates
MACHINES = {"mps2-an386": "cortex-m4", "microbit": "cortex-m0"}
_INSN_RE = re.compile(r"^0x([0-9a-f]+):")


def label(board):
    return EMULATOR


def measures_cycles(board):
    return bool(board.get("instruction_timing"))


def machine(board):
    """The board's QEMU machine, checked against the ones nnbuild has a linker script for."""
    name = board.get("qemu_machine")
    if name not in MACHINES:
        raise NNBuildError(f"board '{board['name']}': qemu_machine {name!r} has no linker script "
                           f"(known: {', '.join(sorted(MACHINES))})")
    return name


def check_program(board):
    """What a check program for this board is linked with besides the model and its main: the reset
    code (sources) and the machine's linker script."""
    return {"sources": [str(STARTUP)], "ldscript": str(SOURCES / f"{machine(board)}.ld")}


def command(board, log=None):
    """The qemu-system-arm command line up to the program (its last word is `-kernel`): the board's
    machine, semihosting on stdin/stdout, no display, monitor or serial port; with `log`, the exec log."""
    qemu = shutil.which(EMULATOR)
    if not qemu:
        raise NNBuildError(f"'{EMULATOR}' not found on PATH for target={board['name']}; install it with: "
                           f"{INSTALL_HINT}")
    trace = ["-d", "in_asm,exec,nochain", "-D", str(log)] if log else []
    return [qemu, "-M", machine(board), "-nographic", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native", *trace, "-kernel"]


def run(board, program, x, n_out, *, io, entry=None, harness=None):
    outputs, cycles, _stack = run_with_stack(board, program, x, n_out, io=io, entry=entry, harness=harness)
    return outputs, cycles


def run_with_stack(board, program, x, n_out, *, io, entry=None, harness=None):
    """(outputs, cycles or None, stack bytes per case or None): `run` plus the high-water mark of
    each inference the check program's stack probe reports (startup.c, check_io.h), None from a
    check program without the probe."""
    x = native.np.asarray(x, dtype=io.input)
    cases = native.as_cases(x, path=program, dtype=io.input)
    if not (entry and measures_cycles(board)):
        outputs, err = run_counted(board, program, cases, n_out, io.output, None)
        return outputs, None, stack_marks(err, len(x), program)
    text = disassembly(board, program)
    start, returns = call_sites(text, program, entry)
    name = board["instruction_timing"]
    if name not in cortexm_timing.MODELS:
        raise NNBuildError(f"unknown instruction_timing {name!r} for {EMULATOR} "
                           f"(known: {', '.join(sorted(cortexm_timing.MODELS))})", item=board.get("name"))
    table, _unknown = cortexm_timing.cost_table(text, name)
    (outputs, err), counts = run_counted(board, program, cases, n_out, io.output,
                                         lambda lines: cycles_per_call(lines, start, returns, table, name, program))
    if len(counts) != len(x):
        raise NNBuildError(f"{EMULATOR}: {len(counts)} complete calls of {entry} in the exec log for {len(x)} "
                           "inputs", path=program)
    return outputs, native.np.asarray(counts, dtype=native.np.int64), stack_marks(err, len(x), program)


def stack_marks(err, cases, program):
    """The `nnbuild-stack=BYTES` lines of the probe on stderr, one per case, as int64 [N]; None when
    the program wrote none (a check program without the probe)."""
    marks = [int(line.split(b"=", 1)[1]) for line in err.splitlines() if line.startswith(b"nnbuild-stack=")]
    if not marks:
        return None
    if len(marks) != cases:
        raise NNBuildError(f"{EMULATOR}: {len(marks)} stack marks for {cases} inputs", path=program)
    return native.np.asarray(marks, dtype=native.np.int64)


def run_counted(board, program, cases, n_out, out_dtype, count):
    """((outputs, stderr), count(exec log lines)): the program run on the cases with QEMU's exec log
    streamed through a FIFO into `count` while it runs (a soft-float model logs gigabytes: none of it
    is written to disk). An error of `count` stops QEMU at once. `count` None: no exec log, and
    (outputs, stderr) alone."""
    if count is None:
        try:
            proc = subprocess.run([*command(board), str(program)], input=cases.tobytes(), capture_output=True,
                                  timeout=TIMEOUT_S, check=False)
        except OSError as error:
            raise NNBuildError(f"{EMULATOR} could not start: {error}", path=program) from None
        except subprocess.TimeoutExpired:
            raise NNBuildError(f"timed out after {TIMEOUT_S:g} s", path=program) from None
        return _outputs(proc.returncode, proc.stdout, proc.stderr, program, cases, n_out, out_dtype)
    with tempfile.TemporaryDirectory(prefix="nnbuild-qemu-system-") as tmp:
        fifo = Path(tmp) / "exec.log"
        os.mkfifo(fifo)
        # read end opened read-write: the open never blocks, and QEMU exiting is seen through poll()
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            proc = subprocess.Popen([*command(board, fifo), str(program)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as error:
            os.close(fd)
            raise NNBuildError(f"{EMULATOR} could not start: {error}", path=program) from None
        done = {}
        talk = threading.Thread(target=lambda: done.update(zip(("out", "err"), proc.communicate(cases.tobytes()))))
        talk.start()
        try:
            counts = count(_lines(fd, proc, program))
        except BaseException:
            proc.kill()
            raise
        finally:
            talk.join()
            os.close(fd)
    return _outputs(proc.returncode, done["out"], done.get("err", b""), program, cases, n_out, out_dtype), counts


def _outputs(returncode, out_bytes, err, program, cases, n_out, out_dtype):
    """(outputs [N, n_out], stderr) of a finished run; a failed run or a short output is one line."""
    if returncode != 0:
        raise NNBuildError(native.describe_exit(returncode, err), path=program)
    out = native.np.dtype(out_dtype)
    want = out.itemsize * int(n_out) * len(cases)
    if len(out_bytes) != want:
        raise NNBuildError(f"wrote {len(out_bytes)} bytes, expected {want} ({len(cases)} cases x {n_out} "
                           f"{out.name})", path=program)
    outputs = native.np.frombuffer(out_bytes, dtype=out).astype(out.newbyteorder("="))
    return outputs.reshape(len(cases), int(n_out)), err


def _lines(fd, proc, program):
    """The text lines QEMU writes into the FIFO `fd` until it exits and the FIFO is drained; past
    TIMEOUT_S, QEMU is killed and the run fails."""
    started, rest, exited = time.monotonic(), b"", False
    while True:
        exited = exited or proc.poll() is not None   # asked before reading: what it wrote is in the FIFO
        ready, _, _ = select.select([fd], [], [], 0 if exited else 0.2)
        chunk = b""
        if ready:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                chunk = b""
        if chunk:
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line.decode("utf-8", "replace")
        elif exited:
            break
        if time.monotonic() - started > TIMEOUT_S:
            proc.kill()
            raise NNBuildError(f"timed out after {TIMEOUT_S:g} s", path=program)
    if rest:
        yield rest.decode("utf-8", "replace")


def _traced_pc(line):
    """The guest PC of a `-d exec` line `Trace N: HOST [CS_BASE/PC/FLAGS/CFLAGS] symbol`, or None."""
    first = line.find("/", line.find("["))
    second = line.find("/", first + 1)
    try:
        return int(line[first + 1:second], 16) if first > 0 and second > first else None
    except ValueError:
        return None


def cycles_per_call(lines, start, returns, table, model="the cost model", program=None):
    """Clocks of each call in a `-d in_asm,exec,nochain` log: every block executed from `start` until
    one of `returns`, each of its instructions charged its table cost, the last one taken or not
    taken as the next executed block says. `table`: address -> (not taken, taken, next address)."""
    blocks, counts = {}, []
    block, current, pending = None, None, None

    def cost(addr, next_pc):
        if addr not in table:
            raise NNBuildError(f"{EMULATOR} executed 0x{addr:x}, which has no {model} cost", path=program)
        not_taken, taken, after = table[addr]
        return not_taken if next_pc == after else taken

    #: block -> (its cost with the last instruction not taken, with it taken, the address after it),
    #: summed once per translation
    summed = {}

    def charge(pc, next_pc):
        known = summed.get(pc)
        if known is None:
            addrs = blocks[pc]
            body = sum(cost(a, None) for a in addrs[:-1])
            cost(addrs[-1], None)   # an uncosted last instruction stops here too
            not_taken, taken, after = table[addrs[-1]]
            known = summed[pc] = (body + not_taken, body + taken, after)
        return known[0] if next_pc == known[2] else known[1]

    for line in lines:   # tens of millions of lines for a soft-float model: prefixes first, regexes after
        if line.startswith("0x"):
            m = _INSN_RE.match(line)
            if m:
                if block is None:
                    block = []
                block.append(int(m.group(1), 16))
                continue
        if block is not None:   # a block's listing ends at the first line that is not an instruction
            blocks[block[0]] = block
            summed.pop(block[0], None)   # translated again (after a flush): summed again
            block = None
        if not line.startswith("Trace "):
            continue
        pc = _traced_pc(line)
        if pc is None:
            continue
        if current is None:
            if pc == start:
                current, pending = 0, pc
            continue
        current += charge(pending, pc)
        if pc in returns:
            counts.append(current)
            current = pending = None
        else:
            pending = pc
    return counts
