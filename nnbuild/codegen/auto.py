"""`auto` code shape (the default): the MLP shape for what it handles, v2 for everything else.

Rule: a chain of Dense and Activation layers on vectors (rank-1 tensors) is an MLP and gets the MLP
shape (every precision, ping-pong buffers, as before the CNN shapes existed); any other model
(a convolution, pooling, padding, normalisation, merge layer, a DAG, or a rank > 1 tensor) gets
v2. The trace records the shape actually generated and why.
"""

from nnbuild.codegen import mlp, v2


def is_mlp(model):
    """True when the MLP shape can generate `model` (a chain of Dense/Activation on vectors)."""
    return (model.edges is None and all(l.kind in ("dense", "activation") for l in model.layers)
            and all(len(s) == 1 for s in model.shapes()))


def choose(model):
    """(shape name, module, reason)."""
    if is_mlp(model):
        return "mlp", mlp, "a chain of Dense/Activation layers on vectors"
    other = next((l for l in model.layers if l.kind not in ("dense", "activation")), None)
    why = f"{other.source_type} '{other.name}'" if other else "tensors of rank > 1 or a layer graph"
    return "v2", v2, f"the MLP shape cannot express {why}"


#: passes the board's DSP capability on to the shape it picks, if that one has DSP kernels
DSP_KERNELS = True
#: ... and the board's soft_float to the MLP shape
SOFT_FLOAT_SPLIT = True


def render(model, **options):
    shape, module, why = choose(model)
    if not getattr(module, "DSP_KERNELS", False):
        options.pop("dsp", None)
    if not getattr(module, "SOFT_FLOAT_SPLIT", False):
        options.pop("soft_float", None)
    files = module.render(model, **options)
    trace = files[f"{model.name}.trace.json"]
    if isinstance(trace, dict):
        trace["shape"] = shape
        trace["shape_rule"] = f"auto -> {shape}: {why}"
    return files
