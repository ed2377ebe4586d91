"""Model kinds as plug-ins: one module per kind (nn, tpg, gravity; next multi-item systems), all
behind one small interface, so the pipeline never asks which kind it holds.

A kind module defines:
  NAME                          the kind's name (a front-end module's KIND says which kind it loads)
  SHAPES                        code shapes it can be generated in (first = what shape=auto means)
  PRECISIONS                    candidates of precision=auto, in order of preference
  IO                            runners.CheckIO: the wire format of its check program
  CHECK_MAIN                    the check program's main (C), bound to a model by check_defines(name)
  load(path, name, environment) -> (model, passes log)
  reference_arrays(model, count, seed, input_range, data) -> {x, y, ...} for inputs.npz
  decode(outputs, path)         runner outputs -> what compare() takes
  compare(runs, reference)      -> the semantic record (errors per run, the measure's wording)
  describe(results)             -> printable lines
  entries(name, model_path)     (optional) the functions a build measures and bounds, the
                                inference entry first (default: <name>_infer; Gravity: activate, train)
  precision_refusal(precision)  (optional) why the kind's models are never built in this precision
                                (one line; int8: a full-integer model keeps its quantization)
  model_refusal(model, precision, board)  (optional) why this model cannot be built for the board
                                in this precision (one line), or None (Gravity: its blob vs RAM)

The capability check (`refusal`, `precision_candidates`) is the one place that answers whether a
kind x shape x precision x board combination can be built, for the API, the CLI and SCons alike.
"""

import importlib

from nnbuild import codegen
from nnbuild.errors import NNBuildError

#: kind name -> module
KINDS = {"nn": "nnbuild.kinds.nn", "tpg": "nnbuild.kinds.tpg", "gravity": "nnbuild.kinds.gravity",
         "multiitem": "nnbuild.kinds.multiitem", "int8": "nnbuild.kinds.int8"}

#: one set of defaults for the API, the CLI and SCons
DEFAULT_SHAPE = "auto"
DEFAULT_PRECISION = "float32"


def get(name):
    try:
        return importlib.import_module(KINDS[name])
    except KeyError:
        raise NNBuildError(f"unknown model kind '{name}' (known: {', '.join(sorted(KINDS))})") from None


def load_file(path, name=None, environment=None):
    """The model a front-end reads from `path`, its C prefix `name` (checked) when one is given:
    what every kind's load starts from."""
    from nnbuild import frontends
    model = frontends.load(path, environment=environment)
    if name:
        model.name = codegen.check_model_name(name)
    return model


def failed_run(results, label):
    """The run `label` of a check's record when its error exceeds the tolerance (what `nnbuild
    check` fails on: a NaN error fails too), else None."""
    run = results["runs"][label]
    return None if run["max_abs_error"] <= results["tolerance"] else run


def of_model(model):
    """The kind module of a loaded model (`model.kind`, "nn" for the IR graph)."""
    return get(getattr(model, "kind", "nn"))


def of_file(path):
    """The kind module of a model file, from its format alone (the file is not opened)."""
    from nnbuild import frontends
    return get(frontends.kind_of(path))


def resolve_shape(kind, shape):
    """The code shape a `shape` option means for this kind ('auto' -> the kind's first shape)."""
    shape = shape or DEFAULT_SHAPE
    if shape == "auto":
        return kind.SHAPES[0]
    if shape not in kind.SHAPES:
        raise NNBuildError(f"shape '{shape}' does not generate {kind.NAME.upper()} models "
                           f"(shapes for this model: {', '.join(kind.SHAPES)})")
    return shape


def refusal(kind, shape, precision, board=None, model=None):
    """Why this kind x shape x precision x board cannot be built (one line), or None."""
    if getattr(kind, "REFUSAL", None):
        return kind.REFUSAL
    try:
        shape = resolve_shape(kind, shape)
        codegen.check_precision(precision, board)
    except NNBuildError as error:
        return str(error)
    if hasattr(kind, "precision_refusal") and kind.precision_refusal(precision):
        return kind.precision_refusal(precision)
    why = codegen.shape_refusal(shape, precision, model)
    if why is None and model is not None and hasattr(kind, "model_refusal"):
        why = kind.model_refusal(model, precision, board)
    return why


def check(kind, shape, precision, board=None, model=None):
    """`refusal` as an error."""
    why = refusal(kind, shape, precision, board, model)
    if why:
        raise NNBuildError(why)


def default_precision(kind, precision=None):
    """The precision a build takes when none is given: the kind's first (float32 but for a
    full-integer int8 model, whose quantization is its only precision)."""
    return precision or kind.PRECISIONS[0]


def precision_candidates(kind, shape, board, model=None):
    """precision=auto: every precision of the kind that this shape (for this model) and board allow."""
    return [p for p in kind.PRECISIONS if refusal(kind, shape, p, board, model) is None]
