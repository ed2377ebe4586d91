"""Operand facts of float32 multiply-accumulates, proved from the weights, for soft-float WCET.

avr-libc's __mulsf3 runs a normalisation loop (up to 24 shifts) only when a factor is subnormal
and a denormalisation loop (up to 24 shifts) only when the product underflows; __addsf3 runs its
normalisation loop (up to 23 shifts) only when it subtracts. The MLP shape on AVR removes all
three from every multiply-accumulate, and these facts say why (the analyser's table entries are
conditioned on them, nnbuild/wcet/avr_libloops.json):

* weights: every weight of the layer is zero or normal (checked here, bit by bit);
* activations: before a layer runs, each input whose biased exponent is below `keep_exp` is
  flushed to a zero of its sign, `keep_exp = max(1, 127 - e_min)` with e_min the smallest biased
  exponent of the layer's non-zero weights; so non-zero factors are normal and have
  eW + eX >= 127: __mulsf3's exponent sum eW + eX - 127 is never negative and its
  denormalisation loop does not run (a sum of exactly 0 packs a subnormal product without a
  loop). The flush changes a neuron's sum by at most
  sum_i |w_i| * 2^(keep_exp - 127) (`flush_error`), far below float32's rounding of any sum
  that is not itself near the smallest normal;
* additions: the bias and the products with a clear sign bit go to one accumulator, the others
  are subtracted from another (each starts at +0.0 or at the bias' magnitude, by its sign bit):
  each addition adds two values of clear sign; one subtraction per neuron joins the two.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

#: IEEE binary32 exponent bias
BIAS = 127
#: value-fact tags (flow facts "values") the analyser's table entries name
MUL_TAGS = ("__mulsf3:AB.normal", "__mulsf3:e.sum>=127")
ADD_TAGS = ("__addsf3x:same-sign",)
#: nn_tanh's x + x (both operands equal: no exponent alignment)
EQUAL_TAGS = ("__addsf3x:equal",)
#: nn_tanh's (e - 1) / (e + 1) and expf(2x) (prelude.c.j2 emits these)
DIV_TAGS = ("__divsf3:A.normal", "__divsf3:B.normal", "__divsf3:eA-eB>=-125")
EXP_TAGS = ("exp:|x|<18",)
#: a multiply one of whose factors is a zero-or-normal weight (the other may be anything): the
#: soft-float multiply normalises at most one subnormal factor (ARM and Thumb-1 libgcc's
#: __aeabi_fmul; arm_libloops.json and thumb2_libloops.json "paths")
ONE_NORMAL_TAGS = ("fmul:one.normal",)
#: a multiply of a zero-or-normal weight by an output of nn_tanh or nn_sigmoid: no factor is subnormal
#: (`not_subnormal_output`), so the multiply normalises none
NO_SUBNORMAL_TAGS = ("fmul:no.subnormal",)
#: ... and the product of the two is zero, NaN or normal (no underflow, no overflow): the weights'
#: smallest non-zero magnitude is at least 2^-68 (`normal_products`)
NORMAL_PRODUCT_TAGS = ("fmul:normal.product",)
#: an addition of two values with a clear sign bit, not both subnormal (a split layer's pos += p and
#: neg -= p, p normal, zero, inf or NaN: mac_facts(normal_products=True)): libgcc's __aeabi_fadd
#: adds the significands and never normalises leftwards (arm_libloops.json and thumb2_libloops.json "paths")
FADD_SAME_SIGN_TAGS = ("fadd:same-sign",)
#: a multiply of two finite factors: libgcc's __aeabi_fmul never runs its inf/NaN cases (newlib expf's)
FMUL_FINITE_TAGS = ("fmul:finite",)
#: a soft-float split layer's multiply whose weights are all zero or normal below 1 in magnitude
#: (`MacFacts.in_range`): two normal factors have 128 <= eW + eX <= 126 + 254 = 380, so their product is
#: normal before and after rounding (2^-126 <= |w x| < |x|); a zero, inf or NaN factor is a special case
#: of the routine. libgcc's ARM __aeabi_fmul never takes its underflow/overflow block (arm_libloops.json "paths")
FMUL_IN_RANGE_TAGS = ("fmul:in.range",)
#: an addition neither of whose operands is subnormal (or one is, and the other is at least 2^-101 in
#: magnitude): libgcc's __aeabi_fadd never rescales a denormal operand (Lad_d; arm_libloops.json "paths").
#: A split layer's sums with zero-or-normal biases and normal products (`split_add_tags`), newlib expf's
FADD_NO_SUBNORMAL_TAGS = ("fadd:no.subnormal",)
#: a division whose operands are zero, normal, inf or NaN, never subnormal (nn_sigmoid's 1 / (1 + e))
FDIV_NO_SUBNORMAL_TAGS = ("fdiv:no.subnormal",)
#: nn_sigmoid's expf(-x) for |x| < 40 and its 1.0f / (1.0f + e)
SIGMOID_EXP_TAGS = ("exp:|x|<40",)
#: a TPG's cos argument below 1024 in magnitude (nnbuild/codegen/tpg_lower.py Guard)
TPG_COS_TAGS = ("cos:|x|<1024",)
#: a TPG table helper's integer test `(double)(int)x == x` after testing -255 <= x <= 255: the
#: truncation's argument and the converted int are below 256 in magnitude (nnbuild/codegen/tpg_lower.py)
TPG_INT_TAGS = {"fix": "__fixsfsi:|x|<256", "float": "__floatsisf:|k|<256"}
TPG_INT_LIMIT = 255
#: tags only value facts give (__divsf3:A.normal also comes from constant operands)
#: Gravity's SGD update w - p on AVR: __subsf3 only where it needs at most one normalisation shift
#: (nnbuild/codegen/gravity.py emit_fact_subtract)
NO_CANCEL_TAGS = ("__addsf3x:no-cancel",)
#: ... and the CNN shapes' nn_join (pos - neg of a split sum on AVR): the same tag, the same claim
VALUE_ONLY_TAGS = frozenset(MUL_TAGS + ADD_TAGS + EQUAL_TAGS + DIV_TAGS[1:] + EXP_TAGS + SIGMOID_EXP_TAGS
                            + TPG_COS_TAGS + tuple(TPG_INT_TAGS.values()) + NO_CANCEL_TAGS)
#: the generated code that writes value facts, by the name avr_libloops.json's "emitted_by" gives it
#: (every entry under a VALUE_ONLY_TAGS tag names its writers there, so a test traces each entry
#: on the code that gives its fact, and a new kind's tag is filed under that kind, not by exclusion)
FACT_CODE = {
    "mlp": "nnbuild/codegen/mlp.py: a split layer's products and sums (float32 MLP shape)",
    "v1": "nnbuild/codegen/v1.py: a split layer's products and sums",
    "v2": "nnbuild/codegen/v2.py: a split layer's products and sums",
    "v3": "nnbuild/codegen/v3.py: a split layer's products and sums",
    "nn_join": "nnbuild/codegen/cnn.py: the CNN shapes' pos - neg of a split sum",
    "nn_tanh": "prelude.c.j2: float nn_tanh's x + x, expf(2x), e + 1 and (e - 1) / (e + 1)",
    "nn_sigmoid": "prelude.c.j2: float nn_sigmoid's expf(-x)",
    "gravity": "nnbuild/codegen/gravity.py: Gravity's activate and SGD update",
    "tpg_lower": "nnbuild/codegen/tpg_lower.py: a TPG's guarded cos and its table helpers' integer test",
}


@dataclass(frozen=True)
class MacFacts:
    """What the weights of one Dense layer prove about its multiply-accumulates."""

    #: inputs with a biased exponent below this are flushed to zero before the layer runs
    keep_exp: int
    #: smallest biased exponent of the non-zero weights (None: every weight is zero)
    weight_exp_min: Optional[int]
    #: largest change of any neuron's sum the flush can cause (sum_i |w_i| * 2^(keep_exp - 127))
    flush_error: float
    #: every weight is finite and zero or normal: only then are the multiply facts claimed
    weights_normal: bool = True
    #: the flush makes eW + eX at least this for non-zero factors (128 with normal_products:
    #: every product of normal factors is then at least 2^-126, normal or infinite)
    exp_sum_min: int = BIAS
    #: largest biased exponent of the non-zero weights (None: every weight is zero)
    weight_exp_max: Optional[int] = None

    @property
    def in_range(self) -> bool:
        """Products of non-zero finite factors are normal (FMUL_IN_RANGE_TAGS): every product is at
        least 2^-126 (exp_sum_min 128) and every weight below 1 (biased exponent <= 126)."""
        return (self.weights_normal and self.exp_sum_min >= BIAS + 1
                and (self.weight_exp_max is None or self.weight_exp_max <= BIAS - 1))

    def why(self):
        low = "no non-zero weight" if self.weight_exp_min is None else \
            f"smallest non-zero weight exponent {self.weight_exp_min - BIAS}"
        high = (f"; every weight below 1 (largest exponent {self.weight_exp_max - BIAS}) and finite inputs have "
                f"eX <= 254, so eW + eX <= 380: the product is normal (2^-126 <= |w x| < |x|)"
                if self.in_range and self.weight_exp_max is not None else "")
        return (f"weights zero or normal ({low}); inputs with biased exponent < {self.keep_exp} "
                f"(|x| < 2^{self.keep_exp - BIAS}) flushed to zero before the layer, so non-zero "
                f"factors are normal with eW + eX >= {self.exp_sum_min} (sum changed by <= {self.flush_error:.3g})"
                + high)


def biased_exponents(values):
    """Biased exponent field of each float32 value."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits >> 23) & 0xFF).astype(np.int64)


def mac_facts(kernel, normal_products=False, join=False):
    """MacFacts for a [inputs, units] float32 kernel. A subnormal or non-finite weight leaves
    weights_normal False (nothing is claimed about the products; subnormal inputs are still
    flushed, keep_exp 1, so the code does not depend on the weights). `normal_products` (ARM's
    split layers): flush one binade more, so that no product of non-zero factors is subnormal and
    libgcc's __aeabi_fadd never adds two subnormals in a split sum (FADD_SAME_SIGN_TAGS).
    `join` (AVR's nn_join ends the sums): flush JOIN_EXP binades more, so that every non-zero
    product has a biased exponent >= JOIN_EXP (join_holds)."""
    w = np.asarray(kernel, dtype=np.float32)
    nonzero = w[(w != 0) & np.isfinite(w)]
    exps = biased_exponents(nonzero)
    normal = bool(np.all(np.isfinite(w)) and not np.any(exps == 0))
    e_min = int(exps[exps > 0].min()) if np.any(exps > 0) else None
    e_max = int(exps[exps > 0].max()) if np.any(exps > 0) else None
    floor = BIAS + JOIN_EXP if join else BIAS + 1 if normal_products else BIAS
    keep = max(1, floor - e_min) if normal and e_min is not None else 1
    magnitudes = np.abs(np.where(np.isfinite(w), w, 0).astype(np.float64))
    per_unit = magnitudes.sum(axis=0) if w.ndim == 2 else magnitudes
    flush_error = float(per_unit.max(initial=0.0)) * 2.0 ** (keep - BIAS)
    return MacFacts(keep, e_min, flush_error, normal, floor, e_max)


#: AVR's nn_join (cnn_common.c.j2) subtracts exactly in integers where both of pos and neg have a
#: biased exponent >= JOIN_EXP: its results are then normal (>= 2^(JOIN_EXP - 150) = 2^-125)
JOIN_EXP = 25
#: the join's flush threshold is used only up to this keep_exp (inputs below 2^-60 at most become
#: zero); a layer with weights below about 2^-42 keeps the plain pos - neg
JOIN_KEEP_MAX = BIAS - 60


def join_holds(facts, bias):
    """Whether nn_join's value fact holds for a split layer with these MacFacts (from
    mac_facts(join=True)) and `bias` (floats or None): every weight zero or normal, non-zero
    inputs (after the flush) of biased exponent >= keep_exp, so every non-zero product is
    normal with a biased exponent >= eW + eX - 127 >= JOIN_EXP; every bias zero or of biased
    exponent >= JOIN_EXP. Then pos and neg, sums of such values of one sign, are zero, inf, NaN
    or >= 2^(JOIN_EXP - 127); and the flush stays below 2^-60 (JOIN_KEEP_MAX)."""
    if not facts.weights_normal or facts.keep_exp > JOIN_KEEP_MAX:
        return False
    b = np.asarray([] if bias is None else bias, dtype=np.float32)
    return bool(np.all(np.isfinite(b)) and np.all((b == 0) | (biased_exponents(b) >= JOIN_EXP)))


def flushed(x, keep_exp):
    """numpy model of the generated flush: values with a biased exponent below keep_exp become
    a zero of their sign (NaN and infinity keep theirs: exponent 255)."""
    x = np.array(x, dtype=np.float32)
    bits = x.view(np.uint32)
    small = biased_exponents(x) < keep_exp
    bits[small] &= np.uint32(0x80000000)
    return bits.view(np.float32)


def zero_or_normal(kernel) -> bool:
    """Every value is finite and zero or normal as float32 (no subnormal, inf or NaN)."""
    w = np.asarray(kernel, dtype=np.float32)
    return bool(np.all(np.isfinite(w)) and not np.any((biased_exponents(w) == 0) & (w != 0)))


#: float32 activations (prelude.c.j2) whose every output is zero, normal or NaN, never subnormal
NOT_SUBNORMAL_ACTIVATIONS = ("tanh", "sigmoid")


def not_subnormal_output(activation):
    """The activation's name if none of its float32 outputs is subnormal, else None.

    nn_tanh: +-1 for |x| >= 9; else e = expf(2x) is a float in [0, 2^26], e - 1 is 0 or at least
    2^-24 in magnitude (exact for e in [0.5, 2], where e is a multiple of 2^-24; |e - 1| >= 0.5
    elsewhere), 1 <= e + 1 < 2^27, so (e - 1) / (e + 1) is 0 or at least 2^-51 in magnitude (the
    quotient of two floats rounds to a float at least as large as the smallest normal above it).
    nn_sigmoid: 1 or 0 for |x| >= 40; else 1 / (1 + expf(-x)) with 1 <= 1 + e < 2^58: at least
    2^-58. A NaN input gives NaN. Both are at most 1 in magnitude."""
    return activation if activation in NOT_SUBNORMAL_ACTIVATIONS else None


#: |nn_tanh(x)| and |nn_sigmoid(x)| are 0 or at least this (not_subnormal_output)
SMALLEST_ACTIVATION = 2.0 ** -58


def normal_products(kernel) -> bool:
    """Every product of a weight (zero or normal) and a zero, NaN or nn_tanh / nn_sigmoid output
    (|x| in [2^-58, 1]) is zero, NaN or normal: the smallest non-zero |w| is at least 2^-68, so
    |w x| >= 2^-126 before rounding, and |w x| <= |w| stays finite."""
    w = np.abs(np.asarray(kernel, dtype=np.float32).astype(np.float64))
    nonzero = w[w != 0]
    return zero_or_normal(kernel) and bool(nonzero.size == 0 or nonzero.min() * SMALLEST_ACTIVATION >= 2.0 ** -126)
#: __mulsf3 context tags about one factor (avr_paths.operand_tags gives them to constants)
WEIGHT_EXP_TAGS = {"__mulsf3:C.e>=126": 126, "__mulsf3:C.e>=122": 122, "__mulsf3:C.e>=118": 118}


def weight_tags(weights):
    """(__mulsf3 tags, why) that every product with one of `weights` as a factor may carry, the code
    unchanged: each weight zero (__mulsf3 leaves before its loops) or normal, and the biased
    exponents of the non-zero ones all <= 128 ("C.e<=128": a subnormal other factor normalises in
    <= 2 passes) or all >= 118/122/126 (the exponent sum is >= -8/-4/0: a short or no
    denormalisation). Nothing for a subnormal or non-finite weight, or no non-zero weight."""
    w = np.asarray(weights, dtype=np.float32).ravel()
    if w.size == 0 or not np.all(np.isfinite(w)):
        return (), None
    exps = biased_exponents(w[w != 0])
    if exps.size == 0 or np.any(exps == 0):
        return (), None
    lo, hi = int(exps.min()), int(exps.max())
    tags = (["__mulsf3:C.e<=128"] if hi <= 128 else []) + [t for t, n in WEIGHT_EXP_TAGS.items() if lo >= n]
    why = (f"the weight factor is zero or normal with biased exponent in [{lo}, {hi}] (every weight of the layer, "
           "checked bit by bit)")
    return tuple(tags), (why if tags else None)
