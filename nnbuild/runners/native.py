"""Run a host-built check firmware (check_main.c) on a batch of input vectors: the `native` runner.

The wire format is raw little-endian float32 both ways by default (outputs compare bit-exactly);
a kind's check main may use others (CheckIO: a TPG reads binary64 and writes int32).
"""

import signal
import subprocess

import numpy as np

from nnbuild.errors import NNBuildError


PROGRAM_SUFFIX = ""
#: the board is the build machine itself: its run is the host run
RUNS_ON_HOST = True
MEASURES_CYCLES = False
NEEDS_HARNESS = False
BOARD_NEEDS = ()


def label(board):
    return board["name"]


def run(board, program, x, n_out, *, io, entry=None, harness=None):
    """(outputs [N, n_out], None): no cycles on the host."""
    return run_cases(program, np.asarray(x, dtype=io.input), n_out, dtype=io.input, out_dtype=io.output), None


def as_cases(inputs, path=None, dtype="<f4"):
    """Inputs as a C-contiguous little-endian [N, n_in] array of `dtype`; refuse silent reshapes."""
    arr = np.asarray(inputs)
    if arr.ndim != 2:
        raise NNBuildError(f"inputs must be 2-D [cases, n_in], got shape {arr.shape}", path=path)
    if arr.dtype != np.dtype(dtype).newbyteorder("="):
        raise NNBuildError(f"inputs must be {np.dtype(dtype).name}, got {arr.dtype}", path=path)
    return np.ascontiguousarray(arr, dtype=dtype)


def describe_exit(returncode, stderr):
    """One line for a failed process: status or signal, plus its last stderr line."""
    if returncode < 0:
        try:
            what = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            what = f"killed by signal {-returncode}"
    else:
        what = f"exited with status {returncode}"
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return f"{what}: {lines[-1]}" if lines else what


def run_cases(executable, inputs, n_out, *, timeout=60.0, prefix=(), dtype="<f4", out_dtype="<f4"):
    """Feed every case through `executable` in one process; returns [N, n_out] (float32 by default).

    `prefix` runs it under an emulator (e.g. ["qemu-arm"] for an arm-none-eabi rdimon build)."""
    cases = as_cases(inputs, path=executable, dtype=dtype)
    n_out = int(n_out)
    try:
        proc = subprocess.run([*prefix, str(executable)], input=cases.tobytes(), capture_output=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise NNBuildError("check executable not found", path=executable) from None
    except PermissionError:
        raise NNBuildError("check executable is not executable", path=executable) from None
    except subprocess.TimeoutExpired:
        raise NNBuildError(f"timed out after {timeout} s on {len(cases)} cases",
                           path=executable) from None
    if proc.returncode != 0:
        raise NNBuildError(describe_exit(proc.returncode, proc.stderr), path=executable)
    out = np.dtype(out_dtype)
    want = out.itemsize * n_out * len(cases)
    if len(proc.stdout) != want:
        raise NNBuildError(f"wrote {len(proc.stdout)} bytes, expected {want} "
                           f"({len(cases)} cases x {n_out} {out.name})", path=executable)
    return np.frombuffer(proc.stdout, dtype=out).astype(out.newbyteorder("=")).reshape(len(cases), n_out)
