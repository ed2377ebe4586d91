"""Helpers of the ARM tests: a C file built for the ARM board's core (ARM7TDMI, ARM state, newlib
with semihosting) and qemu-arm's runs of it, as executed addresses or as the ARM7TDMI clocks each
call of a function was charged (the measured side of the OTAWA bounds)."""

import json
import subprocess
from pathlib import Path

from nnbuild.runners import qemu_user

ARM = json.loads((Path(__file__).resolve().parents[1] / "toolchains" / "arm.json").read_text())


def arm7tdmi_elf(tmp, name, source, opt="-O0", libs=()):
    """`source` written to tmp/name.c and built (with line tables) into tmp/name.elf."""
    src, elf = tmp / f"{name}.c", tmp / f"{name}.elf"
    src.write_text(source)
    subprocess.run([ARM["cc"], "-mcpu=arm7tdmi", "-marm", opt, "-g", "-specs=rdimon.specs", str(src), "-o", str(elf),
                    *(f"-l{lib}" for lib in libs)], check=True, capture_output=True)
    return elf


def executed_pcs(elf, log, timeout=60, check=True):
    """Every executed instruction's address, in order (qemu-arm -singlestep: a block each)."""
    subprocess.run(["qemu-arm", "-singlestep", "-d", "exec,nochain", "-D", str(log), str(elf)], check=check,
                   timeout=timeout)
    with open(log, errors="replace") as lines:
        return list(qemu_user.traced_pcs(lines))


def clocks_per_call(elf, entry, log, timeout=60, check=True):
    """The ARM7TDMI clocks qemu-arm's run charged each call of `entry` (the same table as the bound);
    `check=False` for a program whose exit status is its own verdict."""
    text = qemu_user.disassembly(ARM, elf)
    start, returns = qemu_user.call_sites(text, elf, entry)
    subprocess.run(["qemu-arm", "-d", "in_asm,exec,nochain", "-D", str(log), str(elf)], timeout=timeout, check=check)
    return qemu_user.instructions_per_call(log, start, returns, qemu_user.instruction_cost(ARM, text, elf))
