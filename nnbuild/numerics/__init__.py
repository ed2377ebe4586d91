"""Numerics: number formats, fixed-point format planning with its interval-arithmetic overflow
proofs, activation tables, and the bit-exact model of the generated fixed-point C.

Below the IR in the layering: the IR, the code generators and the checks import it; it imports no
other nnbuild stage (layers are read by duck type: `kind`, `kernel`, `bias`, `activation`).

- formats: precision names (float32, float64, q16, q16-acc32, q8, fix16, fixedW.F), tensor formats,
  rounding and integer conversion;
- plan: `quantize(model, precision, input_range)` -> QPlan, the formats and the proof per layer;
- proof: what plan and graph_plan share (format policy per precision, activation intervals,
  the int32-accumulator weight search, the proof record);
- tables: tanh and exp tables of the table activations;
- bitexact: `run(plan, x)`, exactly what the generated C computes;
- graph_plan, graph_bitexact: the same for the CNN shapes' graphs (`quantize_graph`, `run_graph`).
"""

import importlib

from nnbuild.numerics.formats import (FIXED_PRECISIONS, FLOAT_PRECISIONS, GENERIC_FIXED, Z_FRAC, Z_LIMIT,  # noqa: F401
                                      Tensor, check_precision, frac_for, is_fixed, round_half_away, to_int)

#: names the package offers from its heavier modules (numpy), imported on first use: reading a
#: precision name (the CLI, option parsing) loads formats only
LAZY = {"QLayer": "plan", "QPlan": "plan", "fuse_activations": "plan", "qlayer_interval": "plan",
        "quantize": "plan", "Policy": "proof", "activation_interval": "proof",
        "EXP_POINTS": "tables", "EXP_STEP_BITS": "tables", "TANH_POINTS": "tables",
        "TANH_STEP_BITS": "tables", "exp_table": "tables", "tanh_table": "tables"}


def __getattr__(name):
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(LAZY))
