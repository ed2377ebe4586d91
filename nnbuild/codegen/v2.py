"""v2 code shape (ACETONE V2, the CNN default): every layer inlined in `<name>_infer` as loops with
literal bounds (the bound repeated in NN_LOOPBOUND and in the flow facts), channels-last tensors,
weights in `<name>_weights.c` (same storage rules and helpers as the MLP shape), intermediate
tensors in one static arena placed by liveness (see nnbuild.codegen.cnn).

The N-d tensor operations (data movement, broadcasting, reductions, axis softmax, LRN, resampling)
are written by `TensorCode` from the loop plans of nnbuild.codegen.tensor_ops: one loop per
(merged) axis, literal bounds, per-axis offsets accumulated outside in, tables read through the
prelude's NN_READ macros (AVR flash or plain const)."""

import types

import numpy as np

from nnbuild.codegen import cnn, common, recurrent
from nnbuild.codegen.common import FLASH_STORAGES, float_literal, split_accumulation
from nnbuild.numerics import float_facts
from nnbuild.numerics.formats import is_fixed

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")
#: takes one C argument per input and output of a model of several (float precisions)
SEVERAL_IO = True
#: the precisions that take them (the fixed-point ones convert each argument: v2_fixed)
SEVERAL_IO_PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")


class TensorCode:
    """C statements of one N-d operation, loops recorded in the flow facts `ff` as they are written."""

    def __init__(self, ff, real, sfx, exp, depth=1, api=("in", "out")):
        self.ff, self.real, self.sfx, self.exp, self.api = ff, real, sfx, exp, api
        self.lines, self.depth = [], depth

    def line(self, text):
        self.lines.append("    " * self.depth + text)

    def block(self):
        self.line("{")
        self.depth += 1

    def close(self, fact=False):
        self.depth -= 1
        self.line("}" + (self.ff.end() if fact else ""))

    def loop(self, var, n):
        self.line(self.ff.loop(n))
        self.line(f"for ({cnn.index_type(n)} {var} = 0; {var} < {n}u; ++{var}) {{")
        self.depth += 1

    def end(self):
        self.close(fact=True)

    def text(self):
        return "\n".join(self.lines) + "\n"

    def ptr(self, ref):
        """C element type of a tensor reference: the API's float buffers or the arena's real."""
        return "float" if ref in self.api else self.real

    def lit(self, value):
        return float_literal(float(value), self.sfx)

    def header(self, op):
        for k, src in enumerate(op["src"]):
            self.line(f"const {self.ptr(src)} *x{k if len(op['src']) > 1 else ''} = {src};")
        self.line(f"{self.ptr(op['dst'])} *y = {op['dst']};")


def _table(array, index):
    bits = array["ctype"][3:5]
    return f"NN_READ{bits}(NN_ADDR({array['symbol']}) + ({index}) * NN_STEP({array['ctype']}))"


def move(code, op):
    plan = op["plan"]
    code.header(op)
    fill = code.lit(plan["fill"]) if plan["fills"] else None
    if plan["table"] is not None:
        n = plan["dims"][0]
        code.loop("k", n)
        code.line(f"int_fast32_t t = {_table(plan['table_array'], 'k')};")
        code.line(f"y[k] = t >= 0 ? x[t] : {fill};" if fill else "y[k] = x[t];")
        code.end()
        return
    prev, ok = str(plan["base"]), None
    for k, axis in enumerate(plan["axes"]):
        code.loop(f"i{k}", axis["n"])
        if "step" in axis:
            term = f"(int_fast32_t)i{k} * {axis['step']}" if axis["step"] not in (0, 1) else \
                   (f"(int_fast32_t)i{k}" if axis["step"] == 1 else "0")
            code.line(f"int_fast32_t o{k} = {prev} + {term};")
        else:
            code.line(f"int_fast32_t t{k} = {_table(axis['array'], f'i{k}')};")
            if fill and -1 in axis["table"]:
                code.line(f"int ok{k} = {ok + ' && ' if ok else ''}t{k} >= 0;")
                ok = f"ok{k}"
                code.line(f"int_fast32_t o{k} = {prev} + (t{k} >= 0 ? t{k} : 0);")
            else:
                code.line(f"int_fast32_t o{k} = {prev} + t{k};")
        prev = f"o{k}"
    code.line(f"*y++ = {ok} ? x[{prev}] : {fill};" if ok else f"*y++ = x[{prev}];")
    for _ in plan["axes"]:
        code.end()


def _fold(code, op, value):
    if op in ("add", "mean"):
        return f"v = v + {value};"
    if op == "sub":
        return f"v = v - {value};"
    if op == "mul":
        return f"v = v * {value};"
    if op == "div":
        return f"v = v / {value};"
    compare = ">" if op == "max" else "<"
    return f"{{ {code.real} b = {value}; v = b {compare} v ? b : v; }}"


def broadcast(code, op, act):
    plan = op["plan"]
    operands = plan["operands"]
    for k, o in enumerate(operands):
        if "src" in o:
            code.line(f"const {code.ptr(o['src'])} *x{k} = {o['src']};")
        else:
            code.line(f"NN_PTR(float) c{k} = NN_ADDR({o['array']['symbol']});")
    code.line(f"{code.ptr(op['dst'])} *y = {op['dst']};")
    offsets = ["0"] * len(operands)
    for d, n in enumerate(plan["dims"]):
        code.loop(f"i{d}", n)
        for k, o in enumerate(operands):
            stride = o["strides"][d]
            if stride:
                term = f"i{d}" if stride == 1 else f"i{d} * {stride}u"
                code.line(f"uint_fast32_t o{k}_{d} = {offsets[k] + ' + ' if offsets[k] != '0' else ''}{term};")
                offsets[k] = f"o{k}_{d}"
    values = [f"x{k}[{offsets[k]}]" if "src" in o else f"NN_READF_AT(c{k}, {offsets[k]})"
              for k, o in enumerate(operands)]
    code.line(f"{code.real} v = {values[0]};")
    for value in values[1:]:
        code.line(_fold(code, op["op"], value))
    if op["op"] == "mean":
        code.line(f"v = v / {code.lit(len(values))};")
    code.line(f"*y++ = {act(op['activation'], 'v')};")
    for _ in plan["dims"]:
        code.end()


def reduce(code, op):
    plan = op["plan"]
    code.header(op)
    kept = "0"
    for d, n in enumerate(plan["dims"]):
        code.loop(f"i{d}", n)
        if plan["strides"][d]:
            code.line(f"uint_fast32_t o{d} = {kept + ' + ' if kept != '0' else ''}i{d} * {plan['strides'][d]}u;")
            kept = f"o{d}"
    start = {"sum": code.lit(0), "mean": code.lit(0), "prod": code.lit(1)}.get(op["op"], f"x[{kept}]")
    code.line(f"{code.real} acc = {start};")
    red = kept
    for d, n in enumerate(plan["red_dims"]):
        code.loop(f"r{d}", n)
        code.line(f"uint_fast32_t q{d} = {red} + r{d} * {plan['red_strides'][d]}u;")
        red = f"q{d}"
    code.line({"sum": f"acc = acc + x[{red}];", "mean": f"acc = acc + x[{red}];",
               "prod": f"acc = acc * x[{red}];",
               "max": f"if (x[{red}] > acc) {{ acc = x[{red}]; }}",
               "min": f"if (x[{red}] < acc) {{ acc = x[{red}]; }}"}[op["op"]])
    for _ in plan["red_dims"]:
        code.end()
    if op["op"] == "mean":
        code.line(f"acc = acc / {code.lit(plan['count'])};")
    code.line("*y++ = acc;")
    for _ in plan["dims"]:
        code.end()


def softmax_axis(code, op):
    p = op["plan"]
    code.header(op)
    step = p["inner"]
    at = (lambda k: f"[{k} * {step}u]") if step > 1 else (lambda k: f"[{k}]")
    code.loop("g", p["outer"])
    code.loop("j", p["inner"])
    code.line(f"const {code.ptr(op['src'][0])} *xv = x + g * {p['n'] * step}u + j;")
    code.line(f"{code.ptr(op['dst'])} *yv = y + g * {p['n'] * step}u + j;")
    code.line(f"{code.real} m = xv[0];")
    code.line(f"{code.real} s = {code.lit(0)};")
    code.loop("k", p["n"] - 1)
    code.line(f"if (xv{at('(k + 1u)')} > m) {{ m = xv{at('(k + 1u)')}; }}")
    code.end()
    code.loop("k", p["n"])
    code.line(f"{code.real} e = ({code.real}){code.exp}(xv{at('k')} - m);")
    code.line(f"yv{at('k')} = e;")
    code.line("s = s + e;")
    code.end()
    code.loop("k", p["n"])
    code.line(f"yv{at('k')} = yv{at('k')} / s;")
    code.end()
    code.end()
    code.end()


def lrn(code, op):
    p = op["plan"]
    code.header(op)
    code.loop("p", p["pixels"])
    code.line(f"const {code.ptr(op['src'][0])} *xp = x + p * {p['C']}u;")
    code.loop("c", p["C"])
    code.line(f"{code.real} s = {code.lit(0)};")
    code.loop("k", p["size"])
    code.line(f"int_fast32_t j = (int_fast32_t)c + (int_fast32_t)k - {p['low']};")
    code.line(f"if (j >= 0 && j < {p['C']}) {{ s = s + xp[j] * xp[j]; }}")
    code.end()
    pow_ = "powf" if code.sfx == "f" else "pow"
    code.line(f"y[p * {p['C']}u + c] = xp[c] / ({code.real}){pow_}({code.lit(p['bias'])} + "
              f"{code.lit(p['alpha_over_size'])} * s, {code.lit(p['beta'])});")
    code.end()
    code.end()


def resample(code, op):
    axes = op["plan"]["axes"]
    code.header(op)
    base = "0"
    for d, axis in enumerate(axes):
        code.loop(f"i{d}", axis["n"])
        if "taps" not in axis and axis["n"] > 1:
            code.line(f"uint_fast32_t o{d} = {base + ' + ' if base != '0' else ''}i{d} * {axis['stride']}u;")
            base = f"o{d}"
    code.line(f"{code.real} acc = {code.lit(0)};")
    weight, tapped = None, [d for d, a in enumerate(axes) if "taps" in a]
    for d in tapped:
        axis = axes[d]
        code.loop(f"t{d}", axis["taps"])
        at = f"i{d} * {axis['taps']}u + t{d}"
        code.line(f"int_fast32_t q{d} = {base} + {_table(axis['index_array'], at)};")
        w = f"({code.real})NN_READF_AT(NN_ADDR({axis['weight_array']['symbol']}), {at})"
        code.line(f"{code.real} w{d} = {weight + ' * ' if weight else ''}{w};")
        base, weight = f"q{d}", f"w{d}"
    code.line(f"acc = acc + {weight} * x[{base}];")
    for _ in tapped:
        code.end()
    code.line("*y++ = acc;")
    for _ in axes:
        code.end()


def unary(code, op):
    code.header(op)
    code.loop("k", op["n"])
    code.line(f"y[k] = {op['fn']}(x[k]);")
    code.end()


def tensor_code(ctx):
    """The template's `tensor_code(op, ff)`: the statements of one N-d operation (a block)."""
    def act(name, value):
        return value if name in ("linear", "softmax") else f"nn_{name}({value})"

    def render(op, ff):
        code = TensorCode(ff, ctx["real"], ctx["sfx"], ctx["exp"], api=ctx["api_buffers"])
        code.block()
        kind = op["kind"]
        if kind == "broadcast":
            broadcast(code, op, act)
        else:
            {"move": move, "reduce": reduce, "softmax_axis": softmax_axis, "lrn": lrn, "resample": resample,
             "unary": unary, "recurrent": recurrent.render}[kind](code, op)
        code.close()
        return code.text()
    return render


def model_refusal(model, precision):
    """Why this model cannot be generated in `precision` (recurrent layers: floating point only), or None."""
    if is_fixed(precision):
        layer = next((l for l in model.layers if l.kind == "recurrent"), None)
        if layer is not None:
            return (f"shape v2 generates {layer.source_type} '{layer.name}' in float32 and float64 only "
                    f"(not precision '{precision}')")
    return None


def int16_move(op, ff):
    """A Transpose or Slice over int16 tensors (the fixed-point shape): the same movement loops."""
    code = TensorCode(ff, "int16_t", "f", None)
    code.block()
    move(code, op)
    code.close()
    return code.text()


#: the fixed-point Conv2D and Dense have DSP-extension kernels (v2_fixed.dsp_op)
DSP_KERNELS = True

#: the scalar host loops over a Conv2D's or Dense's inputs are unrolled UNROLL times by gcc on
#: x86-64 (NN_UNROLL; nothing on the MCU targets): each neuron still adds its products in order
UNROLL = 4


#: the layers whose multiply-accumulates split by sign (common.split_accumulation)
MAC_KINDS = ("conv2d", "dense")


#: the float32 layers split on a board without FPU too (board key soft_float, common.split_accumulation)
SOFT_FLOAT_SPLIT = True


def plan_split(ops, *, name, split, storage, real, biases=None):
    """With `split` (float32 on AVR flash or a soft-float board), give each conv2d and dense op its
    MacFacts (`facts`: the flush threshold and why the value facts hold, nnbuild.numerics.float_facts),
    the name of its threshold constant in <name>_weights.c (`keep_exp`) and the tags and add form
    of its lines for the board's soft-float library (`split`: common.split_plan); otherwise leave
    them without. `biases`: each layer's bias values by layer name. Returns whether nn_join ends
    the split sums (AVR flash: common.split_facts)."""
    for op in ops:
        op["facts"] = None
    if not split:
        return False
    join = common.split_facts(ops, storage, real, MAC_KINDS) if storage in FLASH_STORAGES else False
    for op in ops:
        if op["kind"] in MAC_KINDS:
            plan = common.split_plan(np.asarray(op["weights"]).T, storage, f"{name}_{op['c_name']}_keep_exp",
                                     (biases or {}).get(op["name"]))
            facts = plan.pop("facts")
            if storage not in FLASH_STORAGES:   # AVR flash: split_facts gave them (with nn_join's threshold)
                op["facts"] = facts
            op["keep_exp"] = plan.pop("keep_exp")
            op["split"] = plan
    return join


#: the operations const-host lays out for gcc -O3's vectoriser (host_layout). A Conv2D only without
#: padding, groups or dilation: its loops over a window's rows and columns are then unrolled whole
#: (NN_UNROLL), so the accumulators stay in vector registers across the window (left as loops, gcc
#: packs and unpacks them once per row: LeNet-5 at -O3 1,130,504 Ir, against 642,096 unrolled)
HOST_LAYOUT_KINDS = ("dense", "conv2d")


#: const-host Conv2D with one input channel, pooled: neighbouring output columns of one filter
#: computed together, 8 (two SSE vectors) when the width allows, else 4
LANES = (8, 4)


def lanes_layout(op):
    """Storage const-host, a float32 Conv2D with one input channel, stride and dilation 1 across
    columns, no padding or groups, its output width a multiple of 4, read by a pooling only
    (pool_activations): 8 or 4 neighbouring outputs of one filter at a time (`chunk["lanes"]`), each
    sum still the bias then its taps in the kernel's order (the bits of const). The input values
    of neighbouring columns are contiguous, each weight is repeated once per column side by side,
    and the sums are stored by rows of one filter (`rows_layout`: [oy][filter][ox], which the
    pooling reads), so gcc -O3 computes a filter's neighbouring sums with packed multiplies and adds of two
    plain vector loads, without the broadcast of each input value the filter blocks need (LeNet-5's
    first convolution at -O3: 150,912 -> about 80,000 Ir); without vectoriser each product is
    still one load, one multiply and one add."""
    chunk = op["chunks"][0]
    lanes = next(n for n in LANES if op["OW"] % n == 0)
    values = np.repeat(op["weights"][:, :, None], lanes, axis=2).ravel()    # [filter][tap][lane]
    chunk.update(lanes=lanes, size=int(values.size), interleaved=False,
                 values=common.format_values(values, types.SimpleNamespace(name=op["name"])),
                 comment=f"{op['source_type']} '{op['name']}': {op['OC']} filters of {op['k']} weights, each weight "
                         f"{lanes} times side by side ({lanes} neighbouring output columns at a time)")
    op["rows_layout"] = True


def lanes_fit(op):
    """Whether lanes_layout applies to `op` (a float32 const-host operation)."""
    return (op["kind"] == "conv2d" and op["C"] == 1 and op["SW"] == 1 and op["DW"] == 1 and not op["generic"]
            and op["OW"] % LANES[-1] == 0 and len(op["chunks"]) == 1)


def host_layout(op, real):
    """Storage const-host: a float32 Dense's or Conv2D's weights of each block of outputs
    interleaved, [block][k][output], and its relu, tanh or sigmoid applied in a pass after the sums
    (`deferred`): the form gcc -O3 computes in vector registers, lane r being output r summed in
    input order (the same bits as const, whose layout the MCU targets keep)."""
    if real != "float" or op["kind"] not in HOST_LAYOUT_KINDS or op.get("generic"):
        return
    if op["kind"] == "conv2d" and not op["contiguous"]:
        return
    for chunk in op["chunks"]:
        block = chunk["block"]
        if block < 2:
            continue
        rows = op["weights"][chunk["start"]:chunk["start"] + chunk["rows"]]
        values = np.concatenate([rows[b:b + block].T.ravel() for b in range(0, len(rows), block)])
        chunk["values"] = common.format_values(values, types.SimpleNamespace(name=op["name"]))
        chunk["interleaved"] = True
        chunk["comment"] += f", interleaved by blocks of {block} outputs: per block, the {block} weights of each input side by side"
    op["deferred"] = op["activation"] in ("relu", "tanh", "sigmoid") and any(c.get("interleaved") for c in op["chunks"])


def pool_activations(model, ops):
    """Storage const-host: a Conv2D whose activation is deferred (host_layout) and whose only reader
    is an unpadded pooling (not a model output) leaves its sums unactivated, and the pooling applies
    the activation to each value as it reads it (`pre_activation`): the values pooled are the same,
    so are the bits, and the separate pass over the sums (a store, a load and the loop per value) is
    gone. LeNet-5's tanh after each convolution: 4,480 values. A convolution that fits
    lanes_layout gets it (its sums stored by rows, which only its pooling reads)."""
    readers = {}
    for index in range(len(model.layers)):
        for src in model.sources(index):
            readers[src] = readers.get(src, 0) + 1
    by_name = {op["name"]: op for op in ops}
    for op in ops:
        if op["kind"] != "pool2d" or op["padded"]:
            continue
        sources = model.sources(op["index"])
        conv = by_name.get(sources[0]) if len(sources) == 1 else None
        if (conv is None or conv["kind"] != "conv2d" or not conv.get("deferred") or readers[conv["name"]] != 1
                or conv["name"] in model.outputs):
            continue
        conv["deferred"], conv["pooled_by"] = False, op["name"]
        op["pre_activation"], op["pre_activation_of"] = conv["activation"], conv["name"]
        if lanes_fit(conv):
            lanes_layout(conv)
            op["src_rows"] = True


def render(model, *, precision, storage, passes_log, input_range=None, soft_float=False, **fixed_options):
    """The files of `model`; fixed_options (plan, int_input, int_output, dsp) go to v2_fixed.render;
    `soft_float`: the board has no FPU (common.split_accumulation)."""
    if is_fixed(precision):
        from nnbuild.codegen import v2_fixed
        return v2_fixed.render(model, precision=precision, storage=storage, passes_log=passes_log,
                               input_range=input_range, move_code=int16_move, **fixed_options)
    lowered = cnn.lower(model, storage)
    ctx = cnn.context(model, lowered, "v2", precision, storage)
    ctx["tanh_form"] = common.tanh_form(storage, precision)
    if storage == common.HOST_STORAGE:
        for op in lowered["ops"]:
            host_layout(op, ctx["real"])
        pool_activations(model, lowered["ops"])
    # gcc unrolls the scalar host loops over inputs (NN_UNROLL: x86-64 with optimisation only)
    ctx["unroll"] = 0 if storage in FLASH_STORAGES else UNROLL
    ctx["tensor_code"] = tensor_code(ctx)
    ctx["ptr"] = lambda ref: "float" if ref in lowered["api_buffers"] else ctx["real"]
    ctx["read_inputs"] = {r for op in lowered["ops"] for r in op["src"]} | {
        o["src"] for op in lowered["ops"] for o in (op.get("plan") or {}).get("operands", ()) if "src" in o}
    # a float32 multiply whose weight factor is checked zero or normal (value fact for the soft-float WCET)
    ctx["weights_normal"] = lambda op: ctx["real"] == "float" and float_facts.zero_or_normal(op["weights"])
    ctx["one_normal_tags"] = float_facts.ONE_NORMAL_TAGS
    ctx["split_join"] = plan_split(lowered["ops"], name=model.name,
                                   split=split_accumulation(storage, ctx["real"], soft_float), storage=storage,
                                   real=ctx["real"], biases={l.name: getattr(l, "bias", None) for l in model.layers})
    ctx.update(split_ops=[op for op in lowered["ops"] if op.get("facts")], mul_tags=float_facts.MUL_TAGS,
               add_tags=float_facts.ADD_TAGS)
    name = model.name
    code, facts, _ = cnn.render_code("v2.c.j2", ctx)
    record = cnn.trace(model, lowered, facts, passes_log, "v2", [cnn.memory_log(lowered["memory"])], storage=storage)
    return cnn.output_files(name, ctx, code, facts, record)
