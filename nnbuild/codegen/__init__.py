"""C generators: one module per code shape, jinja2 templates beside them.

`outputs()` is the single list of files a generation writes; the SCons emitter and the generator
both use it, and generation fails if a declared file was not written.
"""

import importlib
import json
import os
import tempfile
from pathlib import Path

from nnbuild import names
from nnbuild.files import output_mode
from nnbuild.errors import NNBuildError
from nnbuild.numerics.formats import FIXED_PRECISIONS, FLOAT_PRECISIONS, GENERIC_FIXED, QUANTIZED_PRECISIONS
from nnbuild.numerics.formats import check_precision as check_precision_name

#: shape name -> module; a module's KIND says which model kind it generates ("nn" when absent),
#: its PRECISIONS which number formats ("fixedW.F" standing for every generic fixed format); for
#: each kind the first shape listed is what shape=auto means.
SHAPES = {
    "auto": "nnbuild.codegen.auto",
    "mlp": "nnbuild.codegen.mlp",
    "v1": "nnbuild.codegen.v1",
    "v2": "nnbuild.codegen.v2",
    "v3": "nnbuild.codegen.v3",
    "switch": "nnbuild.codegen.tpg_switch",
    "stack": "nnbuild.codegen.tpg_stack",
    "gravity": "nnbuild.codegen.gravity",
    "tflm": "nnbuild.codegen.int8",
}
#: precisions with a fixed name; `fixedW.F` (Gravity's fixed[W, F]) is accepted too
PRECISIONS = FLOAT_PRECISIONS + FIXED_PRECISIONS + QUANTIZED_PRECISIONS
#: How weights are stored: plain const arrays, AVR flash read with ELPM (pgm_read_*_far, anywhere
#: in flash), or AVR flash read with LPM through 16-bit pointers (pgm_read_*, below 64 KB: chips
#: without ELPM such as the ATmega328P), or const arrays the mlp shape lays out for 16-byte vectors
#: (const-simd: GCC/Clang vector extension, one neuron per lane; the host board's), or const arrays
#: the mlp shape lays out for a host's scalar code (const-host: plain C99, weights interleaved by
#: neuron blocks).
STORAGES = ("const", "avr-progmem-far", "avr-progmem-near", "const-simd", "const-host")
#: DSP capabilities of a board (its key "dsp", board.schema.json) that shapes have kernels for:
#: armv7e-m, the ARMv7E-M DSP extension (SMLAD, SXTB16) of the Cortex-M4/M7 (here, not in common,
#: so the CLI reads it without numpy; common imports it)
DSP_CAPABILITIES = ("armv7e-m",)


def output_roles(name, shape=None):
    """Each file a generation of model `name` writes, by its role: `header`, `code` (the inference
    C), `weights_header` and `weights` (where the shape keeps weights apart), `flowfacts`, `trace`.
    Callers take files by role, never by a suffix a model name could also end with (`m_weights`)."""
    module = shape_module(shape) if shape and shape != "auto" else None
    if module is not None and hasattr(module, "output_roles"):
        return module.output_roles(name)
    return {"header": f"{name}.h", "code": f"{name}.c", "weights_header": f"{name}_weights.h",
            "weights": f"{name}_weights.c", "flowfacts": f"{name}.flowfacts.json", "trace": f"{name}.trace.json"}


def outputs(name, shape=None):
    """Every file a generation of model `name` writes, in a fixed order (independent of the options
    but for a shape with files of its own)."""
    return list(output_roles(name, shape).values())


#: the roles of generated files that are C sources to compile, in link order
C_SOURCE_ROLES = ("code", "weights")


def check_precision(precision, board=None):
    """The precision if known and, given a board, one it can compute; else one clear line."""
    check_precision_name(precision)
    if board and precision == "float64" and board.get("double_bits", 64) < 64:
        raise NNBuildError(f"precision float64 needs a 64-bit double; {board['cc']}'s double is "
                           f"{board['double_bits']} bits on target {board['name']}")
    return precision


def check_model_name(name):
    """The model name prefixes every symbol and names the files: a checked C identifier only, of
    at most names.MAX_NAME_LENGTH characters."""
    if isinstance(name, str) and names.too_long(name, "model name"):
        raise NNBuildError(names.too_long(name, "model name"))
    if not names.is_c_identifier(name):
        raise NNBuildError(f"model name '{name}' is not a usable C name (letters, digits and '_', not a C "
                           f"keyword or header name; for example '{names.c_identifier(name)}')")
    return name


def check_layer_names(model):
    """Layers become C symbols through c_identifier: two names that clean to the same symbol
    (`a-b` and `a_b`) are refused here, naming both, instead of failing in the compiler."""
    seen = {}
    for layer in getattr(model, "layers", None) or ():
        c_name = names.c_identifier(layer.name)
        if c_name in seen:
            raise NNBuildError(f"layers '{seen[c_name]}' and '{layer.name}' both become the C name '{c_name}'; "
                               "rename one of them", path=model.source_files[0] if model.source_files else None)
        seen[c_name] = layer.name


def api(name):
    """The C names every generated model exposes: header, entry point, I/O size macros."""
    return {"header": f"{name}.h", "infer": f"{name}_infer",
            "inputs_macro": f"{name.upper()}_INPUTS", "outputs_macro": f"{name.upper()}_OUTPUTS",
            "input_count_macro": f"{name.upper()}_INPUT_COUNT", "args_macro": f"{name.upper()}_INFER_ARGS"}


def shape_module(shape):
    try:
        return importlib.import_module(SHAPES[shape])
    except KeyError:
        raise NNBuildError(f"unknown code shape '{shape}' (shapes: {', '.join(sorted(SHAPES))})")


def too_big_hint(shape):
    """What a shape says when its code outgrows a board's memory (its TOO_BIG_HINT; "" when none)."""
    return getattr(shape_module(shape), "TOO_BIG_HINT", "") if shape in SHAPES else ""


def kind_of_shape(shape):
    """The model kind a code shape generates."""
    return getattr(shape_module(shape), "KIND", "nn")


def shapes_of_kind(kind):
    """The shapes that generate models of `kind`, the default (shape=auto) first."""
    return [s for s in SHAPES if kind_of_shape(s) == kind]


def precision_family(precision):
    """The name a shape's PRECISIONS lists `precision` under ('fixedW.F' for every generic one)."""
    return "fixedW.F" if GENERIC_FIXED.match(str(precision)) else precision


def shape_refusal(shape, precision, model=None):
    """Why `shape` cannot generate `precision` (for `model`, when the shape depends on it), or None."""
    module = shape_module(shape)
    if hasattr(module, "choose"):
        if model is None:
            return None  # shape=auto decides from the model, at generation
        shape, module, _ = module.choose(model)
    offered = getattr(module, "PRECISIONS", None)
    if offered is not None and precision_family(precision) not in offered:
        return (f"shape {shape} does not generate precision '{precision}' "
                f"(it generates: {', '.join(offered)})")
    if model is not None and hasattr(module, "model_refusal"):
        why = module.model_refusal(model, precision)
        if why:
            return why
    if model is not None and getattr(model, "several_io", False):
        return several_io_refusal(shape, module, precision, model)
    return None


def several_io_refusal(shape, module, precision, model):
    """Why `shape` cannot generate a model of several inputs or outputs in `precision`, or None:
    the v1, v2 and v3 shapes take one argument per input and output (SEVERAL_IO), in the precisions
    of SEVERAL_IO_PRECISIONS (float only, when a shape does not list them)."""
    n_in, n_out = (len(model.graph.inputs), len(model.graph.outputs)) if hasattr(model, "graph") else \
        (len(model.inputs), len(model.outputs))
    counts = f"{n_in} inputs and {n_out} outputs"
    if not getattr(module, "SEVERAL_IO", False):
        return f"shape {shape} generates one input to one output; model '{model.name}' has {counts} (use v1, v2 or v3)"
    several = getattr(module, "SEVERAL_IO_PRECISIONS", FLOAT_PRECISIONS)
    if precision not in several:
        others = [s for s in SHAPES if s != shape and precision in getattr(shape_module(s), "SEVERAL_IO_PRECISIONS", ())]
        return (f"precision '{precision}' generates one input to one output in shape {shape}; model "
                f"'{model.name}' has {counts} (use {' or '.join(several)}"
                + (f", or shape {' or '.join(others)}" if others else "") + ")")
    return None


def generate(model, outdir, *, shape="auto", precision="float32", storage="const", passes_log=(),
             input_range=None, dsp=None, soft_float=False):
    """Render model into outdir; files appear all together (temp + rename) or not at all.

    Fixed-point precisions need `input_range` (lo, hi): their formats are proven over it. `dsp`: the
    board's DSP capability (board key "dsp"), which shapes with DSP_KERNELS use and others ignore.
    `soft_float`: the board has no FPU (board key "soft_float"), which shapes with SOFT_FLOAT_SPLIT use."""
    check_precision(precision)
    check_model_name(model.name)
    check_layer_names(model)
    if storage not in STORAGES:
        raise NNBuildError(f"weights storage '{storage}' is unknown (known: {', '.join(STORAGES)})")
    if dsp is not None and dsp not in DSP_CAPABILITIES:
        raise NNBuildError(f"DSP capability '{dsp}' is unknown (known: {', '.join(DSP_CAPABILITIES)})")
    kind = getattr(model, "kind", "nn")
    fits = shapes_of_kind(kind)
    if shape == "auto":
        shape = fits[0]
    module = shape_module(shape)
    if getattr(module, "KIND", "nn") != kind:
        raise NNBuildError(f"shape '{shape}' does not generate {kind.upper()} models "
                           f"(shapes for '{model.name}': {', '.join(fits)})")
    why = shape_refusal(shape, precision, model)
    if why:
        raise NNBuildError(why)
    extra = {"dsp": dsp} if dsp and getattr(module, "DSP_KERNELS", False) else {}
    if soft_float and getattr(module, "SOFT_FLOAT_SPLIT", False):
        extra["soft_float"] = True
    files = module.render(model, precision=precision, storage=storage,
                          passes_log=list(passes_log), input_range=input_range, **extra)
    trace_name = f"{model.name}.trace.json"
    if isinstance(files.get(trace_name), dict):
        files[trace_name] = portable_trace(files[trace_name])
    missing = set(outputs(model.name, shape)) - set(files)
    if missing:
        raise NNBuildError(f"generator for shape '{shape}' did not produce {sorted(missing)}")
    write_all(Path(outdir), files)
    return [Path(outdir) / n for n in outputs(model.name, shape)]


def portable_trace(trace):
    """The trace with file names only, never the directories they were read from: outputs must be
    byte-identical across clones and machines (SCons signatures, shared CacheDir)."""
    def base(value):
        return os.path.basename(value) if isinstance(value, str) else value

    meta = trace.get("meta")
    if isinstance(meta, dict):
        for key, value in meta.items():
            if key.endswith("_file"):
                meta[key] = base(value)
            elif key.endswith("_files") and isinstance(value, list):
                meta[key] = [base(v) for v in value]
    for key in ("sources", "environment_file"):
        if isinstance(trace.get(key), list):
            trace[key] = [base(v) for v in trace[key]]
        elif isinstance(trace.get(key), str):
            trace[key] = base(trace[key])
    return trace


def write_all(outdir, files):
    """Write every file to a temporary name first, then rename: no partial outputs on failure. The
    files get the mode open() would give them (0666 less the umask), not mkstemp's 0600."""
    outdir.mkdir(parents=True, exist_ok=True)
    mode = output_mode()
    temps = []
    try:
        for name, text in files.items():
            if not isinstance(text, str):
                text = json.dumps(text, indent=1, sort_keys=True) + "\n"
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=outdir)
            with os.fdopen(fd, "w", newline="\n") as f:
                f.write(text)
            temps.append((tmp, outdir / name))
        for tmp, final in temps:
            os.chmod(tmp, mode)
            os.replace(tmp, final)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
