"""TFLite Micro's int8 UNIDIRECTIONAL_SEQUENCE_LSTM in numpy, bit for bit: the 8x8->16 integer
kernel of tensorflow/lite/micro/kernels/lstm_eval.h (EvalLstm<int8_t, int8_t, int16_t, int32_t>)
with the parameters its Prepare computes (lstm_eval_common.cc, PrepareGateParametersInteger).

Per time step, per gate (forget, input, cell, output): two fully connected products to int16 at
the fixed scale 2^-12 (the input's with the gate bias, the hidden state's without), each
requantised by QuantizeMultiplier(input scale * weight scale / 2^-12) and clamped to int16, summed
with int16 saturation, then the int16 sigmoid (or, for the cell gate, tanh) of
reference_integer_ops: the 256-entry sigmoid_table_uint16 interpolated, outputs at 2^-15. The
cell state (int16 at its own power-of-two scale) becomes forget * cell + input * cell gate (two
MulElementwise requantisations, a saturating add), clipped to +-quantized_cell_clip when the
cell clip is positive; the hidden state (int8, the state tensor's scale and zero point) is
tanh(cell) * output gate requantised by 2^-30 / hidden scale. The output tensor receives the
hidden state's bytes at every step (a copy: its own quantization is not used).

The state starts where TFLite Micro's ResetVariableTensors puts it: the hidden state at its zero
point, the cell state at 0 (an interpreter just allocated, or reset between sequences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from nnbuild.numerics.tflm_int8 import multiply_by_quantized_multiplier, quantize_multiplier

#: tensorflow/lite/kernels/internal/common.h: sigmoid(i / 24) in 0.16 fixed point, i = 0..255
SIGMOID_TABLE = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498,
    40149, 40794, 41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255,
    46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409, 51865,
    52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174,
    56503, 56823, 57133, 57433, 57724, 58007, 58280, 58544, 58800, 59048, 59288,
    59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110, 61279, 61441,
    61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886,
    62990, 63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835,
    63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450,
    64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845,
    64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097,
    65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258,
    65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360,
    65367, 65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425,
    65429, 65433, 65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465,
    65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508,
    65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516, 65517, 65517, 65518,
    65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524, 65525,
    65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529,
    65529, 65529, 65530, 65530, 65530, 65530, 65531, 65531, 65531, 65531, 65531,
    65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533, 65533, 65533,
    65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65534, 65534, 65535)

#: UNIDIRECTIONAL_SEQUENCE_LSTM's hidden (output) state and cell state inputs (lstm_shared.h)
HIDDEN_STATE, CELL_STATE = 18, 19
#: the gates in TFLite's tensor order (inputs 1..4 input-to, 5..8 recurrent-to, 12..15 biases)
GATES = ("input", "forget", "cell", "output")
#: the scale of a gate's fully connected outputs (Q3.12) and of its activation's outputs (Q0.15)
GATE_INPUT_SCALE = 2.0 ** -12
GATE_OUTPUT_SCALE = 2.0 ** -15
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
#: TfLiteFusedActivation codes the cell gate may use (CalculateLstmGate: sigmoid or tanh only)
CELL_ACTIVATIONS = {4: "tanh", 6: "sigmoid"}


@dataclass(frozen=True)
class LstmParams:
    """What Prepare computes, as integers: per gate (TFLite order i, f, c, o) the input and
    recurrent weights, the bias and the two (multiplier, shift) of the fully connected products;
    the zero points of the input and of the hidden state; the three inter-gate multiplications;
    the cell clip and the cell tanh's input scaling."""

    input_weights: np.ndarray          # [4, H, F] int8
    recurrent_weights: np.ndarray      # [4, H, H] int8
    biases: np.ndarray                 # [4, H] int32
    input_requant: Tuple[Tuple[int, int], ...]      # 4 x (multiplier, shift)
    recurrent_requant: Tuple[Tuple[int, int], ...]  # 4 x (multiplier, shift)
    input_zero_point: int
    hidden_zero_point: int
    forget_cell_mul: Tuple[int, int]
    input_cell_mul: Tuple[int, int]
    hidden_mul: Tuple[int, int]
    cell_clip: int                     # quantized_cell_clip, 0 when the cell clip is not positive
    cell_tanh: Tuple[int, int]         # (multiplier, right shift) of the cell tanh's input
    cell_activation: str               # the cell gate's activation: "tanh" or "sigmoid"

    @property
    def hidden(self) -> int:
        return int(self.input_weights.shape[1])

    @property
    def features(self) -> int:
        return int(self.input_weights.shape[2])


def checked_log2(x: float) -> int:
    """tflite::CheckedLog2's result: round(log(x) / log(2)) in float32 (its check is ignored by
    the LSTM's Prepare, so a cell scale that is no power of two is used as the nearest one)."""
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    return _round_half_away(float(np.float32(x_log2)))


def _round_half_away(value: float) -> int:
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def quantized_cell_clip(cell_clip: float, cell_scale: float) -> int:
    """CreateLstmCellStateInfo: cell_clip / cell_scale in double, clamped to int16, truncated."""
    if not cell_clip > 0:
        return 0
    return int(min(max(float(np.float32(cell_clip)) / float(np.float32(cell_scale)), -32768.0), 32767.0))


def cell_tanh_scaling(cell_scale_power: int) -> Tuple[int, int]:
    """lstm_internal::Tanh's (multiplier, right shift) of the cell state, after
    reference_integer_ops::Tanh's fix-up of a zero multiplier (3 << shift, shift 0)."""
    left_shift = (15 + cell_scale_power) - 3
    multiplier = 0
    if left_shift < 0:
        left_shift = -left_shift
        multiplier = 3
    if multiplier == 0:
        return 3 << left_shift, 0
    return multiplier, left_shift


def mul_params(scale1: float, scale2: float, out_scale: float) -> Tuple[int, int]:
    """CreateInterGateMulParams: QuantizeMultiplier of s1 * s2 / s_out in double from float32 scales."""
    real = float(np.float32(scale1)) * float(np.float32(scale2)) / float(np.float32(out_scale))
    return quantize_multiplier(real)


def params(input_q, weights, biases, hidden_q, cell_scale, cell_clip, cell_activation=4) -> LstmParams:
    """The kernel's parameters from the tensors: input_q and hidden_q (scale, zero point); weights a
    list of 8 (int8 array, scale): input-to i, f, c, o then recurrent-to i, f, c, o; biases 4 int32
    arrays; cell_scale the cell state's scale; cell_clip the options' CellClip."""
    in_scale, in_zp = input_q
    h_scale, h_zp = hidden_q
    gate_scale = float(np.float32(GATE_INPUT_SCALE))
    requant = [quantize_multiplier(float(np.float32(s_in)) * float(np.float32(w_scale)) / gate_scale)
               for s_in, (_, w_scale) in zip([in_scale] * 4 + [h_scale] * 4, weights)]
    out_scale = float(np.float32(GATE_OUTPUT_SCALE))
    return LstmParams(
        input_weights=np.stack([np.asarray(w, np.int64) for w, _ in weights[:4]]),
        recurrent_weights=np.stack([np.asarray(w, np.int64) for w, _ in weights[4:]]),
        biases=np.stack([np.asarray(b, np.int64).reshape(-1) for b in biases]),
        input_requant=tuple(requant[:4]), recurrent_requant=tuple(requant[4:]),
        input_zero_point=int(in_zp), hidden_zero_point=int(h_zp),
        forget_cell_mul=mul_params(out_scale, cell_scale, cell_scale),
        input_cell_mul=mul_params(out_scale, out_scale, cell_scale),
        hidden_mul=mul_params(out_scale, out_scale, h_scale),
        cell_clip=quantized_cell_clip(cell_clip, cell_scale),
        cell_tanh=cell_tanh_scaling(checked_log2(cell_scale)),
        cell_activation=CELL_ACTIVATIONS[int(cell_activation)])


def sigmoid16(x):
    """reference_integer_ops::Logistic (int16, input multiplier 0 and left shift 0: the input
    times 3), Q3.12 in, Q0.15 out."""
    return _sigmoid_scaled(np.asarray(x, np.int64) * 3)


def _sigmoid_scaled(v):
    v = np.asarray(v, np.int64)
    table = np.array(SIGMOID_TABLE + (SIGMOID_TABLE[-1],), np.int64)
    a = np.abs(v)
    uh = a >> 9
    inside = np.minimum(uh, 254)
    ua, ub = table[inside], table[inside + 1]
    result = np.where(uh >= 255, 0x7FFF << 10, (ua << 9) + (a & 0x1FF) * (ub - ua))
    result = np.where(v >= 0, result + (1 << 9), (1 << 25) - result + (1 << 9) - 1)
    return (result >> 10).astype(np.int64)


def tanh16(x, multiplier: int = 3, right_shift: int = 0):
    """reference_integer_ops::Tanh (int16) with the input scaling (x * multiplier + round) >>
    right_shift already fixed up; Q0.15 out."""
    x = np.asarray(x, np.int64)
    rounding = (1 << (right_shift - 1)) if right_shift > 0 else 0
    return _tanh_scaled((x * multiplier + rounding) >> right_shift)


def _tanh_scaled(v):
    v = np.asarray(v, np.int64)
    table = np.array(SIGMOID_TABLE + (SIGMOID_TABLE[-1],), np.int64)
    a = np.abs(v)
    uh = a >> 8
    inside = np.minimum(uh, 254)
    ua, ub = table[inside], table[inside + 1]
    result = np.where(uh >= 255, 0xFFFF << 8, (ua << 8) + (a & 0xFF) * (ub - ua))
    result = np.where(v >= 0, result - (1 << 23) + (1 << 7), -result + (1 << 23) + (1 << 7) - 1)
    return result >> 8


def _fully_connected16(x, x_zp, weights, bias, multiplier, shift):
    """reference_integer_ops::FullyConnected to int16 (output zero point 0, no activation)."""
    acc = weights @ (np.asarray(x, np.int64) - x_zp)
    if bias is not None:
        acc = acc + bias
    return np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift), INT16_MIN, INT16_MAX)


def _mul(a, b, multiplier, shift, zero_point, low, high):
    """reference_integer_ops::MulElementwise (input offsets 0)."""
    product = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    return np.clip(multiply_by_quantized_multiplier(product, multiplier, shift) + zero_point, low, high)


def gate(p: LstmParams, k: int, x_t, h):
    """Gate k (TFLite order i, f, c, o) of one step: CalculateLstmGate."""
    from_input = _fully_connected16(x_t, p.input_zero_point, p.input_weights[k], p.biases[k], *p.input_requant[k])
    from_hidden = _fully_connected16(h, p.hidden_zero_point, p.recurrent_weights[k], None, *p.recurrent_requant[k])
    total = np.clip(from_input + from_hidden, INT16_MIN, INT16_MAX)
    if GATES[k] == "cell" and p.cell_activation == "tanh":
        return tanh16(total)
    return sigmoid16(total)


def step(p: LstmParams, x_t, h, c):
    """One LstmStep: (new hidden state int8 values, new cell state int16 values)."""
    i, f, g, o = (gate(p, k, x_t, h) for k in range(4))
    c = _mul(f, c, *p.forget_cell_mul, 0, INT16_MIN, INT16_MAX)
    c = np.clip(c + _mul(i, g, *p.input_cell_mul, 0, INT16_MIN, INT16_MAX), INT16_MIN, INT16_MAX)
    if p.cell_clip > 0:
        c = np.clip(c, -p.cell_clip, p.cell_clip)
    h = _mul(tanh16(c, *p.cell_tanh), o, *p.hidden_mul, p.hidden_zero_point, -128, 127)
    return h, c


def reset_state(p: LstmParams):
    """(hidden, cell) as ResetVariableTensors sets them: the hidden state's zero point, 0."""
    return np.full(p.hidden, p.hidden_zero_point, np.int64), np.zeros(p.hidden, np.int64)


def lstm(p: LstmParams, x, state=None):
    """EvalLstm over one sequence x [T, F] (int8 values) from `state` (hidden, cell), by default
    the reset state: [T, H] int8. A given state is left updated (Invoke() without a reset)."""
    h, c = reset_state(p) if state is None else state
    out = []
    for x_t in np.asarray(x, np.int64).reshape(-1, p.features):
        h, c = step(p, x_t, h, c)
        out.append(h)
    if state is not None:
        state[0][...], state[1][...] = h, c
    return np.stack(out).astype(np.int8)


def params_of(graph, op) -> LstmParams:
    """The kernel's parameters of a UNIDIRECTIONAL_SEQUENCE_LSTM operator of a graph read by
    nnbuild.frontends.tflite (the front-end checked its tensors)."""
    tensors = graph.tensors

    def q(index):
        quant = tensors[index].quantization
        return float(quant.scales[0]), int(quant.zero_points[0])
    weights = [(tensors[op.inputs[k]].data, q(op.inputs[k])[0]) for k in range(1, 9)]
    biases = [tensors[op.inputs[k]].data for k in range(12, 16)]
    options = op.options or {}
    return params(q(op.inputs[0]), weights, biases, q(op.inputs[HIDDEN_STATE]), q(op.inputs[CELL_STATE])[0],
                  float(options.get("CellClip", 0.0) or 0.0), int(options.get("FusedActivationFunction", 4)))
