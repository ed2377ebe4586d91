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
#: nn_sigmoid's expf(-x) for |x| < 40 and its 1.0f / (1.0f + e)
SIGMOID_EXP_TAGS = ("exp:|x|<40",)
#: tags only value facts give (__divsf3:A.normal also comes from constant operands)
VALUE_ONLY_TAGS = frozenset(MUL_TAGS + ADD_TAGS + EQUAL_TAGS + DIV_TAGS[1:] + EXP_TAGS + SIGMOID_EXP_TAGS)


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

    def why(self):
        low = "no non-zero weight" if self.weight_exp_min is None else \
            f"smallest non-zero weight exponent {self.weight_exp_min - BIAS}"
        return (f"weights zero or normal ({low}); inputs with biased exponent < {self.keep_exp} "
                f"(|x| < 2^{self.keep_exp - BIAS}) flushed to zero before the layer, so non-zero "
                f"factors are normal with eW + eX >= 127 (sum changed by <= {self.flush_error:.3g})")


def biased_exponents(values):
    """Biased exponent field of each float32 value."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits >> 23) & 0xFF).astype(np.int64)


def mac_facts(kernel):
    """MacFacts for a [inputs, units] float32 kernel. A subnormal or non-finite weight leaves
    weights_normal False (nothing is claimed about the products; subnormal inputs are still
    flushed, keep_exp 1, so the code does not depend on the weights)."""
    w = np.asarray(kernel, dtype=np.float32)
    nonzero = w[(w != 0) & np.isfinite(w)]
    exps = biased_exponents(nonzero)
    normal = bool(np.all(np.isfinite(w)) and not np.any(exps == 0))
    e_min = int(exps[exps > 0].min()) if np.any(exps > 0) else None
    keep = max(1, BIAS - e_min) if normal and e_min is not None else 1
    magnitudes = np.abs(np.where(np.isfinite(w), w, 0).astype(np.float64))
    per_unit = magnitudes.sum(axis=0) if w.ndim == 2 else magnitudes
    flush_error = float(per_unit.max(initial=0.0)) * 2.0 ** (keep - BIAS)
    return MacFacts(keep, e_min, flush_error, normal)


def flushed(x, keep_exp):
    """numpy model of the generated flush: values with a biased exponent below keep_exp become
    a zero of their sign (NaN and infinity keep theirs: exponent 255)."""
    x = np.array(x, dtype=np.float32)
    bits = x.view(np.uint32)
    small = biased_exponents(x) < keep_exp
    bits[small] &= np.uint32(0x80000000)
    return bits.view(np.float32)


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
