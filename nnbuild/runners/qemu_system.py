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

import fcntl
import hashlib
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
    name = board["instruction_timing"]
    if name not in cortexm_timing.MODELS:
        raise NNBuildError(f"unknown instruction_timing {name!r} for {EMULATOR} "
                           f"(known: {', '.join(sorted(cortexm_timing.MODELS))})", item=board.get("name"))
    start, returns, table = costed(board, program, entry, name)
    (outputs, err), counts = run_counted(board, program, cases, n_out, io.output,
                                         lambda chunks: cycles_per_call_in_log(chunks, start, returns, table, name, program))
    if len(counts) != len(x):
        raise NNBuildError(f"{EMULATOR}: {len(counts)} complete calls of {entry} in the exec log for {len(x)} "
                           "inputs", path=program)
    return outputs, native.np.asarray(counts, dtype=native.np.int64), stack_marks(err, len(x), program)


#: (program's digest, objdump, entry, timing model) -> (start, returns, cost table), for the process
#: (an adversarial search runs one check program in many batches)
_COSTED = {}


def costed(board, program, entry, name):
    """(entry address, return sites, address -> costs) of `entry` in `program` under the timing model
    `name`: objdump and the TRM table read once per program content in a process."""
    key = (hashlib.sha256(Path(program).read_bytes()).hexdigest(), board["objdump"], entry, name)
    if key not in _COSTED:
        text = disassembly(board, program)
        start, returns = call_sites(text, program, entry)
        table, _unknown = cortexm_timing.cost_table(text, name)
        _COSTED[key] = (start, returns, table)
    return _COSTED[key]


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
    """((outputs, stderr), count(exec log chunks)): the program run on the cases with QEMU's exec log
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
        try:   # a larger pipe: fewer switches between QEMU writing and this process reading
            pause = fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20) >= 1 << 20
        except (OSError, AttributeError):
            pause = False
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
            counts = count(_chunks(fd, proc, program, pause))
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


def _chunks(fd, proc, program, pause=False):
    """The bytes QEMU writes into the FIFO `fd` until it exits and the FIFO is drained; past
    TIMEOUT_S, QEMU is killed and the run fails. `pause` (a FIFO of 1 MiB): after a short read,
    a short wait lets the FIFO fill (QEMU writes a few KiB at a time: fewer, larger reads)."""
    started, exited = time.monotonic(), False
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
            yield chunk
            if pause and len(chunk) < _SHORT_READ and not exited:
                time.sleep(0.002)
        elif exited:
            break
        if time.monotonic() - started > TIMEOUT_S:
            proc.kill()
            raise NNBuildError(f"timed out after {TIMEOUT_S:g} s", path=program)


#: an instruction line of an `in_asm` listing, and the PC field of an `exec` line
#: `Trace N: HOST [CS_BASE/PC/FLAGS/CFLAGS] symbol` (the second field between "[" and "/")
_INSN_LINE_RE = re.compile(rb"^0x([0-9a-f]+):", re.M)
_TRACE_PC_RE = re.compile(rb"^Trace [^\n\[]*\[[^/\n]*/([^/\n]*)/", re.M)


def _pc(field):
    """The PC of an exec line's PC field (bytes), or None when it is not hex."""
    try:
        return int(field, 16)
    except ValueError:
        return None


def _traced_pc(line):
    """The guest PC of one `-d exec` line (text), or None: the field _executed reads."""
    found = _TRACE_PC_RE.match(line.encode("utf-8", "replace"))
    return _pc(found.group(1)) if found else None
#: byte -> its hex digit value, 16 for a byte that is not a lower-case hex digit
_HEX = native.np.full(256, 16, dtype=native.np.int64)
_HEX[native.np.frombuffer(b"0123456789", native.np.uint8)] = native.np.arange(10)
_HEX[native.np.frombuffer(b"abcdef", native.np.uint8)] = native.np.arange(10, 16)
#: how an `exec` line starts
_TRACE = native.np.frombuffer(b"Trace ", dtype=native.np.uint8)
#: a FIFO read shorter than this waits a little before the next (the pipe holds 1 MiB)
_SHORT_READ = 1 << 16
#: the exec log is handled in pieces of about this size (a FIFO read gives 1 MiB at most)
_PIECE = 1 << 22


def _as_chunks(lines, batch=1 << 16):
    """Text lines (as a test or a log file gives them) as the byte chunks the runner reads."""
    lines = iter(lines)
    while True:
        part = [line if line.endswith("\n") else line + "\n" for _, line in zip(range(batch), lines)]
        if not part:
            return
        yield "".join(part).encode("utf-8", "replace")


def _pieces(chunks):
    """The log as complete lines, in pieces of about _PIECE bytes; the last piece ends with a newline."""
    held, size = [], 0
    for chunk in chunks:
        held.append(chunk)
        size += len(chunk)
        if size >= _PIECE:
            buffer = b"".join(held)
            cut = buffer.rfind(b"\n") + 1
            held, size = [buffer[cut:]], len(buffer) - cut
            if cut:
                yield buffer[:cut]
    buffer = b"".join(held)
    if buffer:
        yield buffer if buffer.endswith(b"\n") else buffer + b"\n"


def _executed(text):
    """The PCs of the `exec` lines of `text` (complete lines, no instruction line), in order, as
    int64: read all at once where QEMU wrote its usual lines, else line by line by a regex."""
    pcs = _usual_pcs(text)
    if pcs is not None:
        return pcs
    pcs = [pc for pc in map(_pc, _TRACE_PC_RE.findall(text)) if pc is not None]
    return native.np.asarray(pcs, dtype=native.np.int64)


def _usual_pcs(text):
    """The PCs of `text` when each of its lines that starts with "Trace " holds three slashes
    (`Trace N: HOST [CS_BASE/PC/FLAGS/CFLAGS] symbol`), no other line holds one, and the PC fields
    are hex of one width; else None."""
    np = native.np
    data = np.frombuffer(text, dtype=np.uint8)
    ends = np.flatnonzero(data == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    long_enough = starts[ends - starts >= len(_TRACE)]
    traced = long_enough[(data[long_enough[:, None] + np.arange(len(_TRACE))] == _TRACE).all(axis=1)]
    slashes = np.flatnonzero(data == ord("/"))
    if len(slashes) != 3 * len(traced):
        return None
    if not len(traced):
        return np.zeros(0, dtype=np.int64)
    first, second, third = slashes[0::3], slashes[1::3], slashes[2::3]
    width = int(second[0] - first[0] - 1)
    line = np.searchsorted(ends, first)   # the line of each first slash
    if not (0 < width <= 16 and (second - first == width + 1).all() and (starts[line] == traced).all()
            and (third < ends[line]).all()):
        return None
    digits = _HEX[data[first[:, None] + 1 + np.arange(width)]]
    if digits.max() >= 16:
        return None
    return (digits << (4 * np.arange(width - 1, -1, -1))).sum(axis=1)


def cycles_per_call(lines, start, returns, table, model="the cost model", program=None):
    """`cycles_per_call_in_log` over text lines."""
    return cycles_per_call_in_log(_as_chunks(lines), start, returns, table, model, program)


def cycles_per_call_in_log(chunks, start, returns, table, model="the cost model", program=None):
    """Clocks of each call in a `-d in_asm,exec,nochain` log (bytes chunks): every block executed
    from `start` until one of `returns`, each of its instructions charged its table cost, the last
    one taken or not taken as the next executed block says. `table`: address -> (not taken, taken,
    next address).

    A soft-float model logs tens of millions of block executions: they are read and charged as
    arrays (numpy), between two listings at a time. The figures are those of charging each execution
    in turn: an execution is charged with its block's listing in force when the next block runs, and
    of two uncosted blocks, the one executed first stops the count."""
    blocks, counts, summed = {}, [], {}
    returns = native.np.asarray(sorted(returns), dtype=native.np.int64)
    state = {"block": None, "current": None, "pending": None, "starts": None}

    def cost(addr):
        if addr not in table:
            raise NNBuildError(f"{EMULATOR} executed 0x{addr:x}, which has no {model} cost", path=program)
        return table[addr]

    def block_costs(pc):
        """(cost with the last instruction not taken, with it taken, the address after it or -1),
        summed once per translation."""
        known = summed.get(pc)
        if known is None:
            addrs = blocks[pc]
            body = sum(_unfollowed(cost(a)) for a in addrs[:-1])
            not_taken, taken, after = cost(addrs[-1])
            known = summed[pc] = (body + not_taken, body + taken, -1 if after is None else after)
        return known

    def charge(sequence):
        """The clocks of the consecutive executions in `sequence` (int64; each but the last charged)."""
        ran, following = sequence[:-1], sequence[1:]
        if state["starts"] is None:
            state["starts"] = native.np.asarray(sorted(blocks), dtype=native.np.int64)
        starts = state["starts"]
        which = native.np.searchsorted(starts, ran).clip(max=max(len(starts) - 1, 0))
        if not len(starts) or (starts[which] != ran).any():   # executed without a listing: as blocks[pc] says
            blocks[int(ran[native.np.flatnonzero(starts[which] != ran)[0]] if len(starts) else ran[0])]
        present = native.np.flatnonzero(native.np.bincount(which, minlength=len(starts)))
        costs = native.np.zeros((len(starts), 3), dtype=native.np.int64)
        failed = {}
        for index in present:
            try:
                costs[index] = block_costs(int(starts[index]))
            except NNBuildError as error:
                failed[index] = error
        if failed:   # the uncosted block executed first
            raise failed[min(failed, key=lambda index: int(native.np.argmax(which == index)))]
        mine = costs[which]
        return int(native.np.where(mine[:, 2] == following, mine[:, 0], mine[:, 1]).sum())

    def executions(executed):
        """Advance the call state over a run of block executions (no listing between them)."""
        entries = native.np.flatnonzero(executed == start)
        exits = native.np.flatnonzero(native.np.isin(executed, returns))
        at = 0
        while at < len(executed):
            if state["current"] is None:
                found = entries[native.np.searchsorted(entries, at):]
                if not len(found):
                    return
                state["current"], state["pending"], at = 0, start, int(found[0]) + 1
                continue
            found = exits[native.np.searchsorted(exits, at):]
            stop = len(executed) if not len(found) else int(found[0]) + 1
            sequence = native.np.concatenate(([state["pending"]], executed[at:stop]))
            state["current"] += charge(sequence)
            if not len(found):
                state["pending"] = int(executed[-1])
                return
            counts.append(state["current"])
            state["current"] = state["pending"] = None
            at = stop

    def text(part):
        """Lines that are not instructions: they close a listing, and their `exec` lines run."""
        if not part:
            return
        if state["block"] is not None:   # a block's listing ends at the first line that is not an instruction
            listed = state["block"]
            blocks[listed[0]] = listed
            summed.pop(listed[0], None)   # translated again (after a flush): summed again
            state["block"], state["starts"] = None, None
        executions(_executed(part))

    for piece in _pieces(chunks):
        at = 0
        for insn in _instruction_lines(piece):
            text(piece[at:insn.start()])
            if state["block"] is None:
                state["block"] = []
            state["block"].append(int(insn.group(1), 16))
            at = piece.find(b"\n", insn.end()) + 1
        text(piece[at:])
    return counts


def _instruction_lines(piece):
    """The matches of _INSN_LINE_RE in `piece` (complete lines), in order: a few thousand lines
    among millions, found by the "0x" that starts them (numpy), not by a regex tried at every line."""
    np = native.np
    data = np.frombuffer(piece, dtype=np.uint8)
    ends = np.flatnonzero(data == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))[ends - np.concatenate(([0], ends[:-1] + 1)) >= 2]
    for at in starts[(data[starts] == ord("0")) & (data[starts + 1] == ord("x"))]:
        insn = _INSN_LINE_RE.match(piece, int(at))
        if insn:
            yield insn


def _unfollowed(costs):
    """An instruction's cost inside a block: no next executed block to follow it (a non-branch's
    two costs are the same)."""
    not_taken, taken, after = costs
    return not_taken if after is None else taken
