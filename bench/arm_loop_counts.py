"""Per loop of an ARM build's .ff: the most back edges qemu-arm takes per loop entry and per
inference, beside the `max` and `total` the .ff gives OTAWA (both count back edges). Checks the
loop-form decision on the real ELF: a rotated loop's N - 1 must be reached and never passed.

    python3 bench/arm_loop_counts.py build/arm/xor [--cases 3]

Reads the build's check.elf, wcet/check.ff and inputs.npz (float32 inputs); runs qemu-arm
single-stepped (every executed instruction in the exec log, streamed through a pipe). Exits 1 if
any loop takes more back edges than its bound.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import boards  # noqa: E402
from nnbuild.runners import qemu_user  # noqa: E402
from nnbuild.wcet import otawa  # noqa: E402

FF_LOOP = re.compile(r"^loop 0x([0-9a-f]+) max (\d+)(?: total (\d+))?; // (.*)$", re.M)


def ff_bounds(ff_text):
    """header -> (max, total or None, comment) from the .ff."""
    return {int(a, 16): (int(m), int(t) if t else None, c) for a, m, t, c in FF_LOOP.findall(ff_text)}


def latches_by_header(functions):
    """header -> addresses of the back-edge instructions, from our CFG of the ELF."""
    return {loop.header: set(loop.latches) for fs in functions.values() for f in fs for loop in otawa.natural_loops(f)}


def executed_pcs(elf, stdin_bytes):
    """Every executed pc, in order, from qemu-arm -singlestep (the log goes through a fifo)."""
    with tempfile.TemporaryDirectory(prefix="loopcounts-") as tmp:
        fifo = Path(tmp) / "exec.log"
        os.mkfifo(fifo)
        proc = subprocess.Popen(["qemu-arm", "-singlestep", "-d", "exec,nochain", "-D", str(fifo), str(elf)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        feeder = threading.Thread(target=lambda: (proc.stdin.write(stdin_bytes), proc.stdin.close()))
        feeder.start()
        with open(fifo, errors="replace") as log:
            yield from qemu_user.traced_pcs(log)
        feeder.join()
        proc.wait()


def count(elf, start, bounds, latches, stdin_bytes):
    """(header -> most back edges in one entry, header -> most back edges in one inference), the
    inference starting at `start`."""
    per_entry, per_call = defaultdict(int), defaultdict(int)
    current, in_call = {}, defaultdict(int)
    prev = None
    for pc in executed_pcs(elf, stdin_bytes):
        if pc == start:
            for h, n in in_call.items():
                per_call[h] = max(per_call[h], n)
            in_call.clear()
        if pc in bounds:
            if prev in latches.get(pc, ()):
                current[pc] += 1
                in_call[pc] += 1
            else:
                current[pc] = 0
            per_entry[pc] = max(per_entry[pc], current[pc])
        prev = pc
    for h, n in in_call.items():
        per_call[h] = max(per_call[h], n)
    return per_entry, per_call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", help="an ARM build directory, e.g. build/arm/xor")
    ap.add_argument("--cases", type=int, default=3, help="inputs of inputs.npz to run")
    opts = ap.parse_args(argv)
    build = Path(opts.build)
    elf = build / "check.elf"
    entry = re.search(r"^// entry: (\S+)$", (build / "wcet" / "check.ff").read_text(), re.M).group(1)
    bounds = ff_bounds((build / "wcet" / "check.ff").read_text())
    x = np.load(build / "inputs.npz")["x"][:opts.cases]
    functions = otawa.disassemble(elf, boards.load_board("arm"))
    per_entry, per_call = count(elf, functions[entry][0].start, bounds, latches_by_header(functions),
                                np.ascontiguousarray(x, "<f4").tobytes())
    bad = 0
    print("| header | max | most per entry | total | most per inference | loop |")
    print("|---|---|---|---|---|---|")
    for h, (mx, total, comment) in sorted(bounds.items()):
        if "arm_libloops" in comment:
            continue
        over = per_entry.get(h, 0) > mx or (total is not None and per_call.get(h, 0) > total)
        bad += over
        print(f"| 0x{h:x} | {mx} | {per_entry.get(h, '-')} | {total if total is not None else '-'} | "
              f"{per_call.get(h, '-')} | {comment}{'  ** OVER **' if over else ''} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
