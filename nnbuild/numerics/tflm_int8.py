"""TFLite Micro's int8 arithmetic in numpy, bit for bit: the reference kernels' integer operations
(int32 accumulation with zero-point offsets, requantisation by a 32-bit fixed-point multiplier and
shift with gemmlowp's rounding, saturation to the activation range), so nnbuild's int8 precision
has an exact model to be checked against and to check its generated C with.

The functions follow tensorflow/lite/kernels/internal/common.h, quantization_util.cc, the
reference_integer_ops headers that TFLite Micro compiles (without TFLITE_SINGLE_ROUNDING) and
gemmlowp's fixed-point exp, logistic and tanh that its LOGISTIC and TANH use:
`quantize_multiplier`, `multiply_by_quantized_multiplier`, then one function per operator over
one sample in NHWC. `run(graph, x_q)` executes a full-integer graph as nnbuild's TFLite reader
returns it (nnbuild.frontends.tflite.read) for the operators implemented here; any other operator
raises NotImplementedError naming it. The UNIDIRECTIONAL_SEQUENCE_LSTM section (`lstm`,
`lstm_params_of`) is TFLite Micro's 8x8->16 LSTM kernel; `run(graph, x_q, states)` carries its
state from call to call as Invoke() does without a reset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def quantize_multiplier(real: float):
    """(int32 multiplier, shift) with real = multiplier * 2^(shift - 31) (QuantizeMultiplier)."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    q = _round_half_away(fraction * (1 << 31))
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return int(q), int(shift)


def _round_half_away(value: float) -> int:
    """std::round: halves away from zero."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def _saturating_rounding_doubling_high_mul(a: np.ndarray, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int64 arrays holding int32 values."""
    a = np.asarray(a, np.int64)
    b = np.int64(b)
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    total = ab + nudge
    # C++ integer division truncates toward zero
    high = np.where(total >= 0, total // (1 << 31), -((-total) // (1 << 31)))
    return np.where(overflow, INT32_MAX, high).astype(np.int64)


def _rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (double rounding) on int32 values, as int64 arrays."""
    left, right = max(shift, 0), max(-shift, 0)
    shifted = np.asarray(x, np.int64) * (1 << left)
    shifted = ((shifted + 2 ** 31) % 2 ** 32) - 2 ** 31  # int32 wrap, as the C++ multiplication does
    return _rounding_divide_by_pot(_saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def activation_range(fused: int, scale: float, zero_point: int, qmin=-128, qmax=127):
    """CalculateActivationRangeQuantized: the int8 range a fused activation clamps to."""
    def quantize(real):
        return zero_point + _round_half_away(float(np.float32(real) / np.float32(scale)))
    if fused == 0:
        return qmin, qmax
    if fused == 1:  # RELU
        return max(qmin, quantize(0.0)), qmax
    if fused == 3:  # RELU6
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if fused == 2:  # RELU_N1_TO_1
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    raise NotImplementedError(f"fused activation code {fused}")


def _requantize(acc, multipliers, shifts, output_zero_point, low, high, channel_axis=-1):
    """Per-channel (or per-tensor) requantisation of int32 accumulators to int8."""
    acc = np.asarray(acc, np.int64)
    if len(multipliers) == 1:
        out = multiply_by_quantized_multiplier(acc, multipliers[0], shifts[0])
    else:
        moved = np.moveaxis(acc, channel_axis, 0)
        result = np.moveaxis(np.empty_like(acc), channel_axis, 0)
        for c, (m, s) in enumerate(zip(multipliers, shifts)):
            result[c] = multiply_by_quantized_multiplier(moved[c], m, s)
        out = np.moveaxis(result, 0, channel_axis)
    return np.clip(out + output_zero_point, low, high).astype(np.int8)


def channel_multipliers(input_scale, filter_scales, output_scale):
    """One (multiplier, shift) per output channel: input_scale * filter_scale / output_scale in double."""
    pairs = [quantize_multiplier(float(input_scale) * float(f) / float(output_scale)) for f in filter_scales]
    return [m for m, _ in pairs], [s for _, s in pairs]



def fully_connected(x, x_zp, weights, w_zp, bias, multipliers, shifts, out_zp, low, high):
    """reference_integer_ops::FullyConnected over one sample: x [inputs], weights [units, inputs]."""
    acc = (weights.astype(np.int64) - w_zp) @ (x.astype(np.int64).reshape(-1) - x_zp)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return _requantize(acc, multipliers, shifts, out_zp, low, high)


def _window_taps(x, kh, kw, strides, dilation, pads, fill):
    """x [H, W, C] padded by `fill` (the zero point: reference kernels skip out-of-bounds taps, which
    adds (zero_point - zero_point) = 0), as patches [OH, OW, kh, kw, C]."""
    top, bottom, left, right = pads
    h, w, c = x.shape
    padded = np.full((h + top + bottom, w + left + right, c), fill, np.int64)
    padded[top:top + h, left:left + w] = x
    oh = (padded.shape[0] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (padded.shape[1] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    taps = np.empty((oh, ow, kh, kw, c), np.int64)
    for i in range(kh):
        for j in range(kw):
            rows = padded[i * dilation[0]: i * dilation[0] + strides[0] * (oh - 1) + 1: strides[0]]
            taps[:, :, i, j] = rows[:, j * dilation[1]: j * dilation[1] + strides[1] * (ow - 1) + 1: strides[1]]
    return taps


def conv_2d(x, x_zp, filters, bias, multipliers, shifts, out_zp, low, high, strides, dilation, pads):
    """reference_integer_ops::ConvPerChannel: filters [O, kh, kw, I] (weights' zero point 0)."""
    out_c, kh, kw, in_c = filters.shape
    taps = _window_taps(x, kh, kw, strides, dilation, pads, x_zp) - x_zp
    acc = np.einsum("hwijc,oijc->hwo", taps, filters.astype(np.int64))
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return _requantize(acc, multipliers, shifts, out_zp, low, high)


def depthwise_conv_2d(x, x_zp, filters, bias, multipliers, shifts, out_zp, low, high, strides, dilation, pads):
    """reference_integer_ops::DepthwiseConvPerChannel: filters [1, kh, kw, C * multiplier]."""
    _, kh, kw, out_c = filters.shape
    channels = x.shape[2]
    taps = _window_taps(x, kh, kw, strides, dilation, pads, x_zp) - x_zp
    taps = np.repeat(taps, out_c // channels, axis=4)  # output channel c*m + k reads input channel c
    acc = np.einsum("hwijo,ijo->hwo", taps, filters[0].astype(np.int64))
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return _requantize(acc, multipliers, shifts, out_zp, low, high)


def max_pool_2d(x, size, strides, pads, low, high):
    """reference_integer_ops::MaxPool: the largest in-bounds value, clamped to the activation range."""
    taps = _window_taps(x, size[0], size[1], strides, (1, 1), pads, -(1 << 40))
    return np.clip(taps.max(axis=(2, 3)), low, high).astype(np.int8)


def average_pool_2d(x, size, strides, pads, low, high):
    """reference_integer_ops::AveragePool: the in-bounds sum divided by their count, rounded half away
    from zero in C integer arithmetic, clamped."""
    taps = _window_taps(x, size[0], size[1], strides, (1, 1), pads, 0)
    inside = _window_taps(np.ones(x.shape[:2] + (1,), np.int64), size[0], size[1], strides, (1, 1), pads, 0)
    total = taps.sum(axis=(2, 3))
    count = inside.sum(axis=(2, 3))
    half = count // 2
    average = np.where(total > 0, (total + half) // count, -((-(total - half)) // count))
    return np.clip(average, low, high).astype(np.int8)


ADD_LEFT_SHIFT = 20


def add_multipliers(s1, s2, so, single_precision=False):
    """ADD's (and SUB's) ((m1, shift1), (m2, shift2), (m_out, shift_out)): both inputs rescaled to
    twice the larger scale with ADD_LEFT_SHIFT bits of headroom (add.cc's PrepareAdd, in double;
    sub_common.cc computes them in float32: `single_precision`)."""
    if single_precision:
        s1, s2, so = np.float32(s1), np.float32(s2), np.float32(so)
        twice = np.float32(2) * max(s1, s2)
        reals = float(s1 / twice), float(s2 / twice), float(twice / (np.float32(1 << ADD_LEFT_SHIFT) * so))
    else:
        twice = 2 * max(float(s1), float(s2))
        reals = float(s1) / twice, float(s2) / twice, twice / ((1 << ADD_LEFT_SHIFT) * float(so))
    return tuple(quantize_multiplier(r) for r in reals)


def add(x1, x2, q1, q2, q_out, low, high):
    """reference_integer_ops::Add (broadcasting): both inputs rescaled to twice the larger input
    scale with 20 bits of headroom, summed, requantised to the output (add.cc's PrepareAdd)."""
    (s1, z1), (s2, z2), (so, zo) = q1, q2, q_out
    left_shift = ADD_LEFT_SHIFT
    (m1, sh1), (m2, sh2), (mo, sho) = add_multipliers(s1, s2, so)
    a = multiply_by_quantized_multiplier((np.asarray(x1, np.int64) - z1) * (1 << left_shift), m1, sh1)
    b = multiply_by_quantized_multiplier((np.asarray(x2, np.int64) - z2) * (1 << left_shift), m2, sh2)
    out = multiply_by_quantized_multiplier(a + b, mo, sho) + zo
    return np.clip(out, low, high).astype(np.int8)


def sub(x1, x2, q1, q2, q_out, low, high):
    """reference_integer_ops::Sub: ADD's arithmetic with the second operand subtracted; sub_common.cc
    computes the multipliers in float32 (ADD's in double)."""
    (s1, z1), (s2, z2), (so, zo) = q1, q2, q_out
    left_shift = ADD_LEFT_SHIFT
    (m1, sh1), (m2, sh2), (mo, sho) = add_multipliers(s1, s2, so, single_precision=True)
    a = multiply_by_quantized_multiplier((np.asarray(x1, np.int64) - z1) * (1 << left_shift), m1, sh1)
    b = multiply_by_quantized_multiplier((np.asarray(x2, np.int64) - z2) * (1 << left_shift), m2, sh2)
    out = multiply_by_quantized_multiplier(a - b, mo, sho) + zo
    return np.clip(out, low, high).astype(np.int8)


def leaky_relu(x, alpha, q_in, q_out):
    """reference_ops::QuantizeLeakyRelu: identity (s_in / s_out) at and above the zero point, alpha
    (s_in * alpha / s_out, in float32) below it; a negative alpha's sign applied after."""
    (s_in, z_in), (s_out, z_out) = q_in, q_out
    s_in, s_out = np.float32(s_in), np.float32(s_out)
    m_alpha, sh_alpha = quantize_multiplier(float(s_in * np.float32(alpha) / s_out))
    m_one, sh_one = quantize_multiplier(float(s_in / s_out))
    d = np.asarray(x, np.int64) - z_in
    negative = multiply_by_quantized_multiplier(d, abs(m_alpha), sh_alpha) * (-1 if m_alpha < 0 else 1)
    out = z_out + np.where(d >= 0, multiply_by_quantized_multiplier(d, m_one, sh_one), negative)
    return np.clip(out, -128, 127).astype(np.int8)


def relu(x, q_in, q_out):
    """TFLite Micro's ReluQuantized: rescaled by s_in / s_out (in double), clamped below at the output's
    zero point (CalculateReluOpData)."""
    (s_in, z_in), (s_out, z_out) = q_in, q_out
    m, sh = quantize_multiplier(float(s_in) / float(s_out))
    out = z_out + multiply_by_quantized_multiplier(np.asarray(x, np.int64) - z_in, m, sh)
    return np.clip(out, max(-128, int(z_out)), 127).astype(np.int8)


def relu6_bounds(scale, zero_point):
    """(zero, six) of TFLite Micro's Relu6Prepare: 0 and 6 quantized with the INPUT tensor's scale
    and zero point (FloatToQuantizedType: float32 division, rounded half away, clamped to int8)."""
    six = _round_half_away(float(np.float32(6.0) / np.float32(scale))) + int(zero_point)
    return int(zero_point), min(max(six, -128), 127)


def relu6(x, scale, zero_point):
    """TFLite Micro's Relu6Quantized: the input values clamped to relu6_bounds, written unchanged; the
    output tensor's scale and zero point are not used (TensorFlow's reference kernel rescales)."""
    zero, six = relu6_bounds(scale, zero_point)
    return np.clip(np.asarray(x, np.int64), zero, six).astype(np.int8)


def requantize(x, q_in, q_out):
    """reference_ops::Requantize, TFLite Micro's int8-to-int8 QUANTIZE: (x - z_in) times s_in / s_out
    (in double) plus z_out, saturated to int8."""
    (s_in, z_in), (s_out, z_out) = q_in, q_out
    m, sh = quantize_multiplier(float(s_in) / float(s_out))
    out = multiply_by_quantized_multiplier(np.asarray(x, np.int64) - z_in, m, sh) + z_out
    return np.clip(out, -128, 127).astype(np.int8)


def mul(x1, x2, q1, q2, q_out, low, high):
    """reference_integer_ops::Mul (broadcasting): (x1 - z1) * (x2 - z2) requantised by s1 * s2 / so."""
    (s1, z1), (s2, z2), (so, zo) = q1, q2, q_out
    m, sh = quantize_multiplier(float(s1) * float(s2) / float(so))
    product = (np.asarray(x1, np.int64) - z1) * (np.asarray(x2, np.int64) - z2)
    return np.clip(multiply_by_quantized_multiplier(product, m, sh) + zo, low, high).astype(np.int8)


def mean_multiplier(multiplier: int, shift: int, count: int):
    """MEAN's (multiplier, shift) with 1/count folded in, as QuantizedMeanOrSum folds it (the
    extra shift clamped to 32 and to 31 + shift)."""
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return (multiplier << extra) // count, shift - extra


def mean(x, axes, keep_dims, multiplier: int, shift: int, x_zp: int, out_zp: int):
    """reference_ops::QuantizedMeanOrSum (mean): the int32 sum over `axes` less the input zero point
    per element, requantised by input_scale / output_scale with 1/count folded into the multiplier
    (mean_multiplier)."""
    count = int(np.prod([x.shape[a] for a in axes]))
    total = np.asarray(x, np.int64).sum(axis=tuple(axes), keepdims=keep_dims)
    multiplier, shift = mean_multiplier(multiplier, shift, count)
    out = multiply_by_quantized_multiplier(total - x_zp * count, multiplier, shift) + out_zp
    return np.clip(out, -128, 127).astype(np.int8)


# --------------------------------------------------------------------------- gemmlowp fixed point
# Scalars as Python ints holding int32 values; a FixedPoint<int32, I> is its raw value (31 - I
# fractional bits). These follow gemmlowp's fixedpoint.h, which TFLite Micro's LOGISTIC and TANH use.

_ONE_F0 = INT32_MAX          # FixedPoint<int32, 0>::One()
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
               (4, 242))      # exp(-2^k) in F0, applied for each set bit of the remainder


def _high_mul(a: int, b: int) -> int:
    return int(_saturating_rounding_doubling_high_mul(np.int64(a), b))


def _divide_by_pot(x: int, exponent: int) -> int:
    return int(_rounding_divide_by_pot(np.int64(x), exponent)) if exponent > 0 else x


def _multiply_by_pot(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT: a saturating left shift, or a rounding right shift."""
    if exponent <= 0:
        return _divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return INT32_MAX if x > threshold else INT32_MIN if x < -threshold else x << exponent


def _rounding_half_sum(a: int, b: int) -> int:
    total = a + b
    total += 1 if total >= 0 else -1
    return total // 2 if total >= 0 else -((-total) // 2)


def _exp_on_quarter(a: int) -> int:
    """exp(a) for a in [-1/4, 0), F0 -> F0: Taylor series around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _high_mul(x, x)
    x3 = _high_mul(x2, x)
    x4 = _high_mul(x2, x2)
    tail = _divide_by_pot(_high_mul(_divide_by_pot(x4, 2) + x3, one_third) + x2, 1)
    return constant_term + _high_mul(constant_term, x + tail)


def _exp_on_negative_values(a: int, integer_bits: int) -> int:
    """exp(a) for a <= 0 in FixedPoint<int32, integer_bits>, as F0."""
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_on_quarter(_multiply_by_pot(a_mod, integer_bits))
    remainder = a_mod - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent and remainder & (1 << (fractional + exponent)):
            result = _high_mul(result, multiplier)
    if integer_bits > 5 and a < -(1 << (36 - integer_bits)):
        result = 0
    return _ONE_F0 if a == 0 else result


def _newton_reciprocal(a: int) -> int:
    """x ~ 1 / ((1 + a) / 2) in F2 for a in F0 (0, 1): three Newton-Raphson steps from 48/17 - 32/17 d."""
    half_denominator = _rounding_half_sum(a, _ONE_F0)
    x = 1515870810 + _high_mul(half_denominator, -1010580540)
    for _ in range(3):
        x = x + _multiply_by_pot(_high_mul(x, (1 << 29) - _high_mul(half_denominator, x)), 2)
    return x


def _logistic_f0(a: int) -> int:
    """gemmlowp::logistic of FixedPoint<int32, 4>, as F0."""
    if a == 0:
        return 1 << 30
    positive = _multiply_by_pot(_newton_reciprocal(_exp_on_negative_values(-abs(a), 4)), 1)
    return positive if a > 0 else _ONE_F0 - positive


def _tanh_f0(a: int) -> int:
    """gemmlowp::tanh of FixedPoint<int32, 4>, as F0: (1 - e) / (1 + e) with e = exp(-2|a|)."""
    if a == 0:
        return 0
    t = _multiply_by_pot(_newton_reciprocal(_exp_on_negative_values(-abs(a), 5)) - (1 << 29), 2)
    return -t if a < 0 else t


def _table_input(x, scale, zero_point):
    """(input - zero point, multiplier, shift, radius) of LOGISTIC/TANH's Prepare: the input rescaled
    to FixedPoint<int32, 4> by frexp of scale * 2^27 (no QuantizeMultiplier adjustment), inputs beyond
    the radius saturating."""
    fraction, shift = math.frexp(float(scale) * float(1 << 27))
    multiplier = _round_half_away(fraction * (1 << 31))
    radius = math.floor(15.0 * (1 << 27) / 2.0 ** shift)
    return np.asarray(x, np.int64) - int(zero_point), multiplier, shift, radius


def _saturating_table(x, scale, zero_point, inside):
    """TFLite Micro's int8 logistic and tanh share this frame: inputs past the radius saturate,
    the others go through `inside(q4)` on the input rescaled to 4 integer bits."""
    centred, multiplier, shift, radius = _table_input(x, scale, zero_point)
    out = []
    for d in centred.reshape(-1).tolist():
        if d <= -radius:
            out.append(-128)
        elif d >= radius:
            out.append(127)
        else:
            q4 = int(multiply_by_quantized_multiplier(np.int64(d), multiplier, shift))
            out.append(min(max(inside(q4), -128), 127))
    return np.array(out, np.int8).reshape(centred.shape)


def logistic(x, scale, zero_point):
    """reference_integer_ops::Logistic: output scale 1/256, zero point -128."""
    return _saturating_table(x, scale, zero_point, lambda q4: _divide_by_pot(_logistic_f0(q4), 23) - 128)


def tanh(x, scale, zero_point):
    """reference_integer_ops::Tanh: output scale 1/128, zero point 0."""
    return _saturating_table(x, scale, zero_point, lambda q4: _divide_by_pot(_tanh_f0(q4), 24))


def softmax_exps(scale, beta=1.0):
    """SOFTMAX's exp of each input difference to the row's largest, d = 0, -1, ..., -255, in F0
    (the difference rescaled to FixedPoint<int32, 5> by beta * scale * 2^26, gemmlowp's exp), 0
    below the cut-off -radius: such an input adds nothing to the sum and gives -128, as an exp of
    0 does, so the table is the kernel's whole use of exp."""
    multiplier, shift = quantize_multiplier(min(float(beta) * float(scale) * float(1 << 26), float(2 ** 31 - 1)))
    diff_min = -math.floor(31.0 * (1 << 26) / 2.0 ** shift)
    return [0 if d < diff_min else _exp_on_negative_values(_high_mul(d * (1 << shift), multiplier), 5)
            for d in range(0, -256, -1)]


def softmax(x, scale, beta=1.0):
    """reference_ops::Softmax (int8 in and out) over the last axis: input differences to the row's
    largest rescaled to FixedPoint<int32, 5> (beta * scale * 2^26, capped at 2^31 - 1), gemmlowp's exp,
    the exps summed in FixedPoint<int32, 12>, one reciprocal per row (GetReciprocal), outputs at scale
    1/256 zero point -128; differences below -radius give -128."""
    table = softmax_exps(scale, beta)
    rows = np.asarray(x, np.int64).reshape(-1, np.shape(x)[-1])
    out = np.empty(rows.shape, np.int8)
    for r, row in enumerate(rows.tolist()):
        top = max(row)
        exps = [table[top - v] for v in row]
        total = sum(_divide_by_pot(e, 12) for e in exps)
        headroom = 32 - total.bit_length()  # CountLeadingZeros of a positive int32
        bits_over_unit = 12 - headroom
        shifted = ((total << headroom) - (1 << 31)) % (1 << 32)
        shifted = shifted - (1 << 32) if shifted >= 1 << 31 else shifted
        reciprocal = _multiply_by_pot(_newton_reciprocal(shifted), 1)
        exponent = bits_over_unit + 31 - 8
        for c, e in enumerate(exps):
            value = _divide_by_pot(_high_mul(reciprocal, e), exponent) - 128
            out[r, c] = min(max(value, -128), 127)
    return out.reshape(np.shape(x))


def _high_mul16(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    total = ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14))
    return total // (1 << 15) if total >= 0 else -((-total) // (1 << 15))


def _truncating_high_mul16(a: int, b: int) -> int:
    """hard_swish.h's SaturatingDoublingHighMul: the int16 doubling high product, truncated."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    return ab // (1 << 15) if ab >= 0 else -((-ab) // (1 << 15))


def _saturating_left_shift16(value: int, amount: int) -> int:
    return min(max(value * (1 << amount), -(1 << 15)), (1 << 15) - 1)


def _int16_multiplier(multiplier: int) -> int:
    """DownScaleInt32ToInt16Multiplier: the upper 16 bits, rounded, saturated."""
    if multiplier >= INT32_MAX - (1 << 15):
        return (1 << 15) - 1
    return (multiplier + (1 << 15)) >> 16


def hard_swish(x, q_in, q_out):
    """reference_ops::HardSwish (int8): the input at a 7-bit finer scale, a 'reluish' factor
    relu6(x + 3) / 6 at scale 3/32768 and the output multiplier, both as int16 fixed point; the
    scales are computed in float32 as hard_swish_common.cc does."""
    (s_in, z_in), (s_out, z_out) = q_in, q_out
    hires = np.float32(1.0 / 128.0) * np.float32(s_in)
    out_m, out_e = quantize_multiplier(float(hires / np.float32(s_out)))
    relu_m, relu_e = quantize_multiplier(float(hires / np.float32(3.0 / 32768.0)))
    out_m, relu_m = _int16_multiplier(out_m), _int16_multiplier(relu_m)
    result = []
    for v in (np.asarray(x, np.int64) - int(z_in)).reshape(-1).tolist():
        hires_value = v * (1 << 7)
        preshift = _high_mul16(hires_value, out_m)
        reluish = hires_value
        if relu_e > 0:
            reluish = _saturating_left_shift16(reluish, relu_e - 1)
        reluish = _high_mul16(reluish, relu_m)
        if relu_e > 0:
            reluish = _saturating_left_shift16(reluish, 1)
        if relu_e < 0:
            reluish = _divide_by_pot(reluish, -relu_e)
        reluish = (reluish + (1 << 15)) >> 1
        value = _divide_by_pot(_truncating_high_mul16(reluish, preshift), -out_e) + int(z_out)
        result.append(min(max(value, -128), 127))
    return np.array(result, np.int8).reshape(np.shape(x))


def window_padding(options, shape, kernel, dilation):
    """(strides, pads (top, bottom, left, right)) of TFLite's SAME (extra cell after) or VALID padding."""
    strides = (int(options.get("StrideH", 1)), int(options.get("StrideW", 1)))
    if int(options.get("Padding", 0)) == 1:
        return strides, (0, 0, 0, 0)
    pads = []
    for size, k, s, d in zip(shape[:2], kernel, strides, dilation):
        out = -(-size // s)
        total = max((out - 1) * s + d * (k - 1) + 1 - size, 0)
        pads.append((total // 2, total - total // 2))
    return strides, pads[0] + pads[1]


def _raw(graph, op, values, consts, x, q, out):
    """Operators that move or compare int8 values without rescaling them (TFLite Micro requires the
    inputs quantized as the output): MAXIMUM, MINIMUM, TRANSPOSE, REDUCE_MAX."""
    for index in op.inputs[:2 if op.op in ("MAXIMUM", "MINIMUM") else 1]:
        if not (np.array_equal(q(index)[0], q(out)[0]) and np.array_equal(q(index)[1], q(out)[1])):
            raise NotImplementedError(f"operator {op.index} ({op.op}) of inputs quantized unlike its output")
    if op.op in ("MAXIMUM", "MINIMUM"):
        other = op.inputs[1]
        x2 = values[other] if other in values else consts[other].astype(np.int64)
        return (np.maximum if op.op == "MAXIMUM" else np.minimum)(x, x2)
    rank = len(graph.tensors[op.inputs[0]].shape)
    spec = [int(v) for v in np.asarray(consts[op.inputs[1]]).reshape(-1)]
    if op.op == "TRANSPOSE":
        if spec[0] != 0:
            raise NotImplementedError(f"operator {op.index} (TRANSPOSE) moving the batch axis")
        return np.transpose(x, [p - 1 for p in spec[1:]])
    axes = sorted({a % rank - 1 for a in spec})
    if axes and axes[0] < 0:
        raise NotImplementedError(f"operator {op.index} (REDUCE_MAX) over the batch axis")
    return x.max(axis=tuple(axes))


# --------------------------------------------------------------------------- UNIDIRECTIONAL_SEQUENCE_LSTM
# TFLite Micro's int8 UNIDIRECTIONAL_SEQUENCE_LSTM in numpy, bit for bit: the 8x8->16 integer
# kernel of tensorflow/lite/micro/kernels/lstm_eval.h (EvalLstm<int8_t, int8_t, int16_t, int32_t>)
# with the parameters its Prepare computes (lstm_eval_common.cc, PrepareGateParametersInteger).
#
# Per time step, per gate (forget, input, cell, output): two fully connected products to int16 at
# the fixed scale 2^-12 (the input's with the gate bias, the hidden state's without), each
# requantised by QuantizeMultiplier(input scale * weight scale / 2^-12) and clamped to int16, summed
# with int16 saturation, then the int16 sigmoid (or, for the cell gate, tanh) of
# reference_integer_ops: the 256-entry sigmoid_table_uint16 interpolated, outputs at 2^-15. The
# cell state (int16 at its own power-of-two scale) becomes forget * cell + input * cell gate (two
# MulElementwise requantisations, a saturating add), clipped to +-quantized_cell_clip when the
# cell clip is positive; the hidden state (int8, the state tensor's scale and zero point) is
# tanh(cell) * output gate requantised by 2^-30 / hidden scale. The output tensor receives the
# hidden state's bytes at every step (a copy: its own quantization is not used).
#
# The state starts where TFLite Micro's ResetVariableTensors puts it (reset_state: the hidden state
# at its zero point, the cell state at 0), or where the caller's state left it (Invoke() without a
# reset: `lstm(p, x, state)` updates the state in place).

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
LSTM_HIDDEN_STATE, LSTM_CELL_STATE = 18, 19
#: the gates in TFLite's tensor order (inputs 1..4 input-to, 5..8 recurrent-to, 12..15 biases)
LSTM_GATES = ("input", "forget", "cell", "output")
#: the scale of a gate's fully connected outputs (Q3.12) and of its activation's outputs (Q0.15)
LSTM_GATE_INPUT_SCALE = 2.0 ** -12
LSTM_GATE_OUTPUT_SCALE = 2.0 ** -15
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
#: TfLiteFusedActivation codes the cell gate may use (CalculateLstmGate: sigmoid or tanh only)
LSTM_CELL_ACTIVATIONS = {4: "tanh", 6: "sigmoid"}


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


def lstm_mul_params(scale1: float, scale2: float, out_scale: float) -> Tuple[int, int]:
    """CreateInterGateMulParams: QuantizeMultiplier of s1 * s2 / s_out in double from float32 scales."""
    real = float(np.float32(scale1)) * float(np.float32(scale2)) / float(np.float32(out_scale))
    return quantize_multiplier(real)


def lstm_params(input_q, weights, biases, hidden_q, cell_scale, cell_clip, cell_activation=4) -> LstmParams:
    """The kernel's parameters from the tensors: input_q and hidden_q (scale, zero point); weights a
    list of 8 (int8 array, scale): input-to i, f, c, o then recurrent-to i, f, c, o; biases 4 int32
    arrays; cell_scale the cell state's scale; cell_clip the options' CellClip."""
    in_scale, in_zp = input_q
    h_scale, h_zp = hidden_q
    gate_scale = float(np.float32(LSTM_GATE_INPUT_SCALE))
    requant = [quantize_multiplier(float(np.float32(s_in)) * float(np.float32(w_scale)) / gate_scale)
               for s_in, (_, w_scale) in zip([in_scale] * 4 + [h_scale] * 4, weights)]
    out_scale = float(np.float32(LSTM_GATE_OUTPUT_SCALE))
    return LstmParams(
        input_weights=np.stack([np.asarray(w, np.int64) for w, _ in weights[:4]]),
        recurrent_weights=np.stack([np.asarray(w, np.int64) for w, _ in weights[4:]]),
        biases=np.stack([np.asarray(b, np.int64).reshape(-1) for b in biases]),
        input_requant=tuple(requant[:4]), recurrent_requant=tuple(requant[4:]),
        input_zero_point=int(in_zp), hidden_zero_point=int(h_zp),
        forget_cell_mul=lstm_mul_params(out_scale, cell_scale, cell_scale),
        input_cell_mul=lstm_mul_params(out_scale, out_scale, cell_scale),
        hidden_mul=lstm_mul_params(out_scale, out_scale, h_scale),
        cell_clip=quantized_cell_clip(cell_clip, cell_scale),
        cell_tanh=cell_tanh_scaling(checked_log2(cell_scale)),
        cell_activation=LSTM_CELL_ACTIVATIONS[int(cell_activation)])


def sigmoid16(x):
    """reference_integer_ops::Logistic (int16, input multiplier 0 and left shift 0: the input
    times 3), Q3.12 in, Q0.15 out."""
    return _sigmoid_scaled(np.asarray(x, np.int64) * 3)


def _interpolated(a, shift, saturated):
    """The 256-entry table read TFLite Micro's way for |v| = a: entry a >> shift, linearly
    interpolated on the low `shift` bits, `saturated` past the table's end."""
    table = np.array(SIGMOID_TABLE + (SIGMOID_TABLE[-1],), np.int64)
    uh = a >> shift
    inside = np.minimum(uh, 254)
    ua, ub = table[inside], table[inside + 1]
    return np.where(uh >= 255, saturated, (ua << shift) + (a & ((1 << shift) - 1)) * (ub - ua))


def _sigmoid_scaled(v):
    v = np.asarray(v, np.int64)
    result = _interpolated(np.abs(v), 9, 0x7FFF << 10)
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
    result = _interpolated(np.abs(v), 8, 0xFFFF << 8)
    result = np.where(v >= 0, result - (1 << 23) + (1 << 7), -result + (1 << 23) + (1 << 7) - 1)
    return result >> 8


def _fully_connected16(x, x_zp, weights, bias, multiplier, shift):
    """reference_integer_ops::FullyConnected to int16 (output zero point 0, no activation)."""
    acc = weights @ (np.asarray(x, np.int64) - x_zp)
    if bias is not None:
        acc = acc + bias
    return np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift), INT16_MIN, INT16_MAX)


def _lstm_mul(a, b, multiplier, shift, zero_point, low, high):
    """reference_integer_ops::MulElementwise (input offsets 0)."""
    product = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    return np.clip(multiply_by_quantized_multiplier(product, multiplier, shift) + zero_point, low, high)


def lstm_gate(p: LstmParams, k: int, x_t, h):
    """Gate k (TFLite order i, f, c, o) of one step: CalculateLstmGate."""
    from_input = _fully_connected16(x_t, p.input_zero_point, p.input_weights[k], p.biases[k], *p.input_requant[k])
    from_hidden = _fully_connected16(h, p.hidden_zero_point, p.recurrent_weights[k], None, *p.recurrent_requant[k])
    total = np.clip(from_input + from_hidden, INT16_MIN, INT16_MAX)
    if LSTM_GATES[k] == "cell" and p.cell_activation == "tanh":
        return tanh16(total)
    return sigmoid16(total)


def lstm_step(p: LstmParams, x_t, h, c):
    """One LstmStep: (new hidden state int8 values, new cell state int16 values)."""
    i, f, g, o = (lstm_gate(p, k, x_t, h) for k in range(4))
    c = _lstm_mul(f, c, *p.forget_cell_mul, 0, INT16_MIN, INT16_MAX)
    c = np.clip(c + _lstm_mul(i, g, *p.input_cell_mul, 0, INT16_MIN, INT16_MAX), INT16_MIN, INT16_MAX)
    if p.cell_clip > 0:
        c = np.clip(c, -p.cell_clip, p.cell_clip)
    h = _lstm_mul(tanh16(c, *p.cell_tanh), o, *p.hidden_mul, p.hidden_zero_point, -128, 127)
    return h, c


def lstm_reset_state(p: LstmParams):
    """(hidden, cell) as ResetVariableTensors sets them: the hidden state's zero point, 0."""
    return np.full(p.hidden, p.hidden_zero_point, np.int64), np.zeros(p.hidden, np.int64)


def lstm(p: LstmParams, x, state=None):
    """EvalLstm over one sequence x [T, F] (int8 values) from `state` (hidden, cell), by default
    the reset state: [T, H] int8. A given state is left updated (Invoke() without a reset)."""
    h, c = lstm_reset_state(p) if state is None else state
    out = []
    for x_t in np.asarray(x, np.int64).reshape(-1, p.features):
        h, c = lstm_step(p, x_t, h, c)
        out.append(h)
    if state is not None:
        state[0][...], state[1][...] = h, c
    return np.stack(out).astype(np.int8)


def lstm_params_of(graph, op) -> LstmParams:
    """The kernel's parameters of a UNIDIRECTIONAL_SEQUENCE_LSTM operator of a graph read by
    nnbuild.frontends.tflite (the front-end checked its tensors)."""
    tensors = graph.tensors

    def q(index):
        quant = tensors[index].quantization
        return float(quant.scales[0]), int(quant.zero_points[0])
    weights = [(tensors[op.inputs[k]].data, q(op.inputs[k])[0]) for k in range(1, 9)]
    biases = [tensors[op.inputs[k]].data for k in range(12, 16)]
    options = op.options or {}
    return lstm_params(q(op.inputs[0]), weights, biases, q(op.inputs[LSTM_HIDDEN_STATE]),
                       q(op.inputs[LSTM_CELL_STATE])[0],
                  float(options.get("CellClip", 0.0) or 0.0), int(options.get("FusedActivationFunction", 4)))


def slice_plan(shape, begin, end, strides, options):
    """(starts, steps, counts, kept) of TFLite's STRIDED_SLICE on a tensor of `shape` (the batch
    axis first, which must stay whole): per sample axis the first index, the step and the count,
    and the shape that remains after the shrunk axes. Python's slice clamping is TFLite's
    (StartForAxis, StopForAxis); ellipsis, new-axis and offset slicing raise ValueError."""
    begin, end, strides = (np.asarray(v).astype(np.int64).reshape(-1) for v in (begin, end, strides))
    if options.get("EllipsisMask", 0) or options.get("NewAxisMask", 0) or options.get("Offset", False):
        raise ValueError("ellipsis, new-axis or offset slicing")
    if not len(begin) == len(end) == len(strides) <= len(shape):
        raise ValueError(f"begin/end/strides of lengths {len(begin)}, {len(end)}, {len(strides)} for rank {len(shape)}")
    starts, steps, counts, kept = [], [], [], []
    for k, n in enumerate(shape):
        shrink = False
        if k >= len(begin):
            idx = range(n)
        elif strides[k] == 0:
            raise ValueError("a stride of 0")
        elif options.get("ShrinkAxisMask", 0) >> k & 1:
            i = int(begin[k])
            if not -n <= i < n:
                raise ValueError(f"index {i} out of range for an axis of size {n}")
            idx, shrink = range(i % n, i % n + 1), True
        else:
            b = None if options.get("BeginMask", 0) >> k & 1 else int(begin[k])
            e = None if options.get("EndMask", 0) >> k & 1 else int(end[k])
            idx = range(n)[slice(b, e, int(strides[k]))]
        if len(idx) == 0:
            raise ValueError("an empty slice")
        if k == 0:
            if len(idx) != 1:
                raise ValueError("slicing the batch axis")
            continue
        starts.append(idx.start)
        steps.append(idx.step)
        counts.append(len(idx))
        if not shrink:
            kept.append(len(idx))
    return tuple(starts), tuple(steps), tuple(counts), tuple(kept)


def strided_slice(x, begin, end, strides, options):
    """reference_ops::StridedSlice of one sample x (no batch axis): the int8 values moved unchanged."""
    starts, steps, counts, kept = slice_plan((1,) + tuple(np.shape(x)), begin, end, strides, options)
    index = np.ix_(*[start + step * np.arange(count) for start, step, count in zip(starts, steps, counts)])
    return np.asarray(x)[index].reshape(kept)


def run(graph, x_q, states=None):
    """The int8 output of a full-integer TFLite graph (nnbuild.frontends.tflite.Graph) for one
    sample x_q (int8, the input tensor's shape without the batch axis; a graph of several inputs: a
    list, one per input); a graph of several outputs gives a list, one per output. `states`: a dict
    that keeps each LSTM's (hidden, cell) state by operator index from call to call (TFLite Micro's
    Invoke() without a reset); without it every LSTM starts from the reset state."""
    xs = list(x_q) if isinstance(x_q, (list, tuple)) else [x_q]
    if len(xs) != len(graph.inputs):
        raise ValueError(f"{len(xs)} input arrays for the graph's {len(graph.inputs)} inputs")
    values = {i: np.asarray(x, np.int64).reshape(graph.tensors[i].shape[1:]) for i, x in zip(graph.inputs, xs)}
    consts = {t.index: t.data for t in graph.tensors if t.data is not None}

    def q(index):
        quant = graph.tensors[index].quantization
        return quant.scales, quant.zero_points

    for op in graph.operators:
        name, opt = op.op, op.options
        if name in ("SHAPE", "PACK") or (name == "STRIDED_SLICE" and op.inputs[0] not in values):
            continue  # shape arithmetic: the declared output shapes are used instead
        out = op.outputs[0]
        out_shape = graph.tensors[out].shape[1:]
        if name == "STRIDED_SLICE":
            values[out] = strided_slice(values[op.inputs[0]], *(consts[i] for i in op.inputs[1:4]), opt)
            continue
        if name == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            p = lstm_params_of(graph, op)
            state = None if states is None else states.setdefault(op.index, lstm_reset_state(p))
            values[out] = lstm(p, values[op.inputs[0]], state).reshape(out_shape)
            continue
        if name in ("RESHAPE", "EXPAND_DIMS"):
            values[out] = values[op.inputs[0]].reshape(out_shape)
            continue
        if name == "CONCATENATION":
            if not all(
                    np.array_equal(q(i)[0], q(out)[0]) and np.array_equal(q(i)[1], q(out)[1]) for i in op.inputs):
                raise NotImplementedError(f"operator {op.index} (CONCATENATION) of inputs quantized differently")
            axis = int(opt["Axis"]) % len(graph.tensors[out].shape) - 1
            if axis < 0:
                raise NotImplementedError(f"operator {op.index} (CONCATENATION) along the batch axis")
            values[out] = np.concatenate([values[i] for i in op.inputs], axis)
            continue
        if name in ("PAD", "PADV2"):
            pads = np.asarray(consts[op.inputs[1]]).astype(np.int64)[1:]
            (_,), (zp,) = q(out)
            fill = int(consts[op.inputs[2]].reshape(-1)[0]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else int(zp)
            values[out] = np.pad(values[op.inputs[0]], [tuple(p) for p in pads], constant_values=fill)
            continue
        (out_scale,), (out_zp,) = q(out)
        (in_scale,), (in_zp,) = q(op.inputs[0])
        x = values[op.inputs[0]]
        low, high = activation_range(int(opt.get("FusedActivationFunction", 0)), out_scale, int(out_zp))
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            filters = consts[op.inputs[1]]
            bias = consts.get(op.inputs[2]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
            w_scales, w_zps = q(op.inputs[1])
            multipliers, shifts = channel_multipliers(in_scale, w_scales, out_scale)
            if name == "FULLY_CONNECTED":
                values[out] = fully_connected(x, int(in_zp), filters, int(w_zps[0]), bias, multipliers, shifts,
                                              int(out_zp), low, high).reshape(out_shape)
                continue
            dilation = (int(opt.get("DilationHFactor", 1)), int(opt.get("DilationWFactor", 1)))
            strides, pads = window_padding(opt, x.shape, filters.shape[1:3], dilation)
            kernel = conv_2d if name == "CONV_2D" else depthwise_conv_2d
            values[out] = kernel(x, int(in_zp), filters, bias, multipliers, shifts, int(out_zp), low, high,
                                 strides, dilation, pads)
        elif name in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
            size = (int(opt["FilterHeight"]), int(opt["FilterWidth"]))
            strides, pads = window_padding(opt, x.shape, size, (1, 1))
            pool = max_pool_2d if name == "MAX_POOL_2D" else average_pool_2d
            values[out] = pool(x, size, strides, pads, low, high)
        elif name == "HARD_SWISH":
            values[out] = hard_swish(x, (in_scale, int(in_zp)), (out_scale, int(out_zp)))
        elif name == "LEAKY_RELU":
            values[out] = leaky_relu(x, float(opt.get("Alpha", 0.0)), (in_scale, int(in_zp)),
                                     (out_scale, int(out_zp)))
        elif name == "RELU":
            values[out] = relu(x, (in_scale, int(in_zp)), (out_scale, int(out_zp)))
        elif name == "RELU6":
            values[out] = relu6(x, in_scale, int(in_zp))
        elif name == "QUANTIZE":
            values[out] = requantize(x, (in_scale, int(in_zp)), (out_scale, int(out_zp)))
        elif name in ("MAXIMUM", "MINIMUM", "TRANSPOSE", "REDUCE_MAX"):
            values[out] = _raw(graph, op, values, consts, x, q, out).reshape(out_shape)
        elif name == "SOFTMAX":
            values[out] = softmax(x, in_scale, float(opt.get("Beta", 1.0)))
        elif name in ("LOGISTIC", "TANH"):
            values[out] = (logistic if name == "LOGISTIC" else tanh)(x, in_scale, int(in_zp))
        elif name == "MEAN":
            rank = len(graph.tensors[op.inputs[0]].shape)
            axes = sorted({int(a) % rank - 1 for a in np.asarray(consts[op.inputs[1]]).reshape(-1)})
            if axes and axes[0] < 0:
                raise NotImplementedError(f"operator {op.index} (MEAN) over the batch axis")
            multiplier, shift = quantize_multiplier(float(in_scale) / float(out_scale))
            values[out] = mean(x, axes, bool(opt.get("KeepDims", False)), multiplier, shift, int(in_zp),
                               int(out_zp)).reshape(out_shape)
        elif name in ("ADD", "MUL", "SUB"):
            other = op.inputs[1]
            x2 = values[other] if other in values else consts[other].astype(np.int64)
            q1 = (in_scale, int(in_zp))
            (s2,), (z2,) = q(other)
            kernel = {"ADD": add, "MUL": mul, "SUB": sub}[name]
            values[out] = kernel(x, x2, q1, (s2, int(z2)), (out_scale, int(out_zp)), low, high).reshape(out_shape)
        else:
            raise NotImplementedError(f"operator {op.index} ({name}) has no int8 model yet")
    outs = [values[o].astype(np.int8) for o in graph.outputs]
    return outs if len(outs) > 1 else outs[0]
