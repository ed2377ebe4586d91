"""Run a host-built check firmware (check_main.c) on a batch of input vectors.

The wire format is raw little-endian float32 both ways, so outputs compare bit-exactly.
"""

import signal
import subprocess

import numpy as np

from nnbuild.errors import NNBuildError


def as_cases(inputs, path=None):
    """Inputs as a C-contiguous little-endian float32 [N, n_in] array; refuse silent reshapes."""
    arr = np.asarray(inputs)
    if arr.ndim != 2:
        raise NNBuildError(f"inputs must be 2-D [cases, n_in], got shape {arr.shape}", path=path)
    if arr.dtype != np.float32:
        raise NNBuildError(f"inputs must be float32, got {arr.dtype}", path=path)
    return np.ascontiguousarray(arr, dtype="<f4")


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


def run_cases(executable, inputs, n_out, *, timeout=60.0, prefix=()):
    """Feed every case through `executable` in one process; returns float32 [N, n_out].

    `prefix` runs it under an emulator (e.g. ["qemu-arm"] for an arm-none-eabi rdimon build)."""
    cases = as_cases(inputs, path=executable)
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
    want = 4 * n_out * len(cases)
    if len(proc.stdout) != want:
        raise NNBuildError(f"wrote {len(proc.stdout)} bytes, expected {want} "
                           f"({len(cases)} cases x {n_out} float32)", path=executable)
    return np.frombuffer(proc.stdout, dtype="<f4").astype(np.float32).reshape(len(cases), n_out)
