"""ONNX LSTM, GRU and RNN onto the IR's Recurrent layer, and the time-major tensors around them.

A recurrent node reads X as [seq, batch, features] (layout 0, the default and what PyTorch
exports) or [batch, seq, features] (layout 1). The ONNX front-end drops a batch axis it expects
first; a layout-0 sequence has it second. Such tensors are held as "time-major" entries
("tm", IR name, sample shape in ONNX order, batch position): a model input that is a layout-0 X
or initial state, a Transpose that moves the batch axis into a layout-0 X, and the layout-0
outputs (Y: batch third, Y_h and Y_c: batch second). Only the ops PyTorch's exporters write around
their LSTM/GRU read them (the recurrent node itself, Transpose, Squeeze, Reshape keeping the batch
axis, Shape, Gather on another axis); with a batch of one a time-major graph output has the
sample's element order and is the output as it is. Everything else refuses such a tensor in one
line.

Semantics are ONNX's (nnbuild.ir.graph.Recurrent); sequence_lens must be a constant equal to the
sequence length everywhere; an initial state is a constant, or a tensor computed from the model's
inputs (a state input of the model is an argument of the C function: a caller that streams feeds
the Y_h/Y_c it got back); nothing is kept between calls.
"""

from __future__ import annotations

import numpy as np

from nnbuild.ir import graph as g

#: ONNX activation names nnbuild's recurrent cells compute -> the IR's
ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}
#: the ONNX defaults: f, g, h for LSTM; f, g for GRU; f for RNN
DEFAULT_ACTIVATIONS = {op: g.RECURRENT_DEFAULT_ACTIVATIONS[op.lower()] for op in ("LSTM", "GRU", "RNN")}
#: attributes of LSTM/GRU/RNN nnbuild reads (the rest, activation_alpha/beta among them, are refused
#: by name: the activations nnbuild computes take no parameter)
KNOWN = {"LSTM": {"activations", "clip", "direction", "hidden_size", "input_forget", "layout"},
         "GRU": {"activations", "clip", "direction", "hidden_size", "linear_before_reset", "layout"},
         "RNN": {"activations", "clip", "direction", "hidden_size", "layout"}}
#: gates of each op (rows of W and R per direction, in units of hidden_size)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: the recurrent ops, and the input index of each one's initial states
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
DIRECTIONS = {"forward": ("forward",), "reverse": ("reverse",), "bidirectional": ("forward", "reverse")}


def is_time_major(converter, name):
    entry = converter.tensors.get(name)
    return entry is not None and entry[0] == "tm"


def feeds_time_major(graph, name):
    """Whether tensor `name` is the X or an initial state of a layout-0 LSTM/GRU/RNN (its batch axis
    is the second)."""
    for node in graph.node:
        if node.op_type in RECURRENT_OPS and any(k < len(node.input) and node.input[k] == name
                                                    for k in (0, 5, 6)):
            layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
            if layout == 0:
                return True
    return False


def time_major_input(converter, value):
    """The sample shape of a [seq, batch, features] (or initial state [directions, batch, hidden])
    model input, batch 1 or symbolic."""
    Problem = converter.problem_type
    t = value.type.tensor_type
    if t.elem_type != 1:
        raise Problem(f"input '{value.name}' is not float32 (ONNX type {t.elem_type})")
    dims = list(t.shape.dim)
    if len(dims) != 3:
        raise Problem(f"input '{value.name}' feeds a layout-0 LSTM/GRU/RNN: expected rank 3 with the batch axis "
                      f"second, got rank {len(dims)}")
    batch = dims[1]
    if batch.HasField("dim_value") and batch.dim_value != 1:
        raise Problem(f"input '{value.name}' of a layout-0 LSTM/GRU/RNN has batch {batch.dim_value} (nnbuild "
                      "generates one sequence per call: batch 1)")
    sizes = []
    for what, d in (("first dimension (sequence length or directions)", dims[0]), ("last dimension", dims[2])):
        if not d.HasField("dim_value") or d.dim_value < 1:
            raise Problem(f"input '{value.name}' has a dynamic {what} (nnbuild bounds every loop statically)")
        sizes.append(int(d.dim_value))
    return tuple(sizes)


def _states(converter, consts, inputs, index, what, dirs, hidden, layout, node):
    """A constant initial state [D, H] (None when absent or zero), or ("input", IR name) of one
    computed from the model's inputs ([D, batch, H] with layout 0, [batch, D, H] with layout 1)."""
    if len(inputs) <= index or not inputs[index]:
        return None
    value = consts[index]
    if value is None:
        entry = converter.tensors.get(inputs[index])
        if entry is None:
            raise converter.problem_type(f"{what} '{inputs[index]}' is not produced by any node")
        if layout == 0 and (entry[0] != "tm" or entry[3] != 1):
            raise converter.problem_type(f"{what} '{inputs[index]}' is not [directions, batch, hidden] with the batch "
                                         "axis second (layout 0)")
        src, shape = (entry[1], entry[2]) if layout == 0 else converter.tensor(inputs[index], node)
        if tuple(shape) != (dirs, hidden):
            raise converter.problem_type(f"{what} of sample shape {tuple(shape)} does not match {dirs} direction(s) "
                                         f"and hidden_size {hidden}")
        return ("input", src)
    value = np.asarray(value)
    if value.ndim != 3:
        raise converter.problem_type(f"{what} of shape {value.shape} is not rank 3")
    if layout == 1:
        value = np.swapaxes(value, 0, 1)
    if value.shape[0] != dirs or value.shape[2] != hidden:
        raise converter.problem_type(f"{what} of shape {tuple(np.asarray(consts[index]).shape)} does not match "
                                     f"{dirs} direction(s) and hidden_size {hidden}")
    if value.shape[1] != 1 and not np.all(value == value[:, :1]):
        raise converter.problem_type(f"{what} varies along the batch axis")
    state = value[:, 0, :]
    return None if not np.any(state) else np.asarray(state)


def _activations(converter, node, a, dirs):
    names = a.get("activations")
    default = DEFAULT_ACTIVATIONS[node.op_type]
    if names is None:
        return default
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) != len(default) * dirs:
        raise converter.problem_type(f"{len(names)} activations for {dirs} direction(s) (expected "
                                     f"{len(default) * dirs})")
    out = []
    for n in names:
        if n.lower() not in ACTIVATIONS:
            raise converter.problem_type(f"activation '{n[:40]}' is not supported (supported: Sigmoid, Tanh, Relu)")
        out.append(ACTIVATIONS[n.lower()])
    if dirs == 2 and out[:len(default)] != out[len(default):]:
        raise converter.problem_type(f"activations {names} differ between the directions (one set is supported)")
    return tuple(out[:len(default)])


def convert(converter, node, a, inputs, consts):
    """An LSTM, GRU or RNN node: one Recurrent layer per output the graph reads."""
    Problem = converter.problem_type
    op = node.op_type
    unknown = sorted(set(a) - KNOWN[op])
    if unknown:
        raise Problem(f"attribute {unknown[0]} is not supported")
    layout = int(a.get("layout", 0))
    if layout not in (0, 1):
        raise Problem(f"layout {layout} is not 0 or 1")
    direction = a.get("direction", "forward")
    dirs = DIRECTIONS[direction.decode() if isinstance(direction, bytes) else direction]
    w, r = consts[1], consts[2] if len(consts) > 2 else None
    if w is None or r is None:
        raise Problem("W and R must be constants (initializers)")
    w, r = np.asarray(w), np.asarray(r)
    gates = GATES[op]
    if w.ndim != 3 or r.ndim != 3 or w.shape[0] != len(dirs) or r.shape[0] != len(dirs):
        raise Problem(f"W {w.shape} and R {r.shape} must be [{len(dirs)}, {gates}*hidden, ...]")
    hidden = int(r.shape[2])
    if "hidden_size" in a and int(a["hidden_size"]) != hidden:
        raise Problem(f"hidden_size {a['hidden_size']} but R has shape {r.shape}")
    if w.shape[1] != gates * hidden or r.shape[1] != gates * hidden:
        raise Problem(f"W {w.shape} and R {r.shape} do not hold {gates} gates of {hidden} units")
    b = consts[3] if len(inputs) > 3 and inputs[3] else np.zeros((len(dirs), 2 * gates * hidden), w.dtype)
    if b is None:
        raise Problem("B must be a constant (initializer)")
    b = np.asarray(b)
    if b.shape != (len(dirs), 2 * gates * hidden):
        raise Problem(f"B has shape {b.shape}, expected {(len(dirs), 2 * gates * hidden)}")
    wb, rb = b[:, :gates * hidden].astype(np.float64), b[:, gates * hidden:].astype(np.float64)
    if op != "GRU":
        bias, rbias = (wb + rb), None
    else:
        bias = np.concatenate([wb[:, :2 * hidden] + rb[:, :2 * hidden], wb[:, 2 * hidden:]], axis=1)
        rbias = rb[:, 2 * hidden:].astype(b.dtype)
    bias = bias.astype(b.dtype)
    x_src, x_shape = _sequence(converter, inputs[0], layout, node)
    steps = x_shape[0]
    if len(inputs) > 4 and inputs[4]:
        lens = consts[4]
        if lens is None or np.any(np.asarray(lens) != steps):
            raise Problem(f"sequence_lens other than the constant sequence length {steps} (every sequence "
                          "has the input's length)")
    initial_h = _states(converter, consts, inputs, 5, "initial_h", len(dirs), hidden, layout, node)
    initial_c = peephole = None
    if op == "LSTM":
        initial_c = _states(converter, consts, inputs, 6, "initial_c", len(dirs), hidden, layout, node)
        if len(inputs) > 7 and inputs[7]:
            if consts[7] is None:
                raise Problem("P must be a constant (initializer)")
            peephole = np.asarray(consts[7])
            if peephole.shape != (len(dirs), 3 * hidden):
                raise Problem(f"P has shape {peephole.shape}, expected {(len(dirs), 3 * hidden)}")
            peephole = peephole.reshape(len(dirs), 3, hidden) if np.any(peephole) else None
    state_sources = [(name, s[1]) for name, s in (("h", initial_h), ("c", initial_c)) if isinstance(s, tuple)]
    initial_h, initial_c = (None if isinstance(s, tuple) else s for s in (initial_h, initial_c))
    clip = a.get("clip")
    common = dict(cell=op.lower(), directions=dirs, w=w, r=r, bias=bias, rbias=rbias, peephole=peephole,
                  initial_h=initial_h, initial_c=initial_c, activations=_activations(converter, node, a, len(dirs)),
                  clip=None if clip is None else float(clip),
                  coupling="forget_from_input" if op == "LSTM" and a.get("input_forget", 0) else None,
                  linear_before_reset=bool(a.get("linear_before_reset", 0)), source_type=op,
                  state_inputs=tuple(name for name, _ in state_sources))
    outputs = ("sequence", "last", "cell") if op == "LSTM" else ("sequence", "last")   # Y, Y_h(, Y_c)
    needed = converter.needed
    for k, output in enumerate(outputs):
        if len(node.output) <= k or not node.output[k] or (needed and node.output[k] not in needed):
            continue
        try:
            layer = g.Recurrent(converter.unique(converter.label(node) + ("" if k == 0 else f"_{output}")),
                                output=output, **common)
        except ValueError as exc:
            raise Problem(str(exc)) from None
        converter.add(layer, [x_src] + [src for _, src in state_sources])
        shape = converter.ir_shapes[layer.name]
        if layout == 1:
            converter.tensors[node.output[k]] = ("ir", layer.name, shape, tuple(range(len(shape))))
        else:
            # Y [seq, dirs, batch, hidden]; Y_h, Y_c [dirs, batch, hidden]
            converter.tensors[node.output[k]] = ("tm", layer.name, shape, 2 if output == "sequence" else 1)


def _sequence(converter, name, layout, node):
    """(IR name, (seq, features)) of X."""
    Problem = converter.problem_type
    entry = converter.tensors.get(name)
    if entry is None:
        raise Problem(f"input '{name}' is not produced by any node")
    if layout == 1:
        if entry[0] == "tm":
            raise Problem(f"X '{name}' has its batch axis at {entry[3]}, layout 1 expects it first")
        src, shape = converter.tensor(name, node)
        if len(shape) != 2:
            raise Problem(f"X has the sample shape {shape}: expected [seq, features] (layout 1)")
        return src, shape
    if entry[0] != "tm" or entry[3] != 1 or len(entry[2]) != 2:
        shape = entry[2] if entry[0] in ("ir", "tm") else np.shape(entry[1])
        raise Problem(f"X '{name}' (sample shape {tuple(shape)}) is not [seq, batch, features] with the batch "
                      "axis second (layout 0): give the model input as [seq, 1, features], or [1, seq, features] "
                      "through a Transpose, or use layout 1")
    return entry[1], entry[2]


def _full(shape, batch_pos):
    return tuple(shape[:batch_pos]) + (1,) + tuple(shape[batch_pos:])


def _sample_axis(axis, batch_pos):
    return axis if axis < batch_pos else axis - 1


def _put(converter, node, src, shape, batch_pos, output=0):
    if batch_pos == 0:
        converter.tensors[node.output[output]] = ("ir", src, tuple(shape), tuple(range(len(shape))))
    else:
        converter.tensors[node.output[output]] = ("tm", src, tuple(shape), batch_pos)


def transpose(converter, node, a, inputs):
    """A Transpose that moves the batch axis (from or to a time-major tensor)."""
    Problem = converter.problem_type
    entry = converter.tensors[inputs[0]]
    rank = len(entry[2]) + 1
    q = [int(p) for p in a.get("perm", range(rank - 1, -1, -1))]
    if sorted(q) != list(range(rank)):
        raise Problem(f"perm {q} is not a permutation of the {rank} axes")
    if entry[0] == "tm":
        src, shape, old = entry[1], entry[2], entry[3]
        sample = [_sample_axis(p, old) for p in q if p != old]
        new = q.index(old)
    else:
        old, new = 0, q.index(0)
        sample = [p - 1 for p in q if p != 0]
        src, shape = converter.held(inputs[0], tuple(range(len(entry[2]))), node)
    if sample != sorted(sample):
        layer = g.Transpose(converter.unique(converter.label(node)), tuple(sample), source_type="Transpose")
        converter.add(layer, [src])
        src, shape = layer.name, converter.ir_shapes[layer.name]
    _put(converter, node, src, shape, new)


def squeeze(converter, node, axes):
    """Squeeze of a time-major tensor: size-1 axes other than the batch axis."""
    Problem = converter.problem_type
    _, src, shape, pos = converter.tensors[node.input[0]]
    full = _full(shape, pos)
    if axes is None:
        axes = [k for k, d in enumerate(full) if d == 1 and k != pos]
    drop = {int(x) % len(full) for x in axes}
    if pos in drop:
        raise Problem(f"squeezing the batch axis (axis {pos} of this sequence tensor)")
    if any(full[k] != 1 for k in drop):
        raise Problem(f"squeezing an axis of size > 1 (shape {full})")
    target = [d for k, d in enumerate(full) if k not in drop and k != pos] or [1]
    layer = g.Reshape(converter.unique(converter.label(node)), tuple(target), source_type="Squeeze")
    converter.add(layer, [src])
    _put(converter, node, layer.name, converter.ir_shapes[layer.name], pos - sum(1 for k in drop if k < pos))


def gather(converter, node, a, idx):
    """Gather along a sample axis of a time-major tensor (`out[-1]` of a PyTorch sequence)."""
    Problem = converter.problem_type
    _, src, shape, pos = converter.tensors[node.input[0]]
    full = _full(shape, pos)
    axis = int(a.get("axis", 0)) % len(full)
    if axis == pos:
        raise Problem(f"gathering along the batch axis (axis {pos} of this sequence tensor)")
    k = _sample_axis(axis, pos)
    idx = converter.wrapped(np.asarray(idx).astype(np.int64), shape[k])
    if idx.ndim > 1:
        raise Problem("indices of rank > 1 on a sequence tensor")
    if idx.ndim == 0 and len(shape) == 1:
        raise Problem("a scalar from a sequence tensor")
    layer = g.Gather(converter.unique(converter.label(node)), k, idx, source_type="Gather")
    converter.add(layer, [src])
    _put(converter, node, layer.name, converter.ir_shapes[layer.name],
         pos - 1 if idx.ndim == 0 and axis < pos else pos)


def full_shape(converter, name):
    """The ONNX shape of a time-major tensor, its batch axis (of one) included."""
    _, _, shape, pos = converter.tensors[name]
    return _full(shape, pos)


def reshape(converter, node, target, allow_zero):
    """Reshape of a time-major tensor (batch one): the batch axis must stay where it is, or come first."""
    Problem = converter.problem_type
    _, src, shape, pos = converter.tensors[node.input[0]]
    full = _full(shape, pos)
    target = [full[k] if d == 0 and allow_zero and k < len(full) else d for k, d in enumerate(target)]
    size = int(np.prod(full))
    if target.count(-1) > 1:
        raise Problem("two unknown dimensions")
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = size // known if known else 0
    if int(np.prod(target)) != size or min(target, default=0) < 1:
        raise Problem(f"cannot reshape {tuple(full)} to {tuple(target)}")
    if len(target) > pos and target[pos] == 1 and int(np.prod(target[:pos])) == int(np.prod(full[:pos])):
        new = pos
    elif target[0] == 1:
        new = 0
    else:
        raise Problem(f"target shape {tuple(target)} moves the batch axis (axis {pos} of this sequence tensor)")
    sample = [d for k, d in enumerate(target) if k != new] or [1]
    layer = g.Reshape(converter.unique(converter.label(node)), tuple(sample), source_type="Reshape")
    converter.add(layer, [src])
    _put(converter, node, layer.name, converter.ir_shapes[layer.name], new)
