"""AVR instruction timing, keyed by core family (docs/wcet.md section 3).

Only the AVRe core with a 16-bit PC (ATmega1284 and every part with <= 128 KB flash) is verified
against simavr. Other families raise NNBuildError instead of guessing.
Conditional branches and skips are charged their not-taken/no-skip cost here; the extra cycles
of the taken branch or the skip are charged on the CFG edge (see `branch_taken_extra`, `skip_extra`).
"""

from nnbuild.errors import NNBuildError

#: board "timing_model" value -> core family key of CYCLES
TIMING_MODELS = {"avre-16bit-pc": "avre16"}

_AVRE16 = {
    # word arithmetic, multiply
    "adiw": 2, "sbiw": 2, "mul": 2, "muls": 2, "mulsu": 2, "fmul": 2, "fmuls": 2, "fmulsu": 2,
    # data memory
    "ld": 2, "ldd": 2, "lds": 2, "st": 2, "std": 2, "sts": 2, "push": 2, "pop": 2,
    # I/O bit
    "sbi": 2, "cbi": 2,
    # program memory
    "lpm": 3, "elpm": 3,
    # jumps, calls, returns (16-bit PC)
    "rjmp": 2, "ijmp": 2, "jmp": 3, "rcall": 3, "icall": 3, "call": 4, "ret": 4, "reti": 4,
}

#: core family -> {mnemonic: cycles}; anything absent costs 1 cycle (ALU, moves, bit ops, branch/skip not taken)
CYCLES = {"avre16": _AVRE16}

#: instructions this core does not have or that the model refuses to time (SPM: flash write, excluded)
_UNTIMED = {"avre16": {"eijmp", "eicall", "spm", "des", "xch", "las", "lac", "lat"}}

SKIPS = frozenset({"cpse", "sbrc", "sbrs", "sbic", "sbis"})
RETURNS = frozenset({"ret", "reti"})


def family(board):
    """The core family of a board dict (its `timing_model`), or NNBuildError for an unknown model."""
    model = (board or {}).get("timing_model", "avre-16bit-pc")
    try:
        return TIMING_MODELS[model]
    except KeyError:
        raise NNBuildError(f"builtin-avr: no cycle table for timing_model '{model}' "
                           f"(known: {', '.join(sorted(TIMING_MODELS))})")


def cycles(fam, mnemonic, where=""):
    """Base cycles of one instruction (branch not taken, skip not skipping)."""
    if mnemonic in _UNTIMED[fam]:
        raise NNBuildError(f"builtin-avr: instruction '{mnemonic}' has no timing on {fam}{where}")
    return CYCLES[fam].get(mnemonic, 1)


def is_cond_branch(mnemonic):
    """BRxx (including brbs/brbc): 1 cycle not taken, 2 taken."""
    return mnemonic.startswith("br") and mnemonic != "break"


def branch_taken_extra(fam):
    """Extra cycles of a taken conditional branch."""
    return 1


def skip_extra(fam, skipped_size):
    """Extra cycles of a skip over an instruction of `skipped_size` bytes (2 -> +1, 4 -> +2)."""
    return 1 if skipped_size == 2 else 2
