"""The pipeline's steps as library calls: the CLI, the SCons actions and the tests all use these."""

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from nnbuild import boards, codegen, frontends, passes, tpg_pipeline
from nnbuild.checks.inputs import check_inputs
from nnbuild.errors import NNBuildError
from nnbuild.ir import reference


def load_model(path, name=None, environment=None):
    """Front-end + default passes; `name` (the C prefix) overrides the file-derived one;
    `environment` is the environment description a Tangled Program Graph (.dot) needs."""
    model = frontends.load(path, environment=environment)
    if name:
        model.name = name
    if tpg_pipeline.is_tpg(model):
        return model, []
    return passes.run(model)


def loaded(model, name=None, environment=None, passes_log=None):
    """(model, passes log) from a model file path, or from a model already loaded (loaded once)."""
    if isinstance(model, (str, os.PathLike)):
        return load_model(model, name, environment)
    return model, list(passes_log or [])


def generate(model, outdir, *, name=None, shape="auto", precision="float32", storage="const",
             input_range=None, environment=None, passes_log=None):
    """The C of `model` (a file path, or a model from load_model) in outdir."""
    model, log = loaded(model, name, environment, passes_log)
    return codegen.generate(model, outdir, shape=shape, precision=precision, storage=storage, passes_log=log,
                            input_range=input_range)


def write_reference(model_path, output, *, count, seed, input_range, environment=None,
                    data=None):
    """Check inputs and the float64 reference outputs for them, in one .npz (x, y)."""
    model, _ = load_model(model_path, environment=environment)
    if tpg_pipeline.is_tpg(model):
        return save_npz(output, **tpg_pipeline.reference_arrays(model, count, seed, input_range, data))
    if data:
        raise NNBuildError("check inputs from a data file are supported for TPG models only", path=data)
    x = check_inputs(model.input_size, count, seed, input_range)
    y = reference.run(model, x.reshape((len(x),) + tuple(model.input_shape)), dtype=np.float64)
    save_npz(output, x=x, y=np.asarray(y).reshape(len(x), -1))


#: user-mode emulators that run a cross-built check program like a native one (stdin/stdout)
EMULATORS = ("qemu-arm",)


def run_cases(board, program, inputs, n_out, *, entry=None, harness=None, kind="nn"):
    """Run the check program on the board's simulator: (outputs, cycles or None)."""
    if kind == tpg_pipeline.KIND:
        return tpg_pipeline.run_cases(board, program, inputs, entry=entry, harness=harness, emulators=EMULATORS)
    simulator = board.get("simulator")
    if simulator == "native":
        from nnbuild.runners import native
        return native.run_cases(program, inputs, n_out), None
    if simulator in EMULATORS:
        from nnbuild.runners import native
        return native.run_cases(program, inputs, n_out, prefix=[simulator], timeout=600.0), None
    if simulator == "simavr":
        from nnbuild.runners import simavr
        if not harness:
            raise NNBuildError("a simavr run needs the harness (--harness)")
        return simavr.run_cases(program, inputs, n_out, entry_symbol=entry, mcu=board["mcu"],
                                freq=board["clock_hz"], harness=harness, nm=board.get("nm", "avr-nm"))
    raise NNBuildError(f"board '{board['name']}' has no simulator nnbuild can run ({simulator})")


def save_npz(path, **arrays):
    """np.savez to a temp file then rename: a failed step leaves no output behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_json(path, obj):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def load_board(name_or_path):
    """A board by name (toolchains/NAME.json) or by a path to its JSON file."""
    if str(name_or_path).endswith(".json"):
        with open(name_or_path) as f:
            board = json.load(f)
        board.setdefault("name", Path(name_or_path).stem)
        return board
    return boards.load_board(name_or_path)


def build_check_program(model, board, workdir, *, name=None, shape="auto", precision="float32", opt=None,
                        input_range=None, environment=None, passes_log=None):
    """Generate, compile and link the check program for `board` outside SCons: (program, harness).

    The generated files (with the flow facts) stay in workdir/gen; the harness is None unless the
    board runs on simavr.
    """
    from nnbuild.compilers import family
    from nnbuild.runners import CHECK_MAIN, check_main_defines
    codegen.check_precision(precision, board)
    model, log = loaded(model, name, environment, passes_log)
    workdir = Path(workdir)
    files = generate(model, workdir / "gen", shape=shape, precision=precision, passes_log=log,
                     storage=board.get("weights_storage", "const"), input_range=input_range)
    if tpg_pipeline.is_tpg(model):
        return tpg_pipeline.build_check_program(model, files, board, workdir, opt)
    sources = [f for f in files if f.suffix == ".c"] + [CHECK_MAIN]
    suffix = ".elf" if board.get("simulator") != "native" else ""
    defines = check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size)
    program = family(board).build_executable(board, sources, workdir / f"check{suffix}",
                                             include_dirs=[workdir / "gen"], opt=opt,
                                             defines=[d[2:] for d in defines])
    harness = None
    if board.get("simulator") == "simavr":
        from nnbuild.runners import simavr
        harness = simavr.build_harness(workdir / "simavr_run")
    return program, harness
