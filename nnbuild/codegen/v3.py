"""v3 code shape (ACETONE V3): fully unrolled, weights as literals (see templates/v3.c.j2).

The code grows with the number of multiply-accumulates, so v3 refuses a model whose unrolled
code would exceed MAX_TERMS terms (override with NNBUILD_V3_MAX_TERMS) with a message giving the
count; use v2 (same results, loops) for those. Below the limit, a model whose code is expected to
take more than WARN_SECONDS per compile (COMPILE_SECONDS_PER_TERM, measured) gets a one-line
warning on stderr at generation, before any compile; the estimate goes to the trace
("compile_estimate"). No loops: the flow facts list none, and the WCET
of each part function is a single path.

The IR's N-d operations are written straight from nnbuild.ir.semantics, one expression per output
element at constant addresses: data movement (transpose, pad, slice, gather, gather-elements,
tile, nearest resize) from `tensor_ops.source_map` (the semantics run on element numbers);
broadcasting element-wise ops folded left to right over their operands (constants as literals);
reductions in ascending axis order, row-major within the axes; softmax over any axis; LRN; linear
and cubic resize as the semantics' axis-by-axis sums nested in one expression (so each partial sum
rounds as the reference's intermediate tensor does); grouped and depthwise convolution. The index
and weight tables `cnn.lower` builds for the loop shapes are not used: v3's weights file holds no
array.

float64: the arena and every expression are `double`; the weights are the float32 values written
exactly as double literals; the parameters the reference computes in the precision (resize tap
weights, LRN constants, pad fill values) are written in it; the API's float buffers are read with a
`(double)` cast and written with a `(float)` one (clean under -Wdouble-promotion -Wconversion).
"""

import os
import re
import sys

import numpy as np

from nnbuild.codegen import cnn, common, tensor_ops
from nnbuild.errors import NNBuildError
from nnbuild.ir import semantics
from nnbuild.ir.graph import normal_axes
from nnbuild.numerics import float_facts
from nnbuild.numerics.formats import is_fixed

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")
#: takes one C argument per input and output of a model of several (float precisions)
SEVERAL_IO = True
#: the precisions that take them (the fixed-point ones convert each argument: v3_fixed)
SEVERAL_IO_PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")


#: the most multiply-accumulate/element terms v3 writes (LeNet-5 has 281,640 MACs: ~7 MB of C)
MAX_TERMS = 300_000
#: what a link that outgrows the board's flash adds to its one line (compilers' link_failure)
TOO_BIG_HINT = "shape=v3 unrolls every multiply; try shape=v2"
#: terms per generated function
PART_TERMS = 512


#: Compile seconds per unrolled term, measured (one core, board flags, `-c` of <name>.c) on v3 code
#: of LeNet-5 and synthetic conv+dense CNNs of 8k..289k terms: gcc -O2 (host board) 0.14..0.26 ms,
#: avr-gcc -Os (ATmega boards) 0.17..0.32 ms, growing with the size (LeNet-5, 288,574 terms: 74 s
#: and 91 s; 99,610 terms: 18 s and 27 s; 8,010 terms: 1.2 s and 1.4 s). The estimate takes the
#: largest rate, so it errs long.
COMPILE_SECONDS_PER_TERM = 0.32e-3
COMPILE_BASIS = ("measured 0.14-0.32 ms per term for gcc -O2 and avr-gcc -Os on LeNet-5 and conv+dense "
                 "CNNs of 8k-289k terms, largest rate taken")
#: above this estimate (seconds per compile) generation warns on stderr before any compile starts
WARN_SECONDS = 10.0


def compile_estimate(terms):
    """What compiling the unrolled code is expected to take: seconds per compiler run, and why."""
    return {"terms": int(terms), "seconds_per_compile": round(terms * COMPILE_SECONDS_PER_TERM, 1),
            "seconds_per_term": COMPILE_SECONDS_PER_TERM, "basis": COMPILE_BASIS,
            "warned": terms * COMPILE_SECONDS_PER_TERM > WARN_SECONDS}


def duration(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def max_terms():
    return int(os.environ.get("NNBUILD_V3_MAX_TERMS", MAX_TERMS))


class Numbers:
    """C spelling of the compute precision: type, literal suffix, exp/pow, literals."""

    def __init__(self, precision):
        self.real, self.sfx, self.exp = common.REALS[precision][:3]
        self.f64 = precision == "float64"
        self.pow = "pow" if self.f64 else "powf"

    def _special(self, value):
        if value != value:
            text = "NAN"
        elif value in (float("inf"), float("-inf")):
            text = "INFINITY" if value > 0 else "-INFINITY"
        else:
            return None
        return f"({self.real}){text}"   # a float in C99, a double in avr-libc: cast, never promoted

    def _double(self, value):
        text = repr(float(value))       # the shortest text that reads back as this double
        return text if any(c in text for c in ".e") else text + ".0"

    def weight(self, value):
        """A float32 weight: %.9g (round-trips float32) or, in float64, its exact double value."""
        return self.param(np.float32(value))

    def param(self, value):
        """A parameter the reference computes in the precision (float32-rounded in float32)."""
        value = float(value) if self.f64 else float(np.float32(value))
        special = self._special(value)
        if special:
            return special
        return self._double(value) if self.f64 else common.float_literal(value)

    def count(self, n):
        return f"{int(n)}.0{self.sfx}"


class Writer(common.UnrolledParts):
    """Statements of one layer, cut into functions of at most PART_TERMS terms."""

    def __init__(self, op, arena, num=None):
        super().__init__(op, arena, PART_TERMS)
        self.num = num or Numbers("float32")

    def get(self, ref, index):
        """Element `index` of `ref` as a value of the compute type (the API buffers are float)."""
        cell = self.at(ref, index)
        return f"(double){cell}" if self.num.f64 and ref in self.API_BUFFERS else cell

    def store(self, ref, index, expr):
        """The assignment of `expr` (compute type) to element `index` of `ref`."""
        if self.num.f64 and ref in self.API_BUFFERS:
            expr = f"(float)({expr})"
        return f"{self.at(ref, index)} = {expr};"

    def copy(self, dst, i, src, j):
        """dst[i] = src[j] without arithmetic (a cast only between the float API and a double arena)."""
        api = self.API_BUFFERS
        same = (dst in api) == (src in api)
        value = self.at(src, j) if same or not self.num.f64 else \
            (f"(float){self.at(src, j)}" if dst in api else f"(double){self.at(src, j)}")
        return f"{self.at(dst, i)} = {value};"


def act(a, expr):
    return expr if a in ("linear", "softmax") else f"nn_{a}({expr})"


def softmax_lines(w, src, dst):
    """One block: softmax of the cells src -> dst (lists of (ref, index); may be the same cells)."""
    num = w.num
    first = w.get(*src[0])
    lines = [f"{num.real} m = {first};", f"{num.real} s;"]
    lines += [f"if ({w.get(*c)} > m) {{ m = {w.get(*c)}; }}" for c in src[1:]]
    if num.f64:
        lines += [w.store(*d, f"{num.exp}({w.get(*c)} - m)") for c, d in zip(src, dst)]
    else:
        lines += [f"{w.at(*d)} = {num.exp}({w.get(*c)} - m);" for c, d in zip(src, dst)]
    lines += [f"s = {' + '.join(w.get(*d) for d in dst)};"]
    if num.f64:
        lines += [w.store(*d, f"{w.get(*d)} / s") for d in dst]
    else:
        lines += [f"{w.at(*d)} /= s;" for d in dst]
    return "{ /* softmax: subtract the max so exp never overflows */ " + " ".join(lines) + " }"


#: marks the end of a NN_SPLIT_MAC line; v3.c.j2 puts the line's value facts there
SPLIT_MARK = "\x01split\x01"


def split_sum(w, op, cell, bias, pairs):
    """One output of a split float32 layer (common.split_accumulation) as a block: the bias in pos
    or neg by its sign bit (known here), one NN_SPLIT_MAC line per term (flush, multiply, add by
    the product's sign: its value facts go on that line), then the activation of pos - neg (nn_join's
    on AVR, common.split_facts)."""
    sign = bias is not None and bool(np.signbit(np.float32(bias)))
    start = w.num.weight(abs(np.float32(bias))) if bias is not None else "0.0f"
    pos, neg = ("0.0f", start) if sign else (start, "0.0f")
    keep = f"{op['facts'].keep_exp}u"
    lines = [f"{{ /* {w.at(op['dst'], cell)}: products summed by sign (NN_SPLIT_MAC) */",
             f"    float pos = {pos}, neg = {neg};"]
    lines += [f"    NN_SPLIT_MAC(pos, neg, {w.num.weight(wv)}, {x}, {keep});{SPLIT_MARK}" for wv, x in pairs]
    joined = "nn_join(pos, neg)" if op["join"] else "pos - neg"
    lines += [f"    {w.store(op['dst'], cell, act(op['activation'], joined))}", "}"]
    return "\n".join(lines)


def layer_lines(op, w, layer=None):
    """Emit the unrolled statements of one op into Writer w (`layer`: its IR layer, for the N-d ops)."""
    k, a = op["kind"], op["activation"]
    src, dst, num = op["src"], op["dst"], w.num
    zero = f"0.0{num.sfx}"
    if k == "conv2d":
        rows = op["weights"]
        bias = op["bias_values"]
        H, W, CG, OG = op["H"], op["W"], op.get("CG", op["C"]), op.get("OG", op["OC"])
        C = op["C"]
        for oy in range(op["OH"]):
            for ox in range(op["OW"]):
                for o in range(op["OC"]):
                    c0 = (o // OG) * CG
                    terms = [num.weight(bias[o])] if bias is not None else []
                    pairs = []
                    for ky in range(op["KH"]):
                        iy = oy * op["SH"] + ky * op["DH"] - op["PT"]
                        if not 0 <= iy < H:
                            continue
                        for kx in range(op["KW"]):
                            ix = ox * op["SW"] + kx * op["DW"] - op["PL"]
                            if not 0 <= ix < W:
                                continue
                            for c in range(CG):
                                wv = rows[o][(ky * op["KW"] + kx) * CG + c]
                                terms.append(f"{num.weight(wv)} * {w.get(src[0], (iy * W + ix) * C + c0 + c)}")
                                pairs.append((wv, w.get(src[0], (iy * W + ix) * C + c0 + c)))
                    expr = " + ".join(terms) if terms else zero
                    cell = (oy * op['OW'] + ox) * op['OC'] + o
                    if op.get("facts"):
                        w.emit(split_sum(w, op, cell, None if bias is None else bias[o], pairs), len(terms), expr)
                    else:
                        w.emit(w.store(dst, cell, act(a, expr)), len(terms), expr)
    elif k == "dense":
        rows, bias, K, OC = op["weights"], op["bias_values"], op["k"], op["OC"]
        for p in range(op["outer"]):
            for j in range(OC):
                terms = [num.weight(bias[j])] if bias is not None else []
                terms += [f"{num.weight(rows[j][i])} * {w.get(src[0], p * K + i)}" for i in range(K)]
                expr = " + ".join(terms)
                if op.get("facts"):
                    pairs = [(rows[j][i], w.get(src[0], p * K + i)) for i in range(K)]
                    w.emit(split_sum(w, op, p * OC + j, None if bias is None else bias[j], pairs), len(terms), expr)
                else:
                    w.emit(w.store(dst, p * OC + j, act(a, expr or zero)), len(terms), expr)
    elif k == "pool2d":
        for i, window in cnn.pool_windows(op):
            cells = [w.get(src[0], j) for j in window]
            if op["mode"] == "max":
                expr = cnn.fold("nn_max", cells)
            else:
                expr = f"({' + '.join(cells)}) / {num.count(len(cells))}"
            w.emit(w.store(dst, i, act(a, expr)), len(cells))
    elif k == "zeropad2d":
        for i, j in cnn.padded_cells(op):
            if j is not None:
                w.emit(w.copy(dst, i, src[0], j))
            else:
                w.emit(f"{w.at(dst, i)} = {'0.0f' if dst in w.API_BUFFERS else zero};")
    elif k == "batchnorm":
        C = op["C"]
        for i in range(op["n"]):
            expr = f"{w.get(src[0], i)} * {num.weight(op['alpha'][i % C])} + {num.weight(op['beta_eff'][i % C])}"
            w.emit(w.store(dst, i, act(a, expr)), 2)
    elif k == "activation":
        if not (op["in_place"] and a in ("linear", "softmax")):
            for i in range(op["n"]):
                if a in ("linear", "softmax"):
                    w.emit(w.copy(dst, i, src[0], i))
                else:
                    w.emit(w.store(dst, i, act(a, w.get(src[0], i))))
    elif k == "add":
        for i in range(op["n"]):
            w.emit(w.store(dst, i, act(a, ' + '.join(w.get(s, i) for s in src))), len(src))
    elif k == "concat":
        for p in range(op["outer"]):
            for part in op["parts"]:
                for i in range(part["chunk"]):
                    w.emit(w.copy(dst, p * op['total'] + part['offset'] + i, part['src'], p * part['chunk'] + i))
    elif k in TENSOR_KINDS:
        TENSOR_KINDS[k](op, w, layer)
    else:
        raise NNBuildError(f"internal error: shape v3 has no code for operation kind '{k}'",
                           item=f"layer '{op['name']}'")
    if op["softmax"]:
        n = op["softmax"]["n"]
        for g in range(op["softmax"]["groups"]):
            cells = [(dst, g * n + i) for i in range(n)]
            w.emit(softmax_lines(w, cells, cells), 3 * n)


# --------------------------------------------------------------------------- N-d tensor operations


def move(op, w, layer):
    """Every output element copied from its source element (the semantics' own map) or the fill."""
    src, dst = op["src"][0], op["dst"]
    table = tensor_ops.source_map(layer, op["in_shapes"][0]).ravel()
    fill = None
    if (table < 0).any():
        fill = w.num.param(layer.value)
        if w.num.f64 and dst in w.API_BUFFERS:
            fill = f"(float){fill}"
    for i, j in enumerate(table.tolist()):
        w.emit(w.copy(dst, i, src, j) if j >= 0 else f"{w.at(dst, i)} = {fill};")


def unary(op, w, _layer):
    for i in range(op["n"]):
        w.emit(w.store(op["dst"], i, f"{op['fn']}({w.get(op['src'][0], i)})"))


def _aligned(shape, rank):
    return (1,) * (rank - len(shape)) + tuple(int(n) for n in shape)


def broadcast(op, w, layer):
    """op(o1, o2, ...) folded left to right per output element, constants as literals."""
    out_shape = tuple(op["out_shape"])
    rank = len(out_shape)
    columns = []
    for o in layer.operands([{"tensor": t, "shape": tuple(s)} for t, s in enumerate(op["in_shapes"])]):
        if isinstance(o, dict):
            index = np.arange(int(np.prod(o["shape"]))).reshape(_aligned(o["shape"], rank))
            ref = op["src"][o["tensor"]]
            columns.append([w.get(ref, j) for j in np.broadcast_to(index, out_shape).ravel().tolist()])
        else:
            value = np.asarray(o, np.float32)
            value = np.broadcast_to(value.reshape(_aligned(value.shape, rank)), out_shape).ravel()
            columns.append([w.num.weight(v) for v in value.tolist()])
    kind, count = op["op"], len(columns)
    for i in range(op["n"]):
        values = [c[i] for c in columns]
        if kind in ("max", "min"):
            expr = cnn.fold(f"nn_{kind}", values)
        elif kind == "mean":
            total = " + ".join(values) if count > 1 else f"{values[0]} + 0.0{w.num.sfx}"
            expr = f"({total}) / {w.num.count(count)}"
        else:
            expr = f" {dict(add='+', sub='-', mul='*', div='/')[kind]} ".join(values)
        w.emit(w.store(op["dst"], i, act(op["activation"], expr)), count)


def reduce(op, w, layer):
    """Each output: its input elements (ascending axes, row-major within them) folded left to right."""
    in_shape = tuple(op["in_shapes"][0])
    axes = list(normal_axes(layer.axes, len(in_shape), "reduce"))
    kept = [k for k in range(len(in_shape)) if k not in axes]
    count = int(np.prod([in_shape[k] for k in axes]))
    table = np.arange(int(np.prod(in_shape))).reshape(in_shape).transpose(kept + axes).reshape(-1, count)
    src, dst, kind = op["src"][0], op["dst"], layer.op
    for i, row in enumerate(table.tolist()):
        cells = [w.get(src, j) for j in row]
        if kind in ("max", "min"):
            lines = [f"{w.num.real} v = {cells[0]};"] + [f"v = nn_{kind}(v, {c});" for c in cells[1:]]
            w.emit("{ " + " ".join(lines + [w.store(dst, i, "v")]) + " }", count)
            continue
        expr = f" {'*' if kind == 'prod' else '+'} ".join(cells)
        if kind == "mean":
            expr = f"({expr}) / {w.num.count(count)}"
        w.emit(w.store(dst, i, expr), count)


def softmax_axis(op, w, _layer):
    p = op["plan"]
    n, inner = p["n"], p["inner"]
    for g in range(p["outer"]):
        for j in range(inner):
            cells = [g * n * inner + k * inner + j for k in range(n)]
            w.emit(softmax_lines(w, [(op["src"][0], c) for c in cells], [(op["dst"], c) for c in cells]), 3 * n)


def lrn(op, w, layer):
    """x / (bias + alpha / size * (sum of the window's squares, left to right)) ^ beta."""
    num, p = w.num, op["plan"]
    C, low, high = p["C"], p["low"], p["high"]
    size = int(layer.size)
    over = float(layer.alpha) / size if num.f64 else float(np.float32(layer.alpha) / np.float32(size))
    src, dst = op["src"][0], op["dst"]
    for q in range(p["pixels"]):
        for c in range(C):
            window = range(max(0, c - low), min(C, c + high + 1))
            squares = " + ".join(f"{w.get(src, q * C + j)} * {w.get(src, q * C + j)}" for j in window)
            expr = (f"{w.get(src, q * C + c)} / ({num.real}){num.pow}({num.param(layer.bias)} + "
                    f"{num.param(over)} * ({squares}), {num.param(layer.beta)})")
            w.emit(w.store(dst, q * C + c, expr), len(window) + 2)


def resample(op, w, layer):
    """Linear/cubic resize: the semantics resize axis 0, then axis 1 of that result, ...; output
    element i is the last axis' tap sum over the previous axis' sums, nested (no temporary)."""
    in_shape = tuple(op["in_shapes"][0])
    taps = semantics.resize_taps(layer, in_shape)
    strides = tensor_ops.row_strides(in_shape)
    src, num = op["src"][0], w.num

    def value(axis, coords, out):
        """(C expression, is it an atom) of the element at `coords` of the tensor the semantics hold
        after resizing axes 0..axis: coords[k] is an input coordinate for k > axis (chosen by the
        taps of the later axes), an output one (out[k]) for k <= axis."""
        if axis < 0:
            return w.get(src, sum(c * s for c, s in zip(coords, strides))), True
        if taps[axis] is None:
            return value(axis - 1, coords, out)
        index, weight = taps[axis]
        parts = []
        for t in range(index.shape[1]):
            inner = list(coords)
            inner[axis] = int(index[out[axis], t])
            expr, atom = value(axis - 1, inner, out)
            parts.append(f"{expr if atom else '(' + expr + ')'} * {num.param(weight[out[axis], t])}")
        return " + ".join(parts), False

    terms = int(np.prod([t[0].shape[1] for t in taps if t is not None]))
    for i, out in enumerate(np.ndindex(*op["out_shape"])):
        w.emit(w.store(op["dst"], i, value(len(in_shape) - 1, list(out), out)[0]), terms)


TENSOR_KINDS = {"move": move, "unary": unary, "broadcast": broadcast, "reduce": reduce,
                "softmax_axis": softmax_axis, "lrn": lrn, "resample": resample}


def count_terms(ops):
    """Terms v3 would write (MACs plus about one per element of the other layers), without writing them."""
    total = 0
    for op in ops:
        kind, plan = op["kind"], op.get("plan")
        if kind in ("conv2d", "dense"):
            total += op["n"] * (op["k"] + 1)
        elif kind == "broadcast":
            total += op["n"] * op["count"]
        elif kind == "reduce":
            total += op["n"] * plan["count"]
        elif kind == "lrn":
            total += op["n"] * (plan["size"] + 2)
        elif kind == "softmax_axis":
            total += op["n"] * 3
        elif kind == "resample":
            total += op["n"] * int(np.prod([a["taps"] for a in plan["axes"] if "taps" in a]))
        else:
            total += op["n"] * 2
    return total


def model_refusal(model, precision):
    """Recurrent layers loop over their steps: v3 (straight-line code) does not write them."""
    layer = next((l for l in model.layers if l.kind == "recurrent"), None)
    if layer is not None:
        return f"shape v3 does not generate {layer.source_type} '{layer.name}' (recurrent layers: use shape v2)"
    return None


def check_precision(precision):
    if precision not in PRECISIONS:
        raise NNBuildError(f"shape v3 generates {', '.join(PRECISIONS)} only (precision '{precision}' is not "
                           "supported by it; shape=mlp generates every fixed-point precision)")


def render(model, *, precision, storage, passes_log, input_range=None, **_options):
    if not is_fixed(precision):
        check_precision(precision)
    lowered = cnn.lower(model, storage)
    estimate, limit = count_terms(lowered["ops"]), max_terms()
    timing = compile_estimate(estimate)
    if estimate > limit:
        raise NNBuildError(f"shape v3 would unroll about {estimate:,} terms (limit {limit:,}, about "
                           f"{estimate * 24 / 1e6:.0f} MB of C, about {duration(timing['seconds_per_compile'])} "
                           "per compile): use shape v2 (the same arithmetic in loops), "
                           "or raise NNBUILD_V3_MAX_TERMS", item=f"model '{model.name}'")
    if timing["warned"]:
        print(f"nnbuild: warning: shape v3 unrolls {estimate:,} terms of model '{model.name}': expect about "
              f"{duration(timing['seconds_per_compile'])} per compile of {model.name}.c "
              f"({COMPILE_BASIS}); shape v2 computes the same in loops and compiles in seconds",
              file=sys.stderr, flush=True)
    if is_fixed(precision):
        from nnbuild.codegen import v3_fixed
        return v3_fixed.render(model, precision=precision, storage=storage, passes_log=passes_log,
                               input_range=input_range, lowered=lowered, part_terms=PART_TERMS)
    num = Numbers(precision)
    split = common.split_accumulation(storage, num.real)
    join = split and common.split_facts(lowered["ops"], storage, num.real)
    for op in lowered["ops"]:
        op["join"] = join
    api_args = cnn.api_context(model)["api_args"]
    layers, parts, written, distinct = [], [], 0, 0
    for op in lowered["ops"]:
        if op["kind"] in ("conv2d", "dense"):
            op["bias_values"] = None if not op["bias"] else [float(v.rstrip("f")) for line in op["bias"]["values"]
                                                               for v in line.split(", ")]
        w = Writer(op, lowered["arena_symbol"], num)
        layer_lines(op, w, model.layers[op["index"]])
        written += w.count
        distinct += w.distinct
        for p in w.parts:
            text = "\n".join(p["lines"])
            p["uses_in"] = "in[" in text
            p["uses_out"] = "out[" in text
            p["unused"] = [a["name"] for a in api_args if not re.search(rf"\b{a['name']}\[", text)]
        op["parts"] = w.parts
        layers.append(op)
        parts.extend(w.parts)
    code_ctx = cnn.context(model, lowered, "v3", precision, storage)
    code_ctx["part_params"] = ", ".join(("const float *" if a["role"] == "in" else "float *") + a["name"]
                                        for a in api_args) or "const float *in, float *out"
    code_ctx["part_args"] = ", ".join(a["name"] for a in api_args) or "in, out"
    uses = "\n".join(line for p in parts for line in p["lines"])
    # the weights and tables are literals in the code: no array is read, no reader macro is needed
    code_ctx.update(layers=layers, parts=parts, part_terms=PART_TERMS, arrays=[], int_reads=[],
                    uses_max="nn_max(" in uses, uses_min="nn_min(" in uses,
                    split_ops=[op for op in lowered["ops"] if op.get("facts")], split_mark=SPLIT_MARK, split_join=join,
                    mul_tags=float_facts.MUL_TAGS, add_tags=float_facts.ADD_TAGS)
    files_ctx = dict(code_ctx, arrays=[])
    name = model.name
    code, facts, _ = cnn.render_code("v3.c.j2", code_ctx)
    for op in lowered["ops"]:  # the weights are literals: no arrays to trace
        op["chunks"], op["bias"], op["arrays"] = [], None, []
    record = dict(cnn.trace(model, lowered, facts, passes_log, "v3", [cnn.memory_log(lowered["memory"])]),
                  compile_estimate=timing, unrolled_terms=written,
                  distinct_terms=distinct)
    return cnn.output_files(name, files_ctx, code, facts, record)
