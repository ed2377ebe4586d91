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

from nnbuild.numerics.formats import (FIXED_PRECISIONS, FLOAT_PRECISIONS, GENERIC_FIXED, Z_FRAC, Z_LIMIT,  # noqa: F401
                                      Tensor, check_precision, frac_for, is_fixed, round_half_away, to_int)
from nnbuild.numerics.plan import QLayer, QPlan, fuse_activations, qlayer_interval, quantize  # noqa: F401
from nnbuild.numerics.proof import Policy, activation_interval  # noqa: F401
from nnbuild.numerics.tables import (EXP_POINTS, EXP_STEP_BITS, TANH_POINTS, TANH_STEP_BITS,  # noqa: F401
                                     exp_table, tanh_table)
