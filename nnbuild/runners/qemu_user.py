"""The `qemu-arm` runner: a cross-built check program run by QEMU's user-mode emulator, with the
host's pipes (newlib + semihosting, see toolchains/arm.json). Outputs only: QEMU counts no cycles."""

from nnbuild.runners import native

PROGRAM_SUFFIX = ".elf"
MEASURES_CYCLES = False
NEEDS_HARNESS = False
BOARD_NEEDS = ()
#: the whole batch runs in one emulated process; instruction-by-instruction emulation is slow
TIMEOUT_S = 600.0


def label(board):
    return board["simulator"]


def run(board, program, x, n_out, *, io, entry=None, harness=None):
    outputs = native.run_cases(program, native.np.asarray(x, dtype=io.input), n_out, prefix=[board["simulator"]],
                               timeout=TIMEOUT_S, dtype=io.input, out_dtype=io.output)
    return outputs, None
