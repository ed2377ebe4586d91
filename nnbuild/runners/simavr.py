"""Cycle-exact AVR runs through the libsimavr harness (simavr_run.c), see wcet.md section 5.

Firmware contract for run_cases (what check_main.c provides on AVR):
  float nnbuild_in[n_in], nnbuild_out[n_out]; void nnbuild_ready(void) called before each
  inference. The harness writes a case's inputs when the PC reaches nnbuild_ready and reads
  the outputs at the next one; cycles count the entry function from its first instruction
  through RET, excluding the CALL. Stack bytes (with_stack=True) are (SP just before the CALL)
  - (lowest SP during the call): the return address plus everything pushed or reserved below
  it, the convention of nnbuild.wcet.avr_stack.stack_bound.

CLI (the SCons build calls the first):
  python -m nnbuild.runners.simavr build-harness -o PATH [--cc gcc]
  python -m nnbuild.runners.simavr measure ELF --entry SYMBOL --mcu MCU --freq HZ
                                   [--harness PATH] [--stop SYMBOL] [--nm avr-nm]
"""

import argparse
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import namedtuple
from pathlib import Path

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.runners import IN_SYMBOL, OUT_SYMBOL, READY_SYMBOL, SIMAVR_RUN_SRC
from nnbuild.runners.native import as_cases, describe_exit

INSTALL_HINT = "libsimavr not found: apt-get install simavr libsimavr-dev"

# --- the `simavr` runner (nnbuild.runners.RUNNERS) --------------------------------------
PROGRAM_SUFFIX = ".elf"
MEASURES_CYCLES = True
NEEDS_HARNESS = True
DEBIAN_PACKAGE = "simavr"
BOARD_NEEDS = ("mcu", "clock_hz")


def label(board):
    return "simavr"


def run(board, program, x, n_out, *, io, entry=None, harness=None):
    """(float32 outputs [N, n_out], cycles [N]): the harness moves float32 values through the
    firmware's nnbuild_in/nnbuild_out whatever the host wire format (avr-gcc's double is float)."""
    if not harness:
        raise NNBuildError("a simavr run needs the harness (--harness)")
    if not entry:
        raise NNBuildError("a simavr run needs the inference function (--entry) to count its cycles")
    x32 = np.ascontiguousarray(np.asarray(x, dtype=np.float64), dtype=np.float32)
    return run_cases(program, x32, n_out, entry_symbol=entry, mcu=board["mcu"], freq=board["clock_hz"],
                     harness=harness, nm=board.get("nm", "avr-nm"))
DEFAULT_MAX_CYCLES = 2_000_000_000
RAM_OFFSET = 0x800000

#: One harness output line: cycles and calls of a case (or of one call), the raw out bytes, and
#: the max stack bytes of its calls (None from a harness older than the stack= field).
Record = namedtuple("Record", "cycles calls out stack", defaults=(None,))
_RECORD_RE = re.compile(r"^cycles=(\d+) calls=(\d+)(?: stack=(\d+))? out=((?:[0-9a-f]{2})*)$")


# --- building the harness -------------------------------------------------------------

def _pkg_config_flags():
    """cflags/libs from pkg-config when it knows simavr, else the Debian layout."""
    if shutil.which("pkg-config"):
        proc = subprocess.run(["pkg-config", "--cflags", "--libs", "simavr"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            flags = proc.stdout.split()
            cflags = [f for f in flags if not f.startswith(("-l", "-L"))]
            libs = [f for f in flags if f.startswith(("-l", "-L"))]
            return cflags, libs + ["-lelf"]
    return ["-I/usr/include/simavr", "-I/usr/local/include/simavr"], ["-lsimavr", "-lelf"]


def harness_command(dest, cc="gcc"):
    """The compile line for simavr_run.c (-lelf kept for static libsimavr builds)."""
    cflags, libs = _pkg_config_flags()
    return [cc, "-O2", "-std=gnu99", "-Wall", "-Wextra", *cflags,
            str(SIMAVR_RUN_SRC), "-o", str(dest), *libs]


def _missing_simavr(stderr):
    """True when the failure is an absent libsimavr/libelf rather than a bug in the source."""
    return bool(re.search(r"(sim_avr\.h|sim_elf\.h|avr_mcu_section\.h).*No such file"
                          r"|cannot find -l(simavr|elf)", stderr))


def build_harness(dest, cc="gcc"):
    """Compile simavr_run.c to `dest` (atomically, so parallel builds never see half a file)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        proc = subprocess.run(harness_command(tmp, cc), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise NNBuildError(f"C compiler '{cc}' not found", path=dest) from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        if _missing_simavr(proc.stderr):
            raise NNBuildError(INSTALL_HINT, path=dest)
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip())
        raise NNBuildError(f"harness build failed: {first}", path=SIMAVR_RUN_SRC)
    os.replace(tmp, dest)
    return dest


def default_harness(cc="gcc"):
    """A harness cached per user and source version, for callers that do not pass one."""
    digest = hashlib.sha256(SIMAVR_RUN_SRC.read_bytes() + cc.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"nnbuild-{os.getuid()}" / f"simavr_run-{digest}"
    return path if path.exists() else build_harness(path, cc)


# --- symbols --------------------------------------------------------------------------

def symbol_table(elf, nm="avr-nm"):
    """{name: (address, size or None)} from `nm -S`, addresses as nm prints them."""
    try:
        proc = subprocess.run([nm, "-S", str(elf)], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise NNBuildError(f"'{nm}' not found", path=elf) from None
    if proc.returncode != 0:
        raise NNBuildError(f"{nm} failed: {proc.stderr.strip()}", path=elf)
    table = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            table[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
        elif len(parts) == 3:
            table[parts[2]] = (int(parts[0], 16), None)
    return table


def symbol_addresses(elf, names, nm="avr-nm"):
    """{name: address} for the requested symbols; a missing one is a one-line error."""
    table = symbol_table(elf, nm)
    missing = [n for n in names if n not in table]
    if missing:
        raise NNBuildError(f"symbol(s) not found: {', '.join(missing)}", path=elf)
    return {n: table[n][0] for n in names}


def _check_size(elf, table, name, n_floats):
    """Catch a firmware built for another model before simulating garbage."""
    size = table[name][1]
    if size is not None and size != 4 * n_floats:
        raise NNBuildError(f"{name} holds {size // 4} floats, expected {n_floats}", path=elf)


# --- running --------------------------------------------------------------------------

def parse_records(text):
    """Parse harness stdout exactly; any stray line is an error, not silently skipped."""
    records = []
    for line in text.splitlines():
        m = _RECORD_RE.match(line)
        if not m:
            raise NNBuildError(f"unexpected harness output line: {line!r}")
        stack = int(m.group(3)) if m.group(3) is not None else None
        records.append(Record(int(m.group(1)), int(m.group(2)), bytes.fromhex(m.group(4)), stack))
    return records


#: a run longer than this (s) prints a progress line to stderr about this often
PROGRESS_SECONDS = 2.0


def _run_harness(harness, elf, args, stdin, timeout, total=None, what="cases"):
    """Run the harness once; map every failure to one line naming the ELF.

    Its stdout is read as it comes (one record per case, line-buffered through stdbuf where
    coreutils has it) so that a run longer than PROGRESS_SECONDS logs `simavr: 12/37 cases, 8.4 s`
    about every PROGRESS_SECONDS, and every run once at its end (shown with -v); the records are the
    same either way."""
    import threading
    import time
    harness = default_harness() if harness is None else harness
    if not os.path.exists(str(harness)):
        raise NNBuildError(f"simavr harness not found: {harness}", path=elf)
    cmd = [str(harness), str(elf), *[str(a) for a in args]]
    if timeout:
        cmd += ["--timeout", str(max(1, int(timeout)))]
    stdbuf = shutil.which("stdbuf")
    try:
        proc = subprocess.Popen(([stdbuf, "-oL"] if stdbuf else []) + cmd, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except (FileNotFoundError, PermissionError):
        raise NNBuildError(f"simavr harness not found: {harness}", path=elf) from None
    errors, expired = [], threading.Event()

    def feed():
        try:
            proc.stdin.write(stdin)
        except (BrokenPipeError, OSError):
            pass  # the harness stopped reading: its exit status says why
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def drain():
        errors.append(proc.stderr.read())

    def kill():
        expired.set()
        proc.kill()
    helpers = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    for t in helpers:
        t.start()
    watchdog = threading.Timer(timeout + 30, kill) if timeout else None
    if watchdog:
        watchdog.daemon = True
        watchdog.start()
    lines, start = [], time.monotonic()
    last = start
    try:
        for line in proc.stdout:
            lines.append(line)
            now = time.monotonic()
            if now - last >= PROGRESS_SECONDS:
                last = now
                _progress(len(lines), total, what, now - start)
        proc.wait()
    finally:
        if watchdog:
            watchdog.cancel()
        for t in helpers:
            t.join()
    if expired.is_set():
        raise NNBuildError(f"simavr_run: timeout after {timeout} s", path=elf)
    _progress(len(lines), total, what, time.monotonic() - start)   # the run's one timing line (-v)
    if proc.returncode != 0:
        raise NNBuildError(describe_exit(proc.returncode, b"".join(errors)), path=elf)
    return parse_records(b"".join(lines).decode("ascii", "replace"))


def _progress(done, total, what, seconds):
    count = f"{done}/{total}" if total is not None else f"{done}"
    logging.getLogger(__name__).info(f"simavr: {count} {what}, {seconds:.1f} s")


def _target_args(mcu, freq, entry, max_cycles):
    return ["--mcu", mcu, "--freq", int(freq), "--entry", hex(entry),
            "--max-cycles", int(max_cycles)]


def _stack_column(records, elf):
    """int64 stack bytes per record; an old harness without the stack= field is an error."""
    if any(r.stack is None for r in records):
        raise NNBuildError("simavr harness does not report stack= (rebuild it)", path=elf)
    return np.array([r.stack for r in records], dtype=np.int64)


def run_cases(elf, inputs, n_out, *, entry_symbol, mcu, freq, harness=None, nm="avr-nm",
              max_cycles=DEFAULT_MAX_CYCLES, timeout=3600.0, with_stack=False):
    """Simulate each case on a check firmware; returns (float32 [N, n_out], int64 cycles [N]),
    plus int64 stack bytes [N] as a third item when with_stack is true.

    cycles[i] sums the outermost calls of `entry_symbol` during case i (one call for the
    inference function itself), stack[i] is the most stack any of them used (module doc);
    max_cycles bounds each case, timeout the whole run (s).
    """
    cases = as_cases(inputs, path=elf)
    n, n_in, n_out = cases.shape[0], cases.shape[1], int(n_out)
    if n == 0:
        empty = (np.zeros((0, n_out), np.float32), np.zeros(0, np.int64))
        return empty + (np.zeros(0, np.int64),) if with_stack else empty
    table = symbol_table(elf, nm)
    addr = symbol_addresses(elf, [entry_symbol, READY_SYMBOL, IN_SYMBOL, OUT_SYMBOL], nm)
    _check_size(elf, table, IN_SYMBOL, n_in)
    _check_size(elf, table, OUT_SYMBOL, n_out)
    args = _target_args(mcu, freq, addr[entry_symbol], max_cycles) + [
        "--ready", hex(addr[READY_SYMBOL]), "--in", hex(addr[IN_SYMBOL]), "--n-in", n_in,
        "--out", hex(addr[OUT_SYMBOL]), "--n-out", n_out]
    records = _run_harness(harness, elf, args, cases.tobytes(), timeout, total=n)
    if len(records) != n:
        raise NNBuildError(f"simavr_run reported {len(records)} of {n} cases", path=elf)
    for i, rec in enumerate(records):
        if rec.calls == 0:
            raise NNBuildError(f"{entry_symbol} was never called in case {i}", path=elf)
    outputs = np.frombuffer(b"".join(r.out for r in records), dtype="<f4")
    cycles = np.array([r.cycles for r in records], dtype=np.int64)
    result = (outputs.astype(np.float32).reshape(n, n_out), cycles)
    return result + (_stack_column(records, elf),) if with_stack else result


def measure_calls(elf, entry_symbol, *, mcu, freq, harness=None, nm="avr-nm", stop_symbol="_exit",
                  max_cycles=DEFAULT_MAX_CYCLES, timeout=3600.0, with_stack=False):
    """Cycles of every outermost call of `entry_symbol` in a self-driving firmware (int64 [calls]);
    with_stack=True returns (cycles, stack bytes) of each call.

    The run ends when the firmware sleeps with interrupts off or reaches `stop_symbol`
    (avr-libc's `_exit`, which main's return reaches); max_cycles bounds the whole run.
    """
    names = [entry_symbol] + ([stop_symbol] if stop_symbol else [])
    addr = symbol_addresses(elf, names, nm)
    args = _target_args(mcu, freq, addr[entry_symbol], max_cycles)
    if stop_symbol:
        args += ["--stop", hex(addr[stop_symbol])]
    records = _run_harness(harness, elf, args, b"", timeout, what="calls")
    cycles = np.array([r.cycles for r in records], dtype=np.int64)
    return (cycles, _stack_column(records, elf)) if with_stack else cycles


# --- CLI ------------------------------------------------------------------------------

def _parser():
    p = argparse.ArgumentParser(prog="python -m nnbuild.runners.simavr",
                                description="libsimavr harness: build it, or measure a function.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build-harness", help="compile simavr_run.c")
    b.add_argument("-o", "--output", required=True, help="harness executable to write")
    b.add_argument("--cc", default="gcc", help="host C compiler (default gcc)")
    m = sub.add_parser("measure", help="print the cycles of each call of a function")
    m.add_argument("elf")
    m.add_argument("--entry", required=True, help="function symbol to time")
    m.add_argument("--mcu", required=True)
    m.add_argument("--freq", required=True, type=int)
    m.add_argument("--harness", help="prebuilt simavr_run (default: build and cache one)")
    m.add_argument("--stop", default="_exit", help="symbol that ends the run (default _exit)")
    m.add_argument("--nm", default="avr-nm")
    m.add_argument("--max-cycles", type=int, default=DEFAULT_MAX_CYCLES)
    return p


def main(argv=None):
    """CLI entry: errors print one line and exit 1."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "build-harness":
            build_harness(args.output, args.cc)
        else:
            cycles = measure_calls(args.elf, args.entry, mcu=args.mcu, freq=args.freq,
                                   harness=args.harness, nm=args.nm, stop_symbol=args.stop,
                                   max_cycles=args.max_cycles)
            for c in cycles:
                print(int(c))
    except NNBuildError as exc:
        print(f"nnbuild: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
