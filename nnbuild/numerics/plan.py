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
from nnbuild.numerics import proof
from nnbuild.numerics.formats import (TABLE_ACTIVATIONS, Z_FRAC, Z_LIMIT, Tensor, check_precision,
                                      to_int)
from nnbuild.numerics.proof import activation_interval


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
        return proof.record(self, [{"name": l.name, "activation": l.activation, "weight": vars(l.weight),
                                    "input": vars(l.input), "output": vars(l.output), "accumulator_bits": l.acc_bits,
                                    "accumulator_bound": int(l.acc_bound), "shift": l.shift,
                                    "per_mac_shift": l.per_mac_shift, "saturate_pre_activation": l.saturate_z,
                                    "pre_activation_interval": [float(v) for v in l.pre_activation],
                                    "notes": l.notes}
                                   for l in self.layers])


def quantize(model, precision, input_range):
    """The fixed-point plan of a Dense/Activation chain, or one line naming the layer that
    cannot be represented."""
    check_precision(precision)
    layers = fuse_activations(model)
    policy, lo, hi, in_t, saturation = proof.start(precision, input_range)
    x_lo, x_hi = np.full(model.input_size, lo), np.full(model.input_size, hi)
    plan = QPlan(precision, in_t, [], (lo, hi), saturation=saturation)
    for dense in layers:
        qlayer = plan_dense(policy, dense, in_t, x_lo, x_hi)
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
    k, b = proof.affine_parameters(dense)
    lo = b + np.minimum(k * x_lo[:, None], k * x_hi[:, None]).sum(axis=0)
    hi = b + np.maximum(k * x_lo[:, None], k * x_hi[:, None]).sum(axis=0)
    return lo, hi


def plan_dense(policy, dense, in_t, x_lo, x_hi):
    """One Dense layer's formats and proof, its inputs in format `in_t` within [x_lo, x_hi]."""
    what = f"Dense '{dense.name}'"
    kernel, bias = proof.affine_parameters(dense)
    kernel = kernel.T
    pre_lo, pre_hi = qlayer_interval(dense, x_lo, x_hi)
    pre_bound = proof.magnitude((pre_lo, pre_hi))
    out_t = policy.output_tensor(dense.activation,
                                 proof.magnitude(activation_interval(dense.activation, pre_lo, pre_hi)), what)
    w_t = policy.tensor(float(np.abs(kernel).max()), f"{what} kernel", policy.weight_bits)
    x_max = max(abs(float(x_lo.min())), abs(float(x_hi.max()))) * 2.0 ** in_t.frac + 1
    layer, notes = policy.fit_accumulator(
        w_t, lambda w: build(policy, dense, kernel, bias, w, in_t, out_t, x_max, (pre_lo.min(), pre_hi.max()), what),
        what)
    layer.notes = notes + layer.notes
    if pre_bound * 2.0 ** Z_FRAC >= Z_LIMIT and dense.activation in TABLE_ACTIVATIONS:
        layer.saturate_z = True
        layer.notes.append(f"pre-activation (|z| <= {pre_bound:.4g}) clamped to +-2^13 before the table "
                           "activation: exact, since tanh/sigmoid/softmax are flat there to the output LSB")
    return layer


def build(policy, dense, kernel, bias, w_t, in_t, out_t, x_max, pre_interval, what):
    """The layer with weights in format `w_t`, and its accumulator's proven bound and width."""
    kq = to_int(kernel, w_t.frac, w_t.bits, f"{what} kernel")
    if policy.precision == "fix16":
        per_mac, acc_frac = w_t.frac, in_t.frac
    else:
        per_mac, acc_frac = 0, w_t.frac + in_t.frac
    bq = to_int(bias, acc_frac, 64, f"{what} bias")
    # |acc| <= |b| + sum |w| * max|x| (+ 1 per rounded product), in integer units
    prods = np.abs(kq).sum(axis=1).astype(np.float64) * x_max
    if per_mac:
        prods = prods / 2.0 ** per_mac + kq.shape[1]
    bound = int(np.ceil((np.abs(bq) + prods).max()))
    acc_bits = 32 if bound < 2 ** 31 - 1 and (per_mac or policy.precision != "fix16") else 64
    if policy.precision == "fix16" and bound >= 2 ** 31 - 1:
        raise NNBuildError("fix16 accumulator can overflow int32 over the input range", item=what)
    proof.check_int64(bound, what)
    target = Z_FRAC if dense.activation in TABLE_ACTIVATIONS else out_t.frac
    return QLayer(dense.name, dense.activation, kq.shape[1], kq.shape[0], w_t, in_t, out_t, acc_bits, bound,
                  acc_frac - target, kq, bq, per_mac, pre_interval)
