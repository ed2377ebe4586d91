"""Measured runs of a generated inference function: natively on the host, and
cycle-exact on AVR through libsimavr.

Submodules are not imported here, so `python -m nnbuild.runners.simavr` runs cleanly:
- `nnbuild.runners.native`: run_cases(executable, inputs, n_out)
- `nnbuild.runners.simavr`: build_harness, symbol_addresses, run_cases, measure_calls

The C sources ship beside this file: CHECK_MAIN (the generic check firmware main) and
SIMAVR_RUN_SRC (the libsimavr harness).
"""

from pathlib import Path

CHECK_MAIN = Path(__file__).with_name("check_main.c")
SIMAVR_RUN_SRC = Path(__file__).with_name("simavr_run.c")

#: Firmware symbol contract of check_main.c on AVR (see simavr.run_cases).
READY_SYMBOL = "nnbuild_ready"
IN_SYMBOL = "nnbuild_in"
OUT_SYMBOL = "nnbuild_out"


def check_main_defines(header, infer, n_in, n_out):
    """The -D flags that specialise check_main.c to one model, so every caller spells them alike."""
    return [
        f'-DNN_HEADER="{header}"',
        f"-DNN_INFER={infer}",
        f"-DNN_IN={int(n_in)}",
        f"-DNN_OUT={int(n_out)}",
    ]
