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


#: The registry. Suffixes are matched case-insensitively and must be unique across entries.
FORMATS: Tuple[Format, ...] = (
    Format("keras-h5", (".h5", ".hdf5"), "nnbuild.frontends.keras_h5",
           "Keras full-model HDF5 (model.save), Keras 1.2.1 to Keras 3 legacy h5"),
    Format("keras-json", (".json",), "nnbuild.frontends.keras_h5",
           "Keras2C pair: architecture.json (model.to_json()) + weights.h5 (save_weights)"),
    Format("gegelati-dot", (".dot",), "nnbuild.frontends.gegelati_dot",
           "GEGELATI Tangled Program Graph export (v0.5-v2.0), with an environment description"),
)


def format_for(path) -> Format:
    """The registry entry for `path`'s suffix; an unknown suffix is an error naming the file."""
    suffix = Path(path).suffix.lower()
    for fmt in FORMATS:
        if suffix in fmt.suffixes:
            return fmt
    known = ", ".join(s for fmt in FORMATS for s in fmt.suffixes)
    raise NNBuildError(
        f"unknown model format '{suffix or '(no suffix)'}' (supported: {known})", path=path
    )


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
