"""Model front-ends: read a trained-model file into an nnbuild.ir.graph.Model.

Dispatch is by file suffix through FORMATS. Adding an input format = writing one module that
defines `load(path) -> Model` (and, if the model spans several files,
`implicit_dependencies(path) -> list[str]`), plus one FORMATS line. Modules are imported
lazily so a front-end's optional dependency is only needed when its format is used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

import numpy as np

from nnbuild import names
from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import LayerProblem, Model, validate


@dataclass(frozen=True)
class Format:
    """One input format: the suffixes it claims and the module that reads it."""

    name: str
    suffixes: Tuple[str, ...]
    module: str
    description: str = ""
    #: a model that is a folder (`<name><suffix>/`): the file in it that a build reads and tracks
    folder_file: str = ""


#: The registry. Suffixes are matched case-insensitively and must be unique across entries.
FORMATS: Tuple[Format, ...] = (
    Format("keras-h5", (".h5", ".hdf5"), "nnbuild.frontends.keras_h5",
           "Keras full-model HDF5 (model.save), Keras 1.2.1 to Keras 3 legacy h5"),
    Format("keras-json", (".json",), "nnbuild.frontends.keras_h5",
           "Keras2C pair: architecture.json (model.to_json()) + weights.h5 (save_weights)"),
    Format("onnx", (".onnx",), "nnbuild.frontends.onnx_graph",
           "ONNX model (opsets 7 to 22), read with the onnx package"),
    Format("gegelati-dot", (".dot",), "nnbuild.frontends.gegelati_dot",
           "GEGELATI Tangled Program Graph export (v0.5-v2.0), with an environment description"),
    Format("keras3", (".keras",), "nnbuild.frontends.keras3",
           "Keras 3 native archive (model.save('m.keras')): config.json + model.weights.h5"),
    Format("acetone-json", (), "nnbuild.frontends.acetone_json",
           "ACETONE JSON (acetone-nnet's JSON_from_keras_model): a .json told from keras-json by its content"),
    Format("nnet", (".nnet",), "nnbuild.frontends.nnet",
           "NNet text (ACAS Xu, Reluplex), with its input and output normalisation"),
    Format("nnef", (".nnef",), "nnbuild.frontends.nnef_text", "NNEF 1.0 text graph + .dat tensors (a *.nnef folder)",
           folder_file="graph.nnef"),
    Format("gravity-g", (".g",), "nnbuild.frontends.gravity_g",
           "Gravity program (.g): a network that trains itself (Givargis, ASP-DAC'21)"),
    Format("tflite", (".tflite",), "nnbuild.frontends.tflite",
           "TFLite flatbuffer (the TFLite converter's .tflite), float32, read with the tflite package"),
    Format("tflite-int8", (), "nnbuild.frontends.tflite_int8",
           "full-integer TFLite (int8 input, output and weights): a .tflite told from float32 TFLite by its tensor types"),
    Format("onnx-int8", (), "nnbuild.frontends.onnx_int8",
           "statically quantized ONNX (QuantizeLinear/DequantizeLinear, QLinearConv, QLinearMatMul): a .onnx told "
           "from float ONNX by its quantization nodes"),
    Format("nnef-items", (), "nnbuild.frontends.nnef_items",
           "multi-item NNEF (graphitem blocks, variablesync; seed 002): a .nnef told from NNEF by its content",
           folder_file="graph.nnef"),
)

#: Formats without a suffix of their own, told apart by content: (claimed suffix, format, test).
#: The test reads at most a bounded prefix of the file and never raises.
_SNIFFED = ((".json", "acetone-json", "_is_acetone_json"), (".nnef", "nnef-items", "_is_nnef_items"),
            (".tflite", "tflite-int8", "_is_tflite_int8"), (".onnx", "onnx-int8", "_is_onnx_int8"))


def _is_acetone_json(path) -> bool:
    """ACETONE's JSON (a Keras to_json() that acetone-nnet annotated) gives every layer after the
    input a `prev_layer_idx` list in its config, ahead of its inline weights; a Keras to_json()
    never has that key."""
    import re
    try:
        with open(path, "rb") as stream:
            head = stream.read(1 << 20)
    except OSError:
        return False
    return re.search(rb'"prev_layer_idx"\s*:', head) is not None


def _is_nnef_items(path) -> bool:
    """A multi-item NNEF document declares `graphitem` blocks where NNEF has one `graph`."""
    import re
    path = Path(path)
    if path.is_dir():
        path = path / "graph.nnef"
    try:
        with open(path, "rb") as stream:
            head = stream.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return False
    first = re.search(r"\b(graph|graphitem)\b", re.sub(r"#[^\n]*", "", head))
    return first is not None and first.group(1) == "graphitem"


def _is_tflite_int8(path) -> bool:
    """A full-integer TFLite model: its input and output tensors are int8 (the whole file is read,
    within limits.MAX_MODEL_FILE_BYTES, by the TFLite reader)."""
    from nnbuild.frontends import tflite_int8
    return Path(path).is_file() and tflite_int8.is_full_integer(path)


def _is_onnx_int8(path) -> bool:
    """A quantized ONNX model: a quantization node (QuantizeLinear, QLinearConv, ...) in its graph."""
    from nnbuild.frontends import onnx_int8
    return onnx_int8.is_quantized(path)


def format_for(path) -> Format:
    """The registry entry for `path`'s suffix (or, for a suffix several formats share, its content:
    _SNIFFED); an unknown suffix is an error naming the file."""
    suffix = Path(path).suffix.lower()
    for claimed, name, test in _SNIFFED:
        if suffix == claimed and globals()[test](path):
            return next(fmt for fmt in FORMATS if fmt.name == name)
    for fmt in FORMATS:
        if suffix in fmt.suffixes:
            return fmt
    known = ", ".join(s for fmt in FORMATS for s in fmt.suffixes)
    raise NNBuildError(
        f"unknown model format '{suffix or '(no suffix)'}' (supported: {known})", path=path
    )


def model_file(path):
    """For a model that is a folder (NNEF), the file in it a build reads; None for anything else."""
    path = Path(path)
    if not path.is_dir():
        return None
    for fmt in FORMATS:
        if fmt.folder_file and path.suffix.lower() in fmt.suffixes and (path / fmt.folder_file).is_file():
            return path / fmt.folder_file
    return None


def _module(fmt: Format):
    """Import the front-end module lazily (keeps `import nnbuild.frontends` cheap)."""
    return importlib.import_module(fmt.module)


def load(path, **options):
    """Read the model file `path` (any registered format) into an IR model.

    `options` that are not None go to the format's loader (environment= for a TPG); an option
    the format does not take is an error.
    """
    fmt = format_for(path)
    if not Path(path).exists():
        raise NNBuildError("model file not found", path=path)
    options = {k: v for k, v in options.items() if v is not None}
    mod = _module(fmt)
    if options:
        import inspect
        unknown = set(options) - set(inspect.signature(mod.load).parameters)
        if unknown:
            raise NNBuildError(f"option(s) {', '.join(sorted(unknown))} do not apply to {fmt.name} models",
                               path=path)
    if getattr(mod, "ISOLATE", False):
        return _in_child(_checked_load, mod, path, options)
    return _checked_load(mod, path, options)


def _checked_load(mod, path, options):
    """The loader under NumPy errors-as-exceptions, then the IR validation; every failure one line."""
    try:
        # NumPy float trouble raises (never prints a warning); loaders check values before casting.
        with np.errstate(all="raise", under="ignore"):
            model = mod.load(path, **options)
            if isinstance(model, Model):
                validate(model)
    except LayerProblem as exc:
        raise NNBuildError(str(exc), path=path,
                           item=f"layer '{exc.layer}'" if exc.layer is not None else None) from None
    except _MALFORMED as exc:  # last line of defence: a loader missed a malformed input
        raise NNBuildError(f"malformed model file ({type(exc).__name__}: {_short(exc)})", path=path) from None
    return model


#: seconds a loader that runs in a child process may take (NNBUILD_LOAD_TIMEOUT overrides)
LOAD_TIMEOUT_S = 120.0


def _in_child(function, mod, path, options):
    """Run a loader in a forked child with a time limit: the HDF5 C library can loop forever (and
    ignore signals) on a damaged file; the child is killed and the user gets one line instead."""
    import multiprocessing
    import os
    try:
        timeout = float(os.environ.get("NNBUILD_LOAD_TIMEOUT", LOAD_TIMEOUT_S))
    except ValueError:
        timeout = LOAD_TIMEOUT_S
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(send, function, mod, path, options), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout):
            raise NNBuildError(f"reading the file did not finish in {timeout:g} s (a damaged file can make the "
                               "HDF5 library loop; NNBUILD_LOAD_TIMEOUT sets the limit)", path=path)
        try:
            ok, value = receive.recv()
        except EOFError:
            raise NNBuildError(f"the reader died ({_exit_text(child)}) on this file", path=path) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if not ok:
        raise value
    return _read_only(value)


def _read_only(model):
    """Weights stay read-only across the pipe (pickling drops the flag)."""
    for layer in getattr(model, "layers", ()):
        for value in vars(layer).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
    return model


def _child_main(send, function, mod, path, options):
    try:
        result = (True, function(mod, path, options))
    except NNBuildError as error:
        result = (False, NNBuildError(str(error)))
    except BaseException as error:  # noqa: BLE001 - reported as one line in the parent
        result = (False, NNBuildError(f"malformed model file ({type(error).__name__}: {_short(error)})",
                                      path=path))
    try:
        send.send(result)
    finally:
        send.close()


def _exit_text(child):
    child.join(1)
    code = child.exitcode
    return f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"


#: What a loader may raise on input it failed to check: turned into one NNBuildError line naming
#: the file (each loader should still say which layer and what; this only keeps tracebacks out).
_MALFORMED = (ValueError, TypeError, LookupError, AttributeError, ArithmeticError, RecursionError,
              OSError, MemoryError)


def _short(exc, limit=200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def kind_of(path) -> str:
    """The model kind a file loads as (its front-end's KIND, "nn" by default), from its format alone
    (never opens it)."""
    return getattr(_module(format_for(path)), "KIND", "nn")


def takes_option(path, option) -> bool:
    """True when the front-end of `path`'s format takes `option` (e.g. environment= for a TPG)."""
    import inspect
    return option in inspect.signature(_module(format_for(path)).load).parameters


def implicit_dependencies(path) -> List[str]:
    """Other files `path` needs (for SCons scanners), e.g. the weights.h5 of an architecture.json.

    Paths are next to `path` and keep its relative/absolute form. A dependency that does not
    exist yet is still reported (by its expected name) so the build can make or flag it.
    """
    mod = _module(format_for(path))
    fn = getattr(mod, "implicit_dependencies", None)
    return [str(p) for p in fn(path)] if fn else []


# The identifier rule lives in nnbuild.names (shared by every layer); kept importable from here.
c_identifier = names.c_identifier
