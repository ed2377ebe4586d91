"""Measured runs of a generated inference function: natively on the host, under a user-mode
emulator (qemu-arm), on a Cortex-M machine (qemu-system-arm), and cycle-exact on AVR through libsimavr.

A runner is one module named by a board's "simulator" in RUNNERS. It offers
`run(board, program, x, n_out, *, io, entry=None, harness=None) -> (outputs, cycles or None)`,
`label(board)` (the run's name in reports), PROGRAM_SUFFIX, MEASURES_CYCLES (or `measures_cycles(board)`
where it depends on the board; read through Board.measures_cycles), NEEDS_HARNESS (then
`build_harness(dest)` and `default_harness()`, a per-user cached one, too) and BOARD_NEEDS (board keys it reads). A new runner is one new module
and one RUNNERS line.

Submodules are not imported here, so `python -m nnbuild.runners.simavr` runs cleanly:
- `nnbuild.runners.native`: run_cases(executable, inputs, n_out)
- `nnbuild.runners.simavr`: build_harness, default_harness, symbol_addresses, run_cases, measure_calls

The C sources ship beside this file: CHECK_MAIN (the generic check firmware main) and
SIMAVR_RUN_SRC (the libsimavr harness).
"""

import importlib
from dataclasses import dataclass
from pathlib import Path

from nnbuild.errors import NNBuildError

#: board "simulator" value -> runner module
RUNNERS = {
    "native": "nnbuild.runners.native",
    "qemu-arm": "nnbuild.runners.qemu_user",
    "qemu-system-arm": "nnbuild.runners.qemu_system",
    "simavr": "nnbuild.runners.simavr",
}


@dataclass(frozen=True)
class CheckIO:
    """The wire format of a check program on a host pipe: numpy dtypes of one input and one output
    value (a kind's check main decides it; simulators with their own protocol may ignore it)."""

    input: str = "<f4"
    output: str = "<f4"


def runner_for(board):
    """The runner module of `board`, or None when it names no simulator."""
    name = board.get("simulator")
    if not name:
        return None
    try:
        return importlib.import_module(RUNNERS[name])
    except KeyError:
        raise NNBuildError(f"board '{board['name']}' names unknown simulator '{name}' "
                           f"(known: {', '.join(sorted(RUNNERS))})") from None

def check_program_parts(board):
    """What the board's runner links into a check program besides the model and its main (a
    qemu-system-arm machine: reset code and linker script): {"sources": [...], "ldscript": path}, or {}."""
    runner = runner_for(board)
    parts = getattr(runner, "check_program", None) if runner is not None else None
    return parts(board) if parts else {}


def script_option(ldscript):
    """build_executable's keyword for a linker script, only when there is one (not every compiler
    family takes it)."""
    return {"ldscript": ldscript} if ldscript else {}


CHECK_MAIN = Path(__file__).with_name("check_main.c")
SIMAVR_RUN_SRC = Path(__file__).with_name("simavr_run.c")

#: Firmware symbol contract of check_main.c on AVR (see simavr.run_cases).
READY_SYMBOL = "nnbuild_ready"
IN_SYMBOL = "nnbuild_in"
OUT_SYMBOL = "nnbuild_out"


def check_main_defines(header, infer, n_in, n_out, *, several_io=False):
    """The -D flags that specialise check_main.c to one model, so every caller spells them alike;
    `several_io`: the model's header defines <INFER>_INPUT_COUNT and <INFER>_INFER_ARGS (flat
    vectors split into one argument per input and output)."""
    flags = [
        f'-DNN_HEADER="{header}"',
        f"-DNN_INFER={infer}",
        f"-DNN_IN={int(n_in)}",
        f"-DNN_OUT={int(n_out)}",
    ]
    if several_io:
        guard = infer[:-len("_infer")].upper()
        flags += [f"-DNN_INPUT_COUNT={guard}_INPUT_COUNT", f"-DNN_ARGS={guard}_INFER_ARGS"]
    return flags
