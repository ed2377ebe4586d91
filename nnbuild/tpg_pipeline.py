"""Pipeline steps of the second model kind, Tangled Program Graphs (pipeline.py and cli.py dispatch here).

A model tells its kind (`model.kind == "tpg"`; NN models have no such attribute). What differs
from a neural network: the check inputs are observations (float64) and the outputs action ids;
the check program is tpg_check_main.c (binary64 observations in, int32 actions out); the semantic
check counts mismatching actions, where zero is the only pass unless the user allows some
(`tolerance` = the number of actions allowed to differ, e.g. for a 32-bit double target).
The .npz files of the pipeline carry `kind = "tpg"` so the run and compare steps know.
"""

import numpy as np

from nnbuild.errors import NNBuildError

KIND = "tpg"


def is_tpg(model):
    return getattr(model, "kind", "nn") == KIND


def npz_kind(data):
    """The model kind an .npz of the pipeline was written for ("nn" when it does not say)."""
    return str(data["kind"]) if "kind" in getattr(data, "files", data) else "nn"


def check_observations(model, count, seed, input_range):
    """Seeded observations: the range corners, then random ones, every other one rounded to an
    integer (so both the integer-table and the libm paths of the generated code are checked)."""
    from nnbuild.checks.inputs import check_inputs
    x = check_inputs(model.input_size, count, seed, input_range).astype(np.float64)
    corners = len(x) - count
    x[corners + 1::2] = np.round(x[corners + 1::2])
    return x


def load_observations(path, n_in):
    """Recorded observations [N, n_in] (float64) from a .npz (x), a .npy, or raw bytes (.u8, .u8.gz:
    one byte per input value, the format of the SiPS'22 traces)."""
    import gzip
    from pathlib import Path
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path) as data:
                x = np.asarray(data["x"], dtype=np.float64)
        elif path.suffix == ".npy":
            x = np.asarray(np.load(path), dtype=np.float64)
        else:
            raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
            if len(raw) % n_in:
                raise NNBuildError(f"{len(raw)} bytes is not a whole number of {n_in}-byte observations", path=path)
            x = np.frombuffer(raw, dtype=np.uint8).astype(np.float64)
    except (OSError, KeyError, ValueError) as exc:
        raise NNBuildError(f"cannot read observations: {' '.join(str(exc).split())}", path=path) from None
    if x.ndim == 1 and x.size % n_in == 0:
        x = x.reshape(-1, n_in)
    elif x.ndim > 1:
        x = x.reshape(len(x), -1)
    if x.ndim != 2 or x.shape[1] != n_in or not len(x):
        raise NNBuildError(f"observations of shape {x.shape}, the model reads {n_in} values each", path=path)
    return x


def reference_arrays(model, count, seed, input_range, data=None):
    """{x, y, kind} for the reference .npz: observations and the reference interpreter's actions.

    With `data` (recorded observations), `count` of them evenly spaced over the recording;
    otherwise seeded ones over `input_range` (check_observations)."""
    from nnbuild.ir import tpg_reference
    if data:
        recorded = load_observations(data, model.input_size)
        x = recorded[np.unique(np.linspace(0, len(recorded) - 1, min(count, len(recorded))).round().astype(int))]
    else:
        x = check_observations(model, count, seed, input_range)
    return {"x": x, "y": tpg_reference.run(model, x).reshape(-1, 1), "kind": np.array(KIND)}


def build_check_program(model, files, board, workdir, opt=None):
    """Compile and link tpg_check_main.c with the generated files for `board` (outside SCons):
    (program, simavr harness or None)."""
    from pathlib import Path

    from nnbuild.compilers import family
    from nnbuild.runners import tpg_run
    workdir = Path(workdir)
    sources = [f for f in files if f.suffix == ".c"] + [tpg_run.TPG_CHECK_MAIN]
    suffix = ".elf" if board.get("simulator") != "native" else ""
    defines = tpg_run.check_main_defines(model.name, model.input_size)
    program = family(board).build_executable(board, sources, workdir / f"check{suffix}",
                                             include_dirs=[Path(files[0]).parent], opt=opt,
                                             defines=[d[2:] for d in defines])
    harness = None
    if board.get("simulator") == "simavr":
        from nnbuild.runners import simavr
        harness = simavr.build_harness(workdir / "simavr_run")
    return program, harness


def run_cases(board, program, x, *, entry=None, harness=None, emulators=()):
    """Action ids (int64 [N]) of a TPG check program on the board's simulator, and the cycles."""
    from nnbuild.runners import tpg_run
    simulator = board.get("simulator")
    if simulator == "native":
        return tpg_run.run_native(program, x), None
    if simulator in emulators:
        return tpg_run.run_native(program, x, prefix=[simulator]), None
    if simulator == "simavr":
        if not harness:
            raise NNBuildError("a simavr run needs the harness (--harness)")
        return tpg_run.run_simavr(program, x, entry_symbol=entry, mcu=board["mcu"], freq=board["clock_hz"],
                                  harness=harness, nm=board.get("nm", "avr-nm"))
    raise NNBuildError(f"board '{board['name']}' has no simulator nnbuild can run ({simulator})")


def mismatches(actions, expected):
    """(number of differing actions, index of the first one or None)."""
    a = np.asarray(actions).reshape(-1).astype(np.int64)
    e = np.asarray(expected).reshape(-1).astype(np.int64)
    if a.shape != e.shape:
        raise NNBuildError(f"{len(a)} actions for {len(e)} expected")
    diff = np.flatnonzero(a != e)
    return int(len(diff)), (int(diff[0]) if len(diff) else None)


def compare(runs, expected, tolerance=0):
    """semantic.json of a TPG: per run the mismatching actions against the reference.

    `max_abs_error` (what the report and gates read) is the mismatch count, `tolerance` the count
    allowed (0: every action identical)."""
    tolerance = int(tolerance) if tolerance and tolerance >= 1 else 0
    results = {"kind": KIND, "tolerance": tolerance, "cases": int(len(expected)), "runs": {}}
    for label, actions in runs.items():
        count, first = mismatches(actions, expected)
        results["runs"][label] = {"mismatches": count, "first_mismatch": first, "max_abs_error": count,
                                  "worst_case": first if first is not None else 0}
    return results


def describe(results):
    """One line per run, e.g. `host: 0 of 37 actions differ from the reference`."""
    return [f"{label}: {run['mismatches']} of {results['cases']} actions differ from the reference"
            + (f" (first at case {run['first_mismatch']})" if run["mismatches"] else "")
            for label, run in sorted(results["runs"].items())]


def is_tpg_file(path):
    """True when `path` is in a TPG format (decided by its suffix, the file is not opened)."""
    from nnbuild import frontends
    try:
        return frontends.kind_of(path) == KIND
    except NNBuildError:
        return False


def check(args, board, model, x, y, workdir):
    """`nnbuild check` of a TPG: build the C, run it on the observations `x`, count the actions that
    differ from `y` (the recorded actions, may be None) and from the reference interpreter.
    Zero is the only pass."""
    from nnbuild import pipeline
    from nnbuild.ir import tpg_reference
    program, harness = pipeline.build_check_program(model, board, workdir, shape=args.shape,
                                                    precision=args.precision, opt=args.opt)
    actions, cycles = run_cases(board, program, x, entry=f"{model.name}_infer", harness=harness,
                                emulators=pipeline.EMULATORS)
    counts = {"reference": mismatches(actions, tpg_reference.run(model, x))}
    if y is not None:
        counts["framework"] = mismatches(actions, y)
    where = "simavr" if board.get("simulator") == "simavr" else board["name"]
    shape = "switch" if args.shape == "auto" else args.shape
    line = f"{model.name} ({shape}) on {where}: {len(x)} observations"
    if "framework" in counts:
        line += f", {counts['framework'][0]} actions differ from y"
    line += f", {counts['reference'][0]} from the reference"
    if cycles is not None:
        line += f", max {int(np.max(cycles)):,} cycles"
    print(line)
    worst = max(counts.values())
    if worst[0]:
        what = "y" if counts.get("framework", (0,))[0] == worst[0] else "the reference"
        raise NNBuildError(f"{worst[0]} of {len(x)} actions differ from {what} (first at observation {worst[1]})",
                           path=args.model)
