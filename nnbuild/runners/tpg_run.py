"""The check program of a Tangled Program Graph (tpg_check_main.c): observations in, actions out.

On a host pipe it reads IEEE binary64 and writes int32 (kinds.tpg.IO, run by any runner), so the C
code sees exactly the doubles the reference interpreter sees. Under simavr (avr-gcc's double is 32
bits) the observations are rounded to float32 (exact for the byte-valued Atari screens) and the
action id comes back as a float (exact); `run_simavr` adds the stack measurement the tests use.
"""

from pathlib import Path

import numpy as np

from nnbuild.errors import NNBuildError

TPG_CHECK_MAIN = Path(__file__).with_name("tpg_check_main.c")


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
