"""Runs of a Tangled Program Graph's check program (tpg_check_main.c): observations in, actions out.

Host (and user-mode emulators): one process for every observation, IEEE binary64 in, int32 out, so
the C code sees exactly the doubles the reference interpreter sees. AVR under simavr (avr-gcc's
double is 32 bits): the observations are rounded to float32 (exact for the byte-valued Atari
screens), the action id comes back as a float (exact), and each inference's cycles are measured.
"""

import subprocess
from pathlib import Path

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.runners.native import describe_exit

TPG_CHECK_MAIN = Path(__file__).with_name("tpg_check_main.c")


def check_main_defines(name, n_in):
    """-D flags binding tpg_check_main.c to the generated header of model `name`."""
    return [f'-DNN_HEADER="{name}.h"', f"-DNN_INFER_FLAT={name.upper()}_INFER_FLAT", f"-DNN_IN={int(n_in)}"]


def as_observations(x, path=None):
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise NNBuildError(f"observations must be 2-D [cases, inputs], got shape {arr.shape}", path=path)
    return np.ascontiguousarray(arr, dtype="<f8")


def run_native(executable, x, *, timeout=600.0, prefix=()):
    """Action ids (int64 [N]) of a host-built check program for observations x [N, inputs]."""
    obs = as_observations(x, path=executable)
    try:
        proc = subprocess.run([*prefix, str(executable)], input=obs.tobytes(), capture_output=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise NNBuildError("check executable not found", path=executable) from None
    except subprocess.TimeoutExpired:
        raise NNBuildError(f"timed out after {timeout} s on {len(obs)} observations", path=executable) from None
    if proc.returncode != 0:
        raise NNBuildError(describe_exit(proc.returncode, proc.stderr), path=executable)
    if len(proc.stdout) != 4 * len(obs):
        raise NNBuildError(f"wrote {len(proc.stdout)} bytes, expected {4 * len(obs)} "
                           f"({len(obs)} int32 actions)", path=executable)
    return np.frombuffer(proc.stdout, dtype="<i4").astype(np.int64)


def run_simavr(elf, x, *, entry_symbol, mcu, freq, harness=None, nm="avr-nm", timeout=3600.0,
               with_stack=False):
    """(action ids int64 [N], cycles int64 [N]) of an AVR check firmware under simavr (+ stack bytes
    [N] with with_stack=True)."""
    from nnbuild.runners import simavr
    obs = np.asarray(x, dtype=np.float64)
    x32 = np.ascontiguousarray(obs, dtype=np.float32)
    result = simavr.run_cases(elf, x32, 1, entry_symbol=entry_symbol, mcu=mcu, freq=freq, harness=harness,
                              nm=nm, timeout=timeout, **({"with_stack": True} if with_stack else {}))
    out = result[0][:, 0]
    if not np.all(np.isfinite(out)) or not np.all(out == np.round(out)):
        raise NNBuildError("the AVR check firmware returned a non-integer action", path=elf)
    return (out.astype(np.int64),) + tuple(result[1:])
