"""Full-integer (int8) quantized models: TFLite Micro's int8 arithmetic, bit for bit.

What differs from a float network: the C API takes and returns int8 (the model's quantized input
and output, whose scales and zero points the header states); the reference is
nnbuild.numerics.tflm_int8, the bit-exact model of TFLite Micro's int8 reference kernels; the check
compares int8 values, so the error is counted in steps of the output's scale and the default
tolerance is 0 (bit-exact). The check program (int8_check_main.c) carries the int8 values as
float32 on the runners' wire, which holds every int8 exactly. Check data: x_q holds the quantized
inputs and y_q, when given, the quantized outputs TFLite Micro gave (else x and y, holding
integers in [-128, 127]; a model with float32 ends quantizes float x and y as its QUANTIZE does).
"""

from pathlib import Path

import numpy as np

from nnbuild import codegen, kinds
from nnbuild.checks import data as check_data
from nnbuild.errors import NNBuildError
from nnbuild.kinds import nn
from nnbuild.numerics import tflm_int8
from nnbuild.runners import CheckIO

NAME = "int8"
SHAPES = tuple(codegen.shapes_of_kind(NAME))
PRECISIONS = ("int8",)
IO = CheckIO(input="<f4", output="<f4")
CHECK_MAIN = Path(__file__).resolve().parents[1] / "runners" / "int8_check_main.c"
VIOLATION = "{error:.0f} int8 steps > tolerance {tolerance:.0f} ({label} run vs TFLite Micro's int8 kernels)"
SUMMARY = "  max error: {errors} int8 steps vs TFLite Micro's int8 kernels, tolerance {tolerance:g}"
ERROR_FORMAT = "{:.0f}"


def load(path, name=None, environment=None):
    """The quantized graph as read (no float passes apply to it): (model, [])."""
    return kinds.load_file(path, name, environment), []


def precision_refusal(precision):
    """A full-integer model keeps its quantization: it is generated in int8 only."""
    if precision != "int8":
        return (f"this model is full-integer quantized (int8 input, output and weights): it is generated in "
                f"precision int8 (TFLite Micro's arithmetic, bit for bit), not {precision}")
    return None


def check_main():
    return CHECK_MAIN


#: int8_check_main.c takes check_main.c's macros
check_defines = nn.check_defines


def reference_arrays(model, count, seed, input_range, data=None):
    """inputs.npz: x (int8 values as float32: what the check program reads), y = TFLite Micro's
    int8 outputs on x from nnbuild.numerics.tflm_int8, and the data's own y as y_framework.
    Without data: `count` seeded inputs over the whole int8 range, -128 and 127 first."""
    framework = None
    if data:
        quantized = _has_quantized_members(data)
        x, framework = check_data.load(data, model.input_size, model.output_size, parts=check_data.parts_of(model),
                                       names=("x_q", "y_q") if quantized else ("x", "y"))
        if not quantized and "float32_input" in model.meta:
            x = _quantized(model, "in", x)
        if not quantized and "float32_output" in model.meta and framework is not None:
            framework = _quantized(model, "out", framework)
        for values, what in ((x, "x"), (framework, "y")):
            if values is not None and not (np.all(values == np.round(values)) and values.min() >= -128
                                           and values.max() <= 127):
                raise NNBuildError(f"'{what}' holds values that are not int8 (an int8 model's check data are its "
                                   "quantized inputs x and outputs y, integers in [-128, 127])", path=data)
    else:
        x = np.random.default_rng(seed).integers(-128, 128, size=(max(count, 0), model.input_size))
        x[:1], x[1:2] = -128, 127
    x = np.asarray(x, np.int64)
    y = np.stack([_run_flat(model, row) for row in x]) if len(x) else np.zeros((0, model.output_size))
    return nn.check_arrays(NAME, model, x.astype(np.float32), y.astype(np.float64), framework)


def _run_flat(model, row):
    """TFLite Micro's int8 outputs for one flat row of every input's values (the model's order), as
    one flat row of every output's."""
    if not model.several_io:
        return tflm_int8.run(model.graph, row.reshape(model.input_shape)).reshape(-1)
    parts = [row[a["offset"]:a["offset"] + a["size"]].reshape(a["shape"]) for a in model.arguments() if a["role"] == "in"]
    return np.concatenate([np.asarray(y).reshape(-1) for y in tflm_int8.run(model.graph, parts)] if
                          len(model.graph.outputs) > 1 else [np.asarray(tflm_int8.run(model.graph, parts)).reshape(-1)])


def _quantized(model, role, values):
    """Float rows of every input (role "in") or output ("out") quantized argument by argument with
    its own scale and zero point (one input or output: the model's)."""
    if not model.several_io:
        return affine_quantize(values, *model.io_quantization("input" if role == "in" else "output"))
    out = np.array(values, np.float64)
    for a in model.arguments():
        if a["role"] == role:
            span = slice(a["offset"], a["offset"] + a["size"])
            out[:, span] = affine_quantize(out[:, span], a["scale"], a["zero_point"])
    return out


def affine_quantize(values, scale, zero_point):
    """TFLite Micro's QUANTIZE of float32 values to int8: round(x / scale) in float32, halves away
    from zero, plus the zero point, saturated (reference_ops::AffineQuantize)."""
    ratio = (np.asarray(values, np.float32) / np.float32(scale)).astype(np.float64)   # the float32 quotient
    rounded = np.where(ratio >= 0, np.floor(ratio + 0.5), -np.floor(-ratio + 0.5))     # std::round, exactly
    return np.clip(rounded + zero_point, -128, 127)


def _has_quantized_members(data):
    """True when the data file holds x_q (the quantized inputs, beside float x and y)."""
    import zipfile
    try:
        with zipfile.ZipFile(check_data.checked_file(data)) as archive:
            return "x_q.npy" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False     # check_data.load says what is wrong with the file


def decode(outputs, path=None):
    return outputs


def compare(runs, reference_npz, tolerance):
    """nn.compare's record (max |C - reference| here counts int8 steps), in this kind's words."""
    return dict(nn.compare(runs, reference_npz, tolerance), kind=NAME, violation=VIOLATION, summary=SUMMARY,
                error_format=ERROR_FORMAT)


def describe(results):
    lines = []
    for label, run in sorted(results["runs"].items()):
        line = f"{label}: {results['cases']} int8 inputs, max |C - TFLite Micro| = {run['max_abs_error']:.0f} steps"
        if "vs_framework" in run:
            line += f" (vs the data's y: {run['vs_framework']:.0f}, vs nnbuild's model of TFLite Micro: " \
                    f"{run['vs_reference']:.0f})"
        lines.append(line)
    return lines


def check_line(results, name, label, shape):
    run = results["runs"][label]
    exact = "bit-exact" if run["max_abs_error"] == 0 else f"{run['max_abs_error']:.0f} int8 steps off"
    line = f"{name} on {label}: {results['cases']} int8 inputs, {exact} with TFLite Micro's int8 kernels"
    if "vs_framework" in run:
        line += f" (max |C - y| = {run['vs_framework']:.0f}, max |C - reference| = {run['vs_reference']:.0f})"
    return line


def check_failure(results, label):
    run = kinds.failed_run(results, label)
    return run and (f"max error {run['max_abs_error']:.0f} int8 steps > tolerance {results['tolerance']:g} "
                    "(vs TFLite Micro's int8 kernels)")
