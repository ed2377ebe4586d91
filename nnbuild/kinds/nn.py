"""Neural networks: the layer graph of nnbuild.ir, loaded by the Keras (and later ONNX, NNEF, NNet)
front-ends, run through the default passes, checked as max |C - float64 reference|."""

import numpy as np

from nnbuild import codegen, kinds, passes
from nnbuild.checks import data as check_data
from nnbuild.checks.inputs import check_inputs
from nnbuild.checks.semantic import max_abs_error
from nnbuild.ir import reference
from nnbuild.numerics.formats import FIXED_PRECISIONS
from nnbuild.runners import CHECK_MAIN, CheckIO

NAME = "nn"
SHAPES = tuple(codegen.shapes_of_kind(NAME))
PRECISIONS = ("float32", "float64") + tuple(FIXED_PRECISIONS)
IO = CheckIO(input="<f4", output="<f4")
#: how a semantic violation and the report's error line read for this kind
VIOLATION = "max error {error:.3g} > tolerance {tolerance:.3g} ({label} run vs float64 reference)"
SUMMARY = "  max error: {errors} vs float64 reference, tolerance {tolerance:g}"
ERROR_FORMAT = "{:.3g}"


def load(path, name=None, environment=None):
    """Front-end, then the default passes: (model, passes log)."""
    return passes.run(kinds.load_file(path, name, environment))


def precision_refusal(precision):
    """int8 is the arithmetic of full-integer quantized models (their own scales and zero points)."""
    if precision == "int8":
        return ("precision int8 is TFLite Micro's int8 arithmetic: it needs a full-integer quantized .tflite model "
                "(int8 input, output and weights); this model is float (for int8 weights here: q8)")
    return None


def check_main():
    return CHECK_MAIN


def check_defines(name):
    """check_main.c (or int8_check_main.c, which takes the same macros) bound to model `name` through
    its generated header's macros (the model file is not opened while SCons reads the build
    description)."""
    api = codegen.api(name)
    return [("NN_HEADER", f'"{api["header"]}"'), ("NN_INFER", api["infer"]),
            ("NN_IN", api["inputs_macro"]), ("NN_OUT", api["outputs_macro"]),
            ("NN_INPUT_COUNT", api["input_count_macro"]), ("NN_ARGS", api["args_macro"])]


def reference_arrays(model, count, seed, input_range, data=None):
    """inputs.npz: x (float32: what the C reads), y = the float64 reference on x, and the file's own
    expected outputs as y_framework when the inputs come from a user's data file."""
    framework = None
    if data:
        x, framework = check_data.load(data, model.input_size, model.output_size, parts=check_data.parts_of(model))
        x = x.astype(np.float32)
    else:
        x = check_inputs(model.input_size, count, seed, input_range)
    y = reference.run_flat(model, x, dtype=np.float64)
    return check_arrays(NAME, model, x, np.asarray(y).reshape(len(x), -1), framework)


def check_arrays(kind_name, model, x, y, framework=None):
    """inputs.npz's arrays: x, y, the kind, the outputs' C arguments of a model of several outputs
    (in the order y holds them: errors per output), and a data file's own outputs as y_framework."""
    arrays = {"x": x, "y": y, "kind": np.array(kind_name)}
    if model.several_io:   # the outputs' C arguments, in the order y holds them: errors per output
        outs = [a for a in model.arguments() if a["role"] == "out"]
        arrays["output_names"] = np.array([a["name"] for a in outs])
        arrays["output_sizes"] = np.array([a["size"] for a in outs])
    if framework is not None:
        arrays["y_framework"] = framework
    return arrays


def decode(outputs, path=None):
    return outputs


def compare(runs, reference_npz, tolerance):
    """The semantic record: per run, max |C - reference| (and |C - y_framework| when given)."""
    expected = reference_npz["y"]
    framework = reference_npz["y_framework"] if "y_framework" in reference_npz else None
    results = {"kind": NAME, "tolerance": tolerance, "cases": int(len(expected)), "violation": VIOLATION,
               "summary": SUMMARY, "error_format": ERROR_FORMAT, "runs": {}}
    for label, outputs in runs.items():
        error, worst = max_abs_error(outputs, expected)
        run = {"max_abs_error": error, "worst_case": worst, "case_errors": case_errors(outputs, expected)}
        if framework is not None:
            run["vs_reference"] = error
            run["vs_framework"] = max_abs_error(outputs, framework)[0]
            run["max_abs_error"] = max(error, run["vs_framework"])
            run["case_errors_framework"] = case_errors(outputs, framework)
        if "output_sizes" in reference_npz:
            run["max_abs_error_by_output"] = errors_by_output(outputs, expected, reference_npz)
        results["runs"][label] = run
    return results


def errors_by_output(outputs, expected, reference_npz):
    """[{"output": argument, "max_abs_error": max |C - reference| over its values}] of a model of
    several outputs, in the model's order (a list: the JSON files sort object keys)."""
    outputs = np.asarray(outputs).reshape(len(outputs), -1)
    expected = np.asarray(expected).reshape(len(expected), -1)
    out, at = [], 0
    for name, size in zip(reference_npz["output_names"].tolist(), reference_npz["output_sizes"].tolist()):
        error = max_abs_error(outputs[:, at:at + int(size)], expected[:, at:at + int(size)])[0]
        out.append({"output": str(name), "max_abs_error": error})
        at += int(size)
    return out


def case_errors(outputs, expected):
    """max |C - reference| of each case (a list of floats, in case order), measured as
    max_abs_error measures the whole run (NaN and infinity rules included): its max is the run's."""
    outputs = np.asarray(outputs).reshape(len(outputs), -1)
    expected = np.asarray(expected).reshape(len(expected), -1)
    if outputs.shape != expected.shape:
        return []  # max_abs_error has already refused the run
    return [max_abs_error(outputs[i:i + 1], expected[i:i + 1])[0] for i in range(len(outputs))]


def describe(results):
    lines = []
    for label, run in sorted(results["runs"].items()):
        if "vs_framework" in run:
            lines.append(f"{label}: {results['cases']} inputs, max |C - y| = {run['vs_framework']:.3g}, "
                         f"max |C - reference| = {run['vs_reference']:.3g}")
        else:
            lines.append(f"{label}: max |C - reference| = {run['max_abs_error']:.3g} over {results['cases']} inputs")
    return lines



def check_line(results, name, label, shape):
    """`nnbuild check`'s summary of the one run."""
    run = results["runs"][label]
    line = f"{name} on {label}: {results['cases']} inputs"
    if "vs_framework" in run:
        line += f", max |C - y| = {run['vs_framework']:.3g}"
    return line + f", max |C - reference| = {run.get('vs_reference', run['max_abs_error']):.3g}"


def check_failure(results, label):
    """The one line `nnbuild check` fails with, or None."""
    run = kinds.failed_run(results, label)
    return run and f"max error {run['max_abs_error']:.3g} > tolerance {results['tolerance']:.3g}"
