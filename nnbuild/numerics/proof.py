"""What the two fixed-point plans share (plan: MLPs, graph_plan: the CNN graphs): the format
policy of each precision, the interval arithmetic of affine layers' parameters and activations,
the weight-format search that keeps an accumulator within int32, and the proof record's frame.
"""

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.numerics.formats import GENERIC_FIXED, TABLE_ACTIVATIONS, Tensor, frac_for


class Policy:
    """How formats are chosen for one precision name."""

    def __init__(self, precision):
        self.precision = precision
        generic = GENERIC_FIXED.match(precision)
        if generic:
            self.whole, self.frac = int(generic.group(1)), int(generic.group(2))
            total = self.whole + self.frac
            self.bits = next((b for b in (8, 16, 32) if b >= total), None)
            if self.bits is None or self.whole < 1:
                raise NNBuildError(f"precision '{precision}': W + F must be 1..32 bits with W >= 1 (sign included)")
        elif precision == "fix16":
            self.whole, self.frac, self.bits = 16, 16, 32
        else:
            self.whole, self.frac, self.bits = None, None, 16
        #: weights are stored in this many bits (q8: 8; else the activations' width)
        self.weight_bits = 8 if precision == "q8" else self.bits
        #: the accumulator must be proven to fit int32 (weight fraction bits are given up until it does)
        self.acc32_only = precision in ("q16-acc32", "q8")

    def tensor(self, bound, what, bits=None):
        """Per-tensor format (q16, q8) or the uniform one (fix16, fixedW.F), checked against `bound`."""
        if self.frac is None:
            return Tensor(frac_for(bound, bits or self.bits), bits or self.bits)
        t = Tensor(self.frac, self.bits)
        if bound * 2.0 ** t.frac + 1 > t.qmax:
            raise NNBuildError(f"values up to {bound:.4g} do not fit {self.precision} "
                               f"(max {t.qmax / 2.0 ** t.frac:.4g}); use more whole bits", item=what)
        return t

    def input_tensor(self, bound):
        return self.tensor(bound, "model input")

    def output_tensor(self, act, bound, what):
        """A layer's output format: the table activations' [-1, 1] at Q(bits - 2) (1.0 is
        representable) for the per-tensor precisions, else as `tensor`."""
        if self.frac is not None:
            return self.tensor(bound, f"{what} output")
        if act in TABLE_ACTIVATIONS:
            return Tensor(self.bits - 2, self.bits)
        return Tensor(frac_for(bound, self.bits), self.bits)

    def fit_accumulator(self, weight, attempt, what):
        """attempt(weight format) -> something with `acc_bits`; where the precision wants an int32
        accumulator, weight fraction bits are given up until it is one. (attempt's last result,
        the note saying what was given up)."""
        notes = []
        while True:
            result = attempt(weight)
            if not self.acc32_only or result.acc_bits == 32:
                return result, notes
            if weight.frac <= 1:
                raise NNBuildError("no weight format keeps the accumulator within int32", item=what)
            weight = Tensor(weight.frac - 1, weight.bits)
            notes = [f"weight fraction bits lowered to {weight.frac} so the accumulator fits int32"]


def start(precision, input_range):
    """The policy, the declared input range as floats, the input format and the one documented
    saturation (the clamp of inputs to the range) of a plan."""
    policy = Policy(precision)
    lo, hi = (float(v) for v in input_range)
    return (policy, lo, hi, policy.input_tensor(max(abs(lo), abs(hi))),
            [f"inputs outside [{lo:g}, {hi:g}] are clamped to it (NaN to {lo:g})"])


def affine_parameters(layer):
    """A Dense or Conv2D layer's kernel (the IR's layout) and bias (zeros when it has none), float64."""
    kernel = np.asarray(layer.kernel, dtype=np.float64)
    bias = np.zeros(kernel.shape[-1]) if layer.bias is None else np.asarray(layer.bias, dtype=np.float64)
    return kernel, bias


def activation_interval(act, lo, hi):
    """The interval of act(x) for x in [lo, hi], element by element (softmax: [0, 1])."""
    if act == "tanh":
        return np.tanh(lo), np.tanh(hi)
    if act == "sigmoid":
        return 1 / (1 + np.exp(-lo)), 1 / (1 + np.exp(-hi))
    if act == "relu":
        return np.maximum(lo, 0), np.maximum(hi, 0)
    if act == "softmax":
        return np.zeros_like(lo), np.ones_like(hi)
    return lo, hi


def magnitude(interval):
    """The largest |value| of an interval (lo, hi) of arrays."""
    return float(max(np.abs(interval[0]).max(initial=0), np.abs(interval[1]).max(initial=0)))


def check_int64(bound, what):
    if bound >= 1 << 62:
        raise NNBuildError("accumulator can overflow int64 over the input range", item=what)


def record(plan, layers):
    """The JSON-able proof record of a plan (for the trace and the report), its layers' entries given."""
    return {"precision": plan.precision, "input": vars(plan.input), "input_range": list(plan.input_range),
            "saturation": plan.saturation, "layers": layers}
