"""Fixed-point format planning: per-tensor formats chosen from the weights and the declared input
range, with an interval-arithmetic proof that no accumulator or intermediate overflows.

Precisions (see PRECISIONS):
- `q16`: int16 weights and activations, each tensor with its own power-of-two scale (the most
  fraction bits its proven range allows), int32 accumulators where the proof allows, int64
  where it does not (wide accumulators are cheap adds on an 8-bit MCU).
- `q16-acc32`: as q16, but weight fraction bits are given up until every accumulator provably
  fits int32 (faster on AVR, slightly less exact).
- `q8`: int8 weights (a power-of-two scale per tensor), int16 activations as in q16, each 8x16
  product summed in an int32 accumulator: weight fraction bits are given up, as in q16-acc32,
  until every accumulator provably fits int32 (half the weight flash of q16, a cheaper AVR MAC).
- `fix16`: Q16.16 in int32 everywhere with a rounded 64-bit product per MAC, as libfixmath's
  fix16_mul does in the Keras2C fix16 flow.
- `fixedW.F` (Gravity's fixed[W, F]): one format for every tensor, W whole bits (sign
  included) and F fraction bits, stored in the smallest of 8/16/32 bits that holds W + F.

Arithmetic contract (the C generator and nnbuild.numerics.bitexact implement exactly this):
- inputs: clamped to the declared input range (NaN gives the low end): the one documented
  saturation, reported; then q = round_half_away(float32(x) * 2^f);
- Dense: acc = bias_q + sum(w_q * x_q) in the accumulator (exact integer arithmetic), then
  z = round_shift(acc, s) to the pre-activation format; round_shift(v, s) = (v + 2^(s-1)) >> s
  with an arithmetic shift (floor);
- tanh/sigmoid: table of tanh(k/64), k = 0..512, in the output format, linear interpolation;
  softmax: table of exp(-k/16), k = 0..256, then one rounded division per output.
  Tested maximum errors (tests/test_fixed.py), with LSB the output format's step:
  tanh <= 3e-5 + 1 LSB, sigmoid <= 2e-5 + 1 LSB, softmax <= 2e-4 + 1 LSB.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import List

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.numerics.formats import (FIXED_PRECISIONS, GENERIC_FIXED, Z_FRAC, Z_LIMIT, Tensor,  # noqa: F401
                                      check_precision, frac_for, to_int)

@dataclass
class QLayer:
    """One quantised Dense layer (activation fused) and the facts proving it cannot overflow."""

    name: str
    activation: str
    inputs: int
    units: int
    weight: Tensor
    input: Tensor
    output: Tensor
    acc_bits: int
    acc_bound: int            # max |acc| over the declared input range, in integer units
    shift: int                # acc -> pre-activation (Z_FRAC for tables, output frac otherwise)
    kernel_q: np.ndarray      # [units, inputs] (row per neuron), int64 values
    bias_q: np.ndarray        # [units], in accumulator units
    per_mac_shift: int = 0    # fix16: each product is rounded by this many bits before the add
    saturate_z: bool = False  # pre-activation clamped to +-2^30 (only where the proof needs it)
    pre_activation: tuple = (0.0, 0.0)  # proven interval of the real pre-activation
    notes: List[str] = field(default_factory=list)


@dataclass
class QPlan:
    precision: str
    input: Tensor
    layers: List[QLayer]
    input_range: tuple
    saturation: List[str] = field(default_factory=list)

    @property
    def output(self):
        return self.layers[-1].output

    def summary(self):
        """JSON-able proof record for the trace and the report."""
        return {"precision": self.precision, "input": vars(self.input), "input_range": list(self.input_range),
                "saturation": self.saturation,
                "layers": [{"name": l.name, "activation": l.activation, "weight": vars(l.weight),
                            "input": vars(l.input), "output": vars(l.output), "accumulator_bits": l.acc_bits,
                            "accumulator_bound": int(l.acc_bound), "shift": l.shift,
                            "per_mac_shift": l.per_mac_shift, "saturate_pre_activation": l.saturate_z,
                            "pre_activation_interval": [float(v) for v in l.pre_activation], "notes": l.notes}
                           for l in self.layers]}


def quantize(model, precision, input_range):
    """The fixed-point plan of a Dense/Activation chain, or one line naming the layer that
    cannot be represented."""
    check_precision(precision)
    layers = fuse_activations(model)
    lo, hi = (float(v) for v in input_range)
    x_lo, x_hi = np.full(model.input_size, lo), np.full(model.input_size, hi)
    policy = Policy(precision)
    in_t = policy.input_tensor(max(abs(lo), abs(hi)))
    plan = QPlan(precision, in_t, [], (lo, hi),
                 saturation=[f"inputs outside [{lo:g}, {hi:g}] are clamped to it (NaN to {lo:g})"])
    for dense in layers:
        qlayer = policy.layer(dense, in_t, x_lo, x_hi)
        plan.layers.append(qlayer)
        x_lo, x_hi = activation_interval(dense.activation, *qlayer_interval(dense, x_lo, x_hi))
        in_t = qlayer.output
    return plan


def fuse_activations(model):
    """Dense layers with their activation; a standalone Activation must follow a linear Dense."""
    out = []
    for layer in model.layers:
        if layer.kind == "dense":
            out.append(layer)
        elif layer.kind == "activation" and out and out[-1].activation == "linear":
            out[-1] = dataclasses.replace(out[-1], activation=layer.activation)
        else:
            raise NNBuildError("fixed point needs each activation right after a linear Dense",
                               item=f"{layer.source_type} '{layer.name}'")
    return out


def qlayer_interval(dense, x_lo, x_hi):
    """Exact interval of each pre-activation of an affine layer over a box of inputs."""
    k = np.asarray(dense.kernel, dtype=np.float64)
    b = np.zeros(k.shape[1]) if dense.bias is None else np.asarray(dense.bias, dtype=np.float64)
    lo = b + np.minimum(k * x_lo[:, None], k * x_hi[:, None]).sum(axis=0)
    hi = b + np.maximum(k * x_lo[:, None], k * x_hi[:, None]).sum(axis=0)
    return lo, hi


def activation_interval(act, lo, hi):
    if act == "tanh":
        return np.tanh(lo), np.tanh(hi)
    if act == "sigmoid":
        return 1 / (1 + np.exp(-lo)), 1 / (1 + np.exp(-hi))
    if act == "relu":
        return np.maximum(lo, 0), np.maximum(hi, 0)
    if act == "softmax":
        return np.zeros_like(lo), np.ones_like(hi)
    return lo, hi


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

    def layer(self, dense, in_t, x_lo, x_hi):
        what = f"Dense '{dense.name}'"
        kernel = np.asarray(dense.kernel, dtype=np.float64).T
        bias = np.zeros(kernel.shape[0]) if dense.bias is None else np.asarray(dense.bias, dtype=np.float64)
        pre_lo, pre_hi = qlayer_interval(dense, x_lo, x_hi)
        pre_bound = float(max(np.abs(pre_lo).max(), np.abs(pre_hi).max()))
        out_lo, out_hi = activation_interval(dense.activation, pre_lo, pre_hi)
        out_t = self.output_tensor(dense.activation, float(max(np.abs(out_lo).max(), np.abs(out_hi).max())), what)
        w_t = self.tensor(float(np.abs(kernel).max()), f"{what} kernel", self.weight_bits)
        x_max = max(abs(float(x_lo.min())), abs(float(x_hi.max()))) * 2.0 ** in_t.frac + 1
        notes = []
        while True:
            layer = self.build(dense, kernel, bias, w_t, in_t, out_t, x_max, (pre_lo.min(), pre_hi.max()), what)
            if not self.acc32_only or layer.acc_bits == 32:
                break
            if w_t.frac <= 1:
                raise NNBuildError("no weight format keeps the accumulator within int32", item=what)
            w_t = Tensor(w_t.frac - 1, w_t.bits)
            notes = [f"weight fraction bits lowered to {w_t.frac} so the accumulator fits int32"]
        layer.notes = notes + layer.notes
        if pre_bound * 2.0 ** Z_FRAC >= Z_LIMIT and dense.activation in ("tanh", "sigmoid", "softmax"):
            layer.saturate_z = True
            layer.notes.append(f"pre-activation (|z| <= {pre_bound:.4g}) clamped to +-2^13 before the table "
                               "activation: exact, since tanh/sigmoid/softmax are flat there to the output LSB")
        return layer

    def output_tensor(self, act, bound, what):
        if self.frac is not None:
            return self.tensor(bound, f"{what} output")
        if act in ("tanh", "sigmoid", "softmax"):
            return Tensor(self.bits - 2, self.bits)  # [-1, 1] at Q14: 1.0 is representable
        return Tensor(frac_for(bound, self.bits), self.bits)

    def build(self, dense, kernel, bias, w_t, in_t, out_t, x_max, pre_interval, what):
        kq = to_int(kernel, w_t.frac, w_t.bits, f"{what} kernel")
        if self.precision == "fix16":
            per_mac, acc_frac = w_t.frac, in_t.frac
        else:
            per_mac, acc_frac = 0, w_t.frac + in_t.frac
        bq = to_int(bias, acc_frac, 64, f"{what} bias")
        # |acc| <= |b| + sum |w| * max|x| (+ 1 per rounded product), in integer units
        prods = np.abs(kq).sum(axis=1).astype(np.float64) * x_max
        if per_mac:
            prods = prods / 2.0 ** per_mac + kq.shape[1]
        bound = int(np.ceil((np.abs(bq) + prods).max()))
        acc_bits = 32 if bound < 2 ** 31 - 1 and (per_mac or self.precision != "fix16") else 64
        if self.precision == "fix16" and bound >= 2 ** 31 - 1:
            raise NNBuildError("fix16 accumulator can overflow int32 over the input range", item=what)
        if bound >= 2 ** 62:
            raise NNBuildError("accumulator can overflow int64 over the input range", item=what)
        target = Z_FRAC if dense.activation in ("tanh", "sigmoid", "softmax") else out_t.frac
        return QLayer(dense.name, dense.activation, kq.shape[1], kq.shape[0], w_t, in_t, out_t, acc_bits, bound,
                      acc_frac - target, kq, bq, per_mac, pre_interval)
