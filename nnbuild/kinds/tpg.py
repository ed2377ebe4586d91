"""Tangled Program Graphs (GEGELATI, nnbuild.ir.tpg): the second model kind.

What differs from a neural network: the check inputs are observations (float64) and the outputs
action ids; the check program is tpg_check_main.c (binary64 observations in, int32 actions out on a
host pipe; on AVR the harness moves floats, avr-gcc's double being 32 bits); the semantic check
counts mismatching actions, where zero is the only pass unless the user allows some (`tolerance` =
the number of actions allowed to differ, e.g. for a 32-bit double target). A TPG computes in the C
type double of its environment: number formats do not apply.
"""

import gzip
from pathlib import Path

import numpy as np

from nnbuild import codegen, kinds
from nnbuild.checks import data as check_data
from nnbuild.checks.inputs import check_inputs
from nnbuild.errors import NNBuildError
from nnbuild.ir import tpg_reference
from nnbuild.runners import CheckIO, tpg_run

NAME = "tpg"
SHAPES = tuple(codegen.shapes_of_kind(NAME))
PRECISIONS = ("float32",)
IO = CheckIO(input="<f8", output="<i4")
VIOLATION = "{error:.0f} of {cases} actions differ from the reference ({label} run), {tolerance:.0f} allowed"
SUMMARY = "  actions  : {errors} of {cases} differ from the reference, allowed {tolerance:g}"
ERROR_FORMAT = "{:.0f}"


def load(path, name=None, environment=None):
    """The graph and its environment; no graph passes apply: (model, [])."""
    return kinds.load_file(path, name, environment), []


def check_main():
    return tpg_run.TPG_CHECK_MAIN


def check_defines(name):
    """tpg_check_main.c bound to model `name` through its generated header's macros."""
    guard = name.upper()
    return [("NN_HEADER", f'"{name}.h"'), ("NN_INFER_FLAT", f"{guard}_INFER_FLAT"), ("NN_IN", f"{guard}_INPUTS")]


def check_observations(model, count, seed, input_range):
    """Seeded observations: the range corners, then random ones, every other one rounded to an
    integer (so both the integer-table and the libm paths of the generated code are checked)."""
    x = check_inputs(model.input_size, count, seed, input_range).astype(np.float64)
    corners = len(x) - count
    x[corners + 1::2] = np.round(x[corners + 1::2])
    return x


def load_observations(path, n_in):
    """Recorded observations [N, n_in] (float64) from a .npz (x), a .npy, or raw bytes (.u8, .u8.gz:
    one byte per input value, the format of the SiPS'22 traces)."""
    path = Path(path)
    if path.suffix == ".npz":
        return check_data.load(path, n_in)[0]
    try:
        if path.suffix == ".npy":
            x = np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
        else:
            raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
            if len(raw) % n_in:
                raise NNBuildError(f"{len(raw)} bytes is not a whole number of {n_in}-byte observations", path=path)
            x = np.frombuffer(raw, dtype=np.uint8).astype(np.float64)
    except (OSError, KeyError, ValueError, EOFError) as exc:
        raise NNBuildError(f"cannot read observations: {' '.join(str(exc).split())}", path=path) from None
    if x.ndim == 1 and x.size % n_in == 0:
        x = x.reshape(-1, n_in)
    elif x.ndim > 1:
        x = x.reshape(len(x), -1)
    if x.ndim != 2 or x.shape[1] != n_in or not len(x):
        raise NNBuildError(f"observations of shape {x.shape}, the model reads {n_in} values each", path=path)
    return x


def reference_arrays(model, count, seed, input_range, data=None):
    """inputs.npz: observations and the reference interpreter's actions.

    With `data` (recorded observations, .npz/.npy/.u8[.gz]): `count` of them evenly spaced over a
    recording, or every case of an .npz with its recorded actions `y` (kept as y_framework);
    otherwise seeded ones over `input_range`."""
    framework = None
    if data and Path(data).suffix == ".npz":
        x, framework = check_data.load(data, model.input_size, 1, what_out="actions")
    elif data:
        recorded = load_observations(data, model.input_size)
        x = recorded[np.unique(np.linspace(0, len(recorded) - 1, min(count, len(recorded))).round().astype(int))]
    else:
        x = check_observations(model, count, seed, input_range)
    arrays = {"x": x, "y": tpg_reference.run(model, x).reshape(-1, 1), "kind": np.array(NAME)}
    if framework is not None:
        arrays["y_framework"] = framework
    return arrays


def decode(outputs, path=None):
    """Action ids (int64 [N]); a float from a 32-bit-double target must be an exact integer."""
    out = np.asarray(outputs).reshape(-1)
    if out.dtype.kind == "f" and (not np.all(np.isfinite(out)) or not np.all(out == np.round(out))):
        raise NNBuildError("the check program returned a non-integer action", path=path)
    return out.astype(np.int64).reshape(-1, 1)


def mismatches(actions, expected):
    """(number of differing actions, index of the first one or None)."""
    a = np.asarray(actions).reshape(-1).astype(np.int64)
    e = np.asarray(expected).reshape(-1).astype(np.int64)
    if a.shape != e.shape:
        raise NNBuildError(f"{len(a)} actions for {len(e)} expected")
    diff = np.flatnonzero(a != e)
    return int(len(diff)), (int(diff[0]) if len(diff) else None)


def mismatch_cases(actions, expected):
    """The case indices whose action differs from the expected one (a list of ints, ascending)."""
    a = np.asarray(actions).reshape(-1).astype(np.int64)
    e = np.asarray(expected).reshape(-1).astype(np.int64)
    return [int(i) for i in np.flatnonzero(a != e)] if a.shape == e.shape else []


def compare(runs, reference_npz, tolerance=0):
    """The semantic record: per run the mismatching actions against the reference (and against the
    recorded actions y_framework when given). `max_abs_error` (what the report and gates read) is the
    mismatch count, `tolerance` the count allowed (0: every action identical)."""
    expected = reference_npz["y"]
    framework = reference_npz["y_framework"] if "y_framework" in reference_npz else None
    tolerance = int(tolerance) if tolerance and tolerance >= 1 else 0
    results = {"kind": NAME, "tolerance": tolerance, "cases": int(len(expected)), "violation": VIOLATION,
               "summary": SUMMARY, "error_format": ERROR_FORMAT, "runs": {}}
    for label, actions in runs.items():
        count, first = mismatches(actions, expected)
        run = {"mismatches": count, "first_mismatch": first, "max_abs_error": count,
               "worst_case": first if first is not None else 0,
               "mismatch_cases": mismatch_cases(actions, expected)}
        if framework is not None:
            run["vs_framework"], run["first_framework_mismatch"] = mismatches(actions, framework)
            run["max_abs_error"] = max(count, run["vs_framework"])
        results["runs"][label] = run
    return results


def describe(results):
    """One line per run, e.g. `host: 0 of 37 actions differ from the reference`."""
    lines = []
    for label, run in sorted(results["runs"].items()):
        line = f"{label}: {run['mismatches']} of {results['cases']} actions differ from the reference"
        if run["mismatches"]:
            line += f" (first at case {run['first_mismatch']})"
        if "vs_framework" in run:
            line += f", {run['vs_framework']} from y"
        lines.append(line)
    return lines


def check_line(results, name, label, shape):
    """`nnbuild check`'s summary of the one run."""
    run = results["runs"][label]
    line = f"{name} ({shape}) on {label}: {results['cases']} observations"
    if "vs_framework" in run:
        line += f", {run['vs_framework']} actions differ from y"
    return line + f", {run['mismatches']} from the reference"


def check_failure(results, label):
    """The one line `nnbuild check` fails with, or None."""
    run = kinds.failed_run(results, label)
    if run is None:
        return None
    framework = run.get("vs_framework", 0)
    if framework >= run["mismatches"]:
        first = run.get("first_framework_mismatch")
        return f"{framework} of {results['cases']} actions differ from y (first at observation {first})"
    return (f"{run['mismatches']} of {results['cases']} actions differ from the reference "
            f"(first at observation {run['first_mismatch']})")
