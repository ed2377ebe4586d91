"""Gravity programs -> C: the four programs of nnbuild.ir.gravity printed as functions over one blob.

API (p = the program's prefix): p_version, p_memory_size, p_memory_hard, p_initialize(m, seed),
p_activate(m, x) (returns a pointer to the output inside m), p_train(m, x, y) (one SGD batch: x
holds `batch` inputs, y as many targets). Values are the precision's type T (float, double, or the
fixed format's intN_t). No globals, no malloc, every loop bound a literal (repeated in the flow facts
and in NN_LOOPBOUND), so the code is reentrant and WCET-analysable; every block names its layer
and the .g line that declared it.

Fixed point fixedW.F: value = q / 2^F in the smallest of int8/16/32 holding W + F bits; every
result saturates to [-2^(W+F-1), 2^(W+F-1) - 1]; products and dot products are exact in a wide
accumulator, then rounded once, half up (add 2^(F-1), shift right arithmetically); sigmoid, tanh
and exp go through the C double (a float on AVR) and back with the same rounding.
"""

from nnbuild import __version__
from nnbuild.codegen import common, templating
from nnbuild.errors import NNBuildError
from nnbuild.ir import gravity as ir
from nnbuild.names import c_identifier, c_text
from nnbuild.numerics import float_facts

KIND = ir.KIND
PRECISIONS = ("float32", "float64", "fixedW.F")


def output_roles(name):
    """The generated files by role (codegen.output_roles): a Gravity program has no weights file."""
    return {"header": f"{name}.h", "code": f"{name}.c", "flowfacts": f"{name}.flowfacts.json",
            "trace": f"{name}.trace.json"}


def outputs(name):
    return list(output_roles(name).values())


def api_name(prefix, what):
    return f"{prefix}_{what}" if prefix else what


def index_type(bound):
    """uint_fast8_t is a char on x86-64, whose wrap-around keeps gcc from vectorising: 16 bits at
    least; 64 bits for a bound no 32-bit index reaches (a host-only size: boards refuse the blob)."""
    return "uint_fast16_t" if bound <= 65535 else "uint_fast32_t" if bound <= 0xFFFFFFFF else "uint_fast64_t"


def literal(num, value):
    """A C literal of T for a real constant (float: round-trips float32; double: float64)."""
    if num.ctype == "double":
        text = "%.17g" % value
        return text if any(c in text for c in ".eE") else text + ".0"
    text = "%.9g" % value
    return (text if any(c in text for c in ".eE") else text + ".0") + "f"


class Emitter:
    """Indented C lines with the flow-fact recorder's loop marks."""

    def __init__(self, ff):
        self.ff, self.lines, self.depth = ff, [], 1

    def line(self, text=""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def loop(self, var, bound):
        """`for (var = 0; var < bound; ++var) {` with its bound fact; close with end()."""
        self.line(self.ff.loop(bound))
        self.line(f"for ({index_type(bound)} {var} = 0; {var} < {bound}; ++{var}) {{")
        self.depth += 1

    def end(self):
        self.depth -= 1
        self.line("}" + self.ff.end())

    def each(self, var, bound, *statements):
        """A whole loop of `statements` (see loop)."""
        self.loop(var, bound)
        for statement in statements:
            self.line(statement)
        self.end()

    def open(self, text="{"):
        self.line(text)
        self.depth += 1

    def block(self, *pointers):
        """Open a block declaring restrict pointers into the blob v: ("name", offset) writable,
        ("const name", offset) read-only; offset None is the input x. Close with close()."""
        self.open("{")
        for decl, offset in pointers:
            const, _, name = decl.rpartition(" ")
            where = "x" if offset is None else f"v + {offset}"
            self.line(f"{const + ' ' if const else ''}gv_t *restrict {name} = {where};")

    def close(self):
        self.depth -= 1
        self.line("}")


#: neurons an affine layer computes per pass over its inputs (float): 12 accumulators, the input
#: and a product fit x86-64's 16 SSE registers. One on AVR (flash storages name it): soft-float
#: dominates there and one float accumulator already takes 4 of its call-saved registers.
BLOCK = 12


def neuron_block(storage):
    return 1 if storage in common.FLASH_STORAGES else BLOCK


class Arithmetic:
    """C expressions of the precision's operations (float: the operators; fixed: the helpers)."""

    def __init__(self, num, block=1):
        self.num = num
        self.fixed = num.fixed
        self.block = block
        #: AVR float32: the MACs take the value-fact shape (emit_fact_neuron)
        self.value_facts = block == 1 and num.ctype == "float" and not num.fixed

    def one(self):
        return str(1 << self.num.frac) if self.fixed else literal(self.num, 1.0)

    def one_minus(self, b):
        """1 - b. A fixed format without 1.0 (w = 1: [-1, 1)) computes it exactly in 64 bits, then
        saturates it like every result (the constant 2^F fits no gv_t there)."""
        if self.fixed and (1 << self.num.frac) > self.num.qmax:
            return f"gv_sat({1 << self.num.frac} - (int64_t){b})"
        return self.sub(self.one(), b)

    def mul(self, a, b):
        return f"gv_mul({a}, {b})" if self.fixed else f"{a} * {b}"

    def add(self, a, b):
        return f"gv_add({a}, {b})" if self.fixed else f"({a} + {b})"

    def sub(self, a, b):
        return f"gv_sub({a}, {b})" if self.fixed else f"({a} - {b})"

    def func(self, name, a):
        """exp/tanh of a T value, as T."""
        if self.fixed:
            return f"gv_fixed({name}(gv_real({a})))"
        return f"{name}{'f' if self.num.ctype == 'float' else ''}({a})"

    def product(self):
        """The type one exact product of two values fits: int32 up to 16-bit formats (a 16x16 -> 32
        multiply on AVR, not libgcc's 64-bit one), else int64."""
        return "int32_t" if 2 * (self.num.bits - 1) < 31 else "int64_t"

    def acc_type(self, terms):
        """Accumulator of a dot product of `terms` exact products (fixed: int32 when it provably fits)."""
        if not self.fixed:
            return "gv_t"
        return "int32_t" if terms * (1 << (2 * (self.num.bits - 1))) < (1 << 31) else "int64_t"


def layer_label(model, l):
    layer = model.layers[l]
    where = layer.where.rsplit("/", 1)[-1]
    return f"layer {l + 1}: .{layer.directive} {layer.size} {layer.activation} ({where})"


def layer_mark(l, model):
    return model.layers[l].name or ir.default_name(l, len(model.layers))


# --------------------------------------------------------------------------- macro-instructions


def emit_affine(e, ar, model, instr):
    dst, w, b, src, n_in, n_out = instr.args
    e.block(("z", dst), ("const in", src), ("const w", w), ("const bias", b))
    if ar.fixed:
        acc = ar.acc_type(n_in + 1)
        e.loop("j", n_out)
        e.line(f"{acc} acc = ({acc})bias[j] * {1 << ar.num.frac};")
        e.each("i", n_in, f"acc += ({ar.product()})in[i] * w[({index_type(n_in * n_out)})i * {n_out} + j];")
        e.line("z[j] = gv_narrow(acc);")
        e.end()
    else:
        emit_blocked_neurons(e, n_in, n_out, ar.block, ar.value_facts)
    e.close()


def blocks_of(n_out, block):
    """(neurons per pass, passes, neurons left): passes balanced, 100 as 8 x 12 + 4, 10 as 1 x 10."""
    passes = -(-n_out // block)
    per = -(-n_out // passes)
    return per, n_out // per, n_out - n_out // per * per


def emit_blocked_neurons(e, n_in, n_out, block, facts=False):
    """z = bias + in . w, `block` neurons per pass over the inputs: each input is loaded once for
    the block's accumulators, which sum their products in input order from the bias (bit for bit
    the one-neuron-at-a-time sums). The accumulators and pointers are `register` locals (kept in
    registers even at -O0) and the block's weights of input i are row i's consecutive elements."""
    per, passes, rest = blocks_of(n_out, block)
    e.line(f"register const gv_t *restrict wj = w; /* row 0 of the pass's first neuron */")
    if passes > 1:
        e.loop("j", passes)
        if per > 1:
            e.line(f"/* neurons {per}j..{per}j+{per - 1} */")
        emit_neuron_pass(e, n_in, n_out, per, f"{per}u * j + " if per > 1 else "j + ", facts)
        e.line(f"wj += {per};")
        e.end()
    elif passes:
        emit_neuron_pass(e, n_in, n_out, per, "", facts)
        if rest:
            e.line(f"wj += {per};")
    if rest:
        e.open("{")
        e.line(f"/* neurons {passes * per}..{n_out - 1} */")
        emit_neuron_pass(e, n_in, n_out, rest, f"{passes * per}u + ", facts)
        e.close()


#: |v| below 2^-63 (biased exponent < 64: bits 6 and 5 of the top byte clear) is flushed to a zero of its sign
#: before a multiply on AVR: non-zero factors are then normal with eW + eX >= 128
FLUSH_MASK = "0x60u"
FLUSH_EXP = 64


def emit_flush(e, name):
    e.line(f"if (((uint8_t)({name}.u >> 24) & {FLUSH_MASK}) == 0u) {{ /* |{name}| < 2^-63 */")
    e.line(f"    {name}.u &= 0x80000000UL; /* a zero of its sign */")
    e.line("}")


def emit_fact_neuron(e, n_in, n_out, first):
    """One neuron with the value-fact shape (AVR float32, nnbuild.numerics.float_facts): both
    factors flushed below 2^-63, so __mulsf3 neither normalises a subnormal factor nor
    denormalises its product; the bias and the products with a clear sign bit summed in pos, the
    others' magnitudes in neg, so every addition adds two values of clear sign; z = pos - neg."""
    e.open("{")
    e.line("register const gv_t *restrict wi = wj;")
    e.line("gv_bits b;")
    e.line(f"gv_t pos = bias[{first}0u]; /* the bias and the products with a clear sign bit */")
    e.line("gv_t neg = 0.0f; /* minus the bias and the products with a set sign bit */")
    e.line("b.f = pos;")
    e.line("if ((b.u & 0x80000000UL) != 0u) {")
    e.line("    neg = -pos;")
    e.line("    pos = 0.0f;")
    e.line("}")
    e.loop("i", n_in)
    e.line("gv_bits xv, wv, p;")
    e.line("xv.f = in[i];")
    e.line("wv.f = *wi;")
    emit_flush(e, "xv")
    emit_flush(e, "wv")
    e.line("p.f = wv.f * xv.f;" + e.ff.value("mul", float_facts.MUL_TAGS, MUL_WHY))
    emit_signed_sum(e)
    e.line(f"wi += {n_out};")
    e.end()
    e.line(f"z[{first}0u] = pos - neg;")
    e.close()


MUL_WHY = ("both factors flushed to a zero of their sign below 2^-63 (biased exponent < 64) just before: "
           "non-zero factors are normal with eW + eX >= 128")


def emit_neuron_pass(e, n_in, n_out, count, first, facts=False):
    """`count` neurons from z[first] on, their weights from wj (the open block's pointers)."""
    if facts:
        return emit_fact_neuron(e, n_in, n_out, first)
    e.open("{")
    for r in range(count):
        e.line(f"register gv_t acc{r} = bias[{first}{r}u];")
    e.line("register const gv_t *restrict wi = wj;")
    e.line("register const gv_t *restrict xi = in;")
    e.loop("i", n_in)
    e.line("register const gv_t s = *xi++;")
    for r in range(count):
        e.line(f"acc{r} += s * wi[{r}];")
    e.line(f"wi += {n_out};")
    e.end()
    for r in range(count):
        e.line(f"z[{first}{r}u] = acc{r};")
    e.close()


def axpy_helpers(ff, plan, ar):
    """z += s * row over n for the gradient sums (float, not AVR's value-fact code): a function per
    width, its restrict parameters let compilers vectorise (restrict pointers declared in a block
    do not, with gcc 12)."""
    widths = sorted({i.args[5] for i in plan.programs["backprop"] if i.op == "accumulate"})
    e = Emitter(ff)
    e.depth = 0
    for n in widths if not (ar.fixed or ar.value_facts) else ():
        e.line(f"/* z[0..{n}) += s * row[0..{n}) */")
        e.line(f"static void {ff.function(f'gv_axpy{n}')}(gv_t *restrict z, const gv_t *restrict row, gv_t s)")
        e.open("{")
        e.each("j", n, "z[j] += s * row[j];")
        e.close()
        e.line()
    return "\n".join(e.lines)


def emit_activation(e, ar, model, instr):
    dst, n, act = instr.args
    if act == "linear":
        e.line("/* linear activation: a = z */")
        return
    e.block(("z", dst))
    if act == "relu":
        e.each("j", n, "if (z[j] < 0) z[j] = 0;")
    elif act == "sigmoid":
        e.each("j", n, "z[j] = gv_fixed(1.0 / (1.0 + exp(-gv_real(z[j]))));" if ar.fixed else
               f"z[j] = {ar.one()} / ({ar.one()} + {ar.func('exp', '-z[j]')});")
    elif act == "tanh":
        e.each("j", n, f"z[j] = {ar.func('tanh', 'z[j]')};")
    elif ar.value_facts:
        emit_fact_softmax(e, n)
    else:
        emit_softmax(e, ar, n)
    e.close()


#: AVR float32 softmax: z - max below this gives 0 instead of expf (< 2.6e-8, under half an ulp of
#: 1.0); expf then only sees |x| < 18, the bound avr_libloops.json's `exp:|x|<18` entries take
SOFTMAX_CUT = -17.5


def emit_fact_softmax(e, n):
    """z = exp(z - max z) / sum with the value-fact shape (AVR float32): every expf argument is in
    [-17.5, 0] (or NaN), so each e = expf(z - max) is 0 or in [2.5e-8, 1]: the sum adds values of
    clear sign, lies in [1, n] (the max's term is 1) and each division has a normal divisor and
    eA - eB >= -125."""
    e.line("gv_t top = z[0];")
    e.line("gv_t sum = 0.0f;")
    e.each("j", n, "if (z[j] > top) top = z[j];")
    e.loop("j", n)
    e.line("const gv_t d = z[j] - top;")
    e.line(f"if (d < {literal_float(SOFTMAX_CUT)}) {{ /* expf(d) < 2.6e-8 */")
    e.line("    z[j] = 0.0f;")
    e.line("} else {")
    e.line("    z[j] = expf(d);" + e.ff.value("exp", float_facts.EXP_TAGS, f"the argument is z - max z in "
                                           f"[{SOFTMAX_CUT}, 0] (the test above; NaN goes to exp's NaN path)"))
    e.line("}")
    e.line("sum += z[j];" + e.ff.value("add", float_facts.ADD_TAGS, "sum starts at +0.0 and gets expf values "
                                        "(>= +0.0, or NaN) or +0.0: both signs clear"))
    e.end()
    e.loop("j", n)
    e.line("z[j] /= sum;" + e.ff.value("div", float_facts.DIV_TAGS, f"z[j] is 0 or expf of [{SOFTMAX_CUT}, 0], "
                                        f"in [2.5e-8, 1] (biased exponent >= 102); sum in [1, {n}] (the max's "
                                        "term is 1, biased exponent <= 131): A zero or normal, B normal, "
                                        "eA - eB >= -29"))
    e.end()


def literal_float(value):
    return "%.9gf" % value


def emit_softmax(e, ar, n):
    """z = exp(z - max z) / sum: the max keeps exp from overflowing."""
    e.line("gv_t top = z[0];")
    wide = softmax_type(ar, n)
    e.line(f"{wide if ar.fixed else 'gv_t'} sum = 0;")
    e.each("j", n, "if (z[j] > top) top = z[j];")
    e.each("j", n, f"z[j] = {ar.func('exp', ar.sub('z[j]', 'top'))};", "sum += z[j];")
    if ar.fixed:   # z / sum is a ratio of two Q(F) values: one division, then products
        e.line("const double inverse = 1.0 / (double)sum;")
    e.each("j", n, "z[j] = gv_fixed((double)z[j] * inverse);" if ar.fixed else "z[j] /= sum;")


def softmax_type(ar, n):
    """The softmax sum in int32 when it fits (every exp <= 1.0, so sum <= n 2^F). No integer
    division follows: libgcc's 32/64-bit divisions cost more than one float division, and the AVR
    stack analysis cannot bound them."""
    return "int32_t" if (n + 1) * (1 << ar.num.frac) < (1 << 30) else "int64_t"


def emit_derivative(e, ar, act, d, a, n):
    """d *= act'(z), written with the activation's output a."""
    if act == "linear":
        e.line("/* linear: dC/dz = dC/da */")
        return
    e.block(("dz", d), ("const a", a))
    if act == "softmax":
        e.line(f"{'int64_t' if ar.fixed else 'gv_t'} dot = 0;")
        e.each("j", n, f"dot += {f'({ar.product()})a[j] * dz[j]' if ar.fixed else 'a[j] * dz[j]'};")
        e.each("j", n, "dz[j] = gv_mul(a[j], gv_sub(dz[j], gv_narrow(dot)));" if ar.fixed else
               "dz[j] = a[j] * (dz[j] - dot);")
    elif act == "relu":
        e.each("j", n, "if (a[j] <= 0) dz[j] = 0;")
    elif act == "sigmoid":
        e.each("j", n, f"dz[j] = {ar.mul(ar.mul('dz[j]', 'a[j]'), ar.one_minus('a[j]'))};")
    else:
        e.each("j", n, f"dz[j] = {ar.mul('dz[j]', ar.one_minus(ar.mul('a[j]', 'a[j]')))};")
    e.close()


def emit_output_delta(e, ar, model, instr):
    d, a, n, cost, act = instr.args
    e.block(("dz", d), ("const a", a))
    if cost == "cross_entropy" and act == "softmax":
        e.line(f"{'int64_t' if ar.fixed else 'gv_t'} total = 0; /* dC/dz = a sum(y) - y */")
        e.each("j", n, "total += y[j];")
        e.each("j", n, f"dz[j] = {ar.sub('gv_narrow((int64_t)a[j] * total)' if ar.fixed else 'a[j] * total', 'y[j]')};")
        e.close()
        return
    if cost == "exponential":
        e.line("double square = 0; /* C = exp(sum (a - y)^2), dC/da = 2 (a - y) C */")
        diff = "gv_real(gv_sub(a[j], y[j]))" if ar.fixed else "(double)(a[j] - y[j])"
        e.each("j", n, f"square += {diff} * {diff};")
        e.line(f"const gv_t scale = {'gv_fixed(2.0 * exp(square))' if ar.fixed else '(gv_t)(2.0 * exp(square))'};")
        e.each("j", n, f"dz[j] = {ar.mul('scale', ar.sub('a[j]', 'y[j]'))};")
    else:
        e.line("/* " + ("dC/dz = a - y" if cost == "cross_entropy" else "quadratic: dC/da = a - y") + " */")
        e.each("j", n, f"dz[j] = {ar.sub('a[j]', 'y[j]')};")
    e.close()
    if cost != "cross_entropy":
        emit_derivative(e, ar, act, d, a, n)


def half(ar):
    return (1 << (ar.num.frac - 1)) if ar.num.frac else 0


def emit_flush_deltas(e, n):
    """Flush the deltas in place below 2^-63 (value-fact code: they are factors of the gradient and
    back-propagation products); idempotent, so each instruction that multiplies them does it."""
    e.loop("j", n)
    e.line("gv_bits dv;")
    e.line("dv.f = dz[j];")
    emit_flush(e, "dv")
    e.line("dz[j] = dv.f;")
    e.end()


def emit_fact_accumulate(e, model, instr):
    """gw += in dz^T, gb += dz with the value-fact shape (AVR float32): both factors flushed below
    2^-63. With batch 1 the sums are the sample's own products: the update left them +0.0 (and
    initialize did), so they are stored, not added (0 + p is p; only a -0.0 product is stored as
    itself instead of +0.0, the same number): no addition of unknown signs remains."""
    gw, gb, d, src, n_in, n_out = instr.args
    first = model.batch == 1
    e.block(("gw", gw), ("gb", gb), ("dz", d), ("const in", src))
    emit_flush_deltas(e, n_out)
    e.each("j", n_out, "gb[j] = dz[j]; /* batch 1: the sum was +0.0 */" if first else "gb[j] += dz[j];")
    e.loop("i", n_in)
    e.line("gv_bits xv;")
    e.line(f"gv_t *restrict row = gw + ({index_type(n_in * n_out)})i * {n_out};")
    e.line("xv.f = in[i];")
    emit_flush(e, "xv")
    e.loop("j", n_out)
    e.line(("row[j] = xv.f * dz[j]; /* batch 1: the sum was +0.0 */" if first else "row[j] += xv.f * dz[j];")
           + e.ff.value("mul", float_facts.MUL_TAGS, MUL_WHY))
    e.end()
    e.end()
    e.close()


def emit_accumulate(e, ar, model, instr):
    if ar.value_facts:
        return emit_fact_accumulate(e, model, instr)
    gw, gb, d, src, n_in, n_out = instr.args
    e.block(("gw", gw), ("gb", gb), ("const dz", d), ("const in", src))
    e.each("j", n_out, f"gb[j] = {ar.add('gb[j]', 'dz[j]')};")
    e.loop("i", n_in)
    if ar.fixed:
        e.line("const gv_t s = in[i];")
        e.line(f"gv_t *restrict row = gw + ({index_type(n_in * n_out)})i * {n_out};")
        e.each("j", n_out, f"row[j] = {ar.add('row[j]', ar.mul('s', 'dz[j]'))};")
    else:
        e.line(f"gv_axpy{n_out}(gw + ({index_type(n_in * n_out)})i * {n_out}, dz, in[i]);")
    e.end()
    e.close()


def emit_fact_hidden_delta(e, instr):
    """back = w dz with the value-fact shape (AVR float32): the factors flushed below 2^-63, each
    sum split by the products' signs (emit_fact_neuron)."""
    d_prev, w, d, a_prev, n_prev, n, act = instr.args
    e.block(("back", d_prev), ("const w", w), ("dz", d))
    emit_flush_deltas(e, n)
    e.loop("i", n_prev)
    e.line(f"const gv_t *restrict row = w + ({index_type(n_prev * n)})i * {n};")
    e.line("gv_t pos = 0.0f; /* the products with a clear sign bit */")
    e.line("gv_t neg = 0.0f; /* minus the products with a set sign bit */")
    e.loop("j", n)
    e.line("gv_bits wv, p;")
    e.line("wv.f = row[j];")
    emit_flush(e, "wv")
    e.line("p.f = wv.f * dz[j];" + e.ff.value("mul", float_facts.MUL_TAGS, MUL_WHY))
    emit_signed_sum(e)
    e.end()
    e.line("back[i] = pos - neg;")
    e.end()
    e.close()


def emit_signed_sum(e):
    """pos += p or neg -= p by p's sign bit (the value facts of emit_fact_neuron)."""
    e.line("if ((p.u & 0x80000000UL) != 0u) {")
    e.line("    neg -= p.f;" + e.ff.value("add", float_facts.ADD_TAGS, "neg starts at +0.0 or minus a value with "
                                         "a set sign bit and only gets -p for p with a set sign bit: both signs clear"))
    e.line("} else {")
    e.line("    pos += p.f;" + e.ff.value("add", float_facts.ADD_TAGS, "pos starts at +0.0 or a value with a clear "
                                         "sign bit and only gets p with a clear sign bit: both signs clear"))
    e.line("}")


def emit_hidden_delta(e, ar, model, instr):
    d_prev, w, d, a_prev, n_prev, n, act = instr.args
    if ar.value_facts:
        emit_fact_hidden_delta(e, instr)
        return emit_derivative(e, ar, act, d_prev, a_prev, n_prev)
    e.block(("back", d_prev), ("const w", w), ("const dz", d))
    acc = ar.acc_type(n)
    e.loop("i", n_prev)
    e.line(f"const gv_t *restrict row = w + ({index_type(n_prev * n)})i * {n};")
    e.line(f"{acc} acc = 0;")
    e.each("j", n, f"acc += ({ar.product()})row[j] * dz[j];" if ar.fixed else "acc += row[j] * dz[j];")
    e.line("back[i] = gv_narrow(acc);" if ar.fixed else "back[i] = acc;")
    e.end()
    e.close()
    emit_derivative(e, ar, act, d_prev, a_prev, n_prev)


def emit_update(e, ar, plan, instr, api):
    start, grads, count, scale = instr.args
    e.block(("w", start), ("g", grads))
    if ar.fixed:
        rate = int(round(scale * (1 << ir.SCALE_FRAC)))
        if rate < 1:
            raise NNBuildError(f"rate / batch = {scale:g} is below 2^-{ir.SCALE_FRAC}: fixed-point SGD would not move")
        e.line(f"const int64_t rate = {rate}; /* rate / batch = {scale:.9g}, {ir.SCALE_FRAC} fraction bits */")
        e.loop("k", count)
        e.line(f"w[k] = gv_sat((int64_t)w[k] - gv_floor_shift((int64_t)g[k] * rate + {1 << (ir.SCALE_FRAC - 1)}, "
               f"{ir.SCALE_FRAC}));")
    elif ar.value_facts and rate_exponent(scale) >= FLUSH_EXP - 1:
        e.line(f"const gv_t rate = {literal(ar.num, scale)}; /* rate / batch */")
        e.loop("k", count)
        e.line("gv_bits gv, pv;" if rate_exponent(scale) < NEAR_RATE_EXP else "gv_bits gv, wv, pv;")
        e.line("gv.f = g[k];")
        emit_flush(e, "gv")
        e.line("pv.f = rate * gv.f;" + e.ff.value(
            "mul", float_facts.MUL_TAGS, f"rate / batch is a normal constant of biased exponent "
            f"{rate_exponent(scale)} >= 63 and g is flushed to a zero of its sign below 2^-63 just before: "
            "non-zero factors are normal with exponents summing to >= 127"))
        if rate_exponent(scale) >= NEAR_RATE_EXP:
            e.line("wv.f = w[k];")
            emit_fact_subtract(e, rate_exponent(scale))
            e.line("w[k] = wv.f;")
        else:
            e.line("w[k] -= pv.f;")
    else:
        e.line(f"const gv_t rate = {literal(ar.num, scale)}; /* rate / batch */")
        e.loop("k", count)
        e.line("w[k] -= rate * g[k];")
    e.line("g[k] = 0;")
    e.end()
    e.close()


#: the update's exact near subtraction needs p = rate * g, when non-zero, of biased exponent >= 25
#: (g flushed below 2^-63: exponent >= 64 + e(rate) - 127), so that its results are normal
NEAR_RATE_EXP = 88
#: the value fact of the update's remaining __subsf3 calls (avr_libloops.json): at most one
#: normalisation pass
NO_CANCEL_TAGS = float_facts.NO_CANCEL_TAGS


def emit_fact_subtract(e, rate_exp):
    """wv = wv - pv with no massive cancellation left to __subsf3: the subtractions whose result can
    lose more than one leading bit (same sign bits, both normal, biased exponents at most 1 apart)
    are done exactly in integers. There the difference of the 24-bit mantissas (the larger one
    doubled when the exponents differ) is r > 0 in units of 2^(e - 150) or 2^(e - 151), e the
    larger exponent: r < 2^24 is exact, __floatunsisf converts it exactly and the exponent moves
    into place (p's exponent is >= 25, so the result is normal); r >= 2^24 (exponents 1 apart, no
    cancellation) drops one bit, rounded to nearest even as __fp_round does; equal magnitudes give
    +0, as __subsf3 does. Bit for bit __subsf3's result (tests/test_gravity_update.py)."""
    why = (f"the subtraction's operands have different sign bits (an addition of magnitudes), or one is zero, "
           f"infinite or NaN, or their biased exponents differ by >= 2 (p = rate * g is zero, inf, NaN or "
           f"normal of exponent >= {rate_exp - 63}: never subnormal): at most one normalisation shift")
    e.line(f"const uint8_t ew = {exponent_field('wv')}, ep = {exponent_field('pv')};")
    e.line("if (((wv.u ^ pv.u) & 0x80000000UL) == 0u && (uint8_t)(ew - 1u) < 254u && (uint8_t)(ep - 1u) < 254u &&")
    e.line("        (uint8_t)(ew - ep + 1u) <= 2u) {")
    e.line("    /* same signs, both normal, exponents <= 1 apart: the exact difference */")
    e.line("    int32_t r = (int32_t)((wv.u & 0x7FFFFFUL) | 0x800000UL), q = (int32_t)((pv.u & 0x7FFFFFUL) | 0x800000UL);")
    e.line("    uint32_t top = wv.u & 0x7F800000UL, scale = 0x4B000000UL; /* units of 2^(e - 150), e the larger exponent */")
    e.line("    if (ew != ep) { /* units of 2^(e - 151): the larger mantissa doubled */")
    e.line("        scale = 0x4B800000UL;")
    e.line("        if (ew > ep) {")
    e.line("            r <<= 1;")
    e.line("        } else {")
    e.line("            q <<= 1;")
    e.line("            top = pv.u & 0x7F800000UL;")
    e.line("        }")
    e.line("    }")
    e.line("    r -= q; /* |w| - |p| */")
    e.line("    if (r == 0) {")
    e.line("        wv.u = 0u; /* equal magnitudes: +0 */")
    e.line("    } else {")
    e.line("        uint32_t sign = wv.u & 0x80000000UL;")
    e.line("        if (r < 0) {")
    e.line("            r = -r;")
    e.line("            sign ^= 0x80000000UL;")
    e.line("        }")
    e.line("        if (r < 0x1000000L) {")
    e.line("            gv_bits unit;")
    e.line("            unit.f = (gv_t)(uint32_t)r; /* exact: r < 2^24 */")
    e.line("            wv.u = (unit.u + top - scale) | sign;")
    e.line("        } else { /* r in [2^24, 2^25): halved, rounded to nearest, ties to even (__fp_round's rule) */")
    e.line("            wv.u = (top - 0x800000UL + (((uint32_t)r + (((uint32_t)r >> 1) & 1u)) >> 1)) | sign;")
    e.line("        }")
    e.line("    }")
    e.line("} else {")
    e.line("    wv.f -= pv.f;" + e.ff.value("add", NO_CANCEL_TAGS, why))
    e.line("}")


def exponent_field(name):
    """The biased exponent of a gv_bits as a byte, from its top 16 bits (no 32-bit shift loop on AVR)."""
    return f"(uint8_t)((uint16_t)((uint16_t)({name}.u >> 16) << 1) >> 8)"


def rate_exponent(scale):
    """The biased exponent of the float32 rate / batch."""
    return int(float_facts.biased_exponents([scale])[0])


def emit_uniform(e, ar, instr):
    offset, count, limit = instr.args
    scale = ir.uniform_scale(ar.num, limit)
    shift = 32 - ir.UNIFORM_BITS
    draw = f"(int32_t)(s >> {shift}) - {1 << (ir.UNIFORM_BITS - 1)}L"
    e.open("{")
    e.line(f"gv_t *restrict w = v + {offset}; /* Glorot-uniform, limit {limit:.9g} */")
    e.loop("k", count)
    e.line("s ^= s << 13; s ^= s >> 17; s ^= s << 5;")
    if ar.fixed:
        e.line(f"w[k] = gv_sat(gv_floor_shift((int64_t)({draw}) * {scale}LL + {1 << (ir.SCALE_FRAC - 1)}, "
               f"{ir.SCALE_FRAC}));")
    else:
        e.line(f"w[k] = (gv_t)({draw}) * {literal(ar.num, float(scale))};")
    e.end()
    e.close()


def emit_zero(e, instr):
    offset, count = instr.args
    e.block(("z", offset))
    e.each("k", count, "z[k] = 0;")
    e.close()


EMIT = {"affine": emit_affine, "activation": emit_activation, "output_delta": emit_output_delta,
        "accumulate": emit_accumulate, "hidden_delta": emit_hidden_delta}


def program_body(e, ar, plan, program, api):
    """The C statements of one program, each layer's block marked for the trace."""
    model, current = plan.model, None
    for instr in plan.programs[program]:
        if instr.layer >= 0 and instr.layer != current:
            current = instr.layer
            e.line(e.ff.layer(f"{program}.{layer_mark(instr.layer, model)}") +
                   f" /* {c_text(layer_label(model, instr.layer))} */")
        e.line(f"/* {instr.op} */")
        if instr.op in EMIT:
            EMIT[instr.op](e, ar, model, instr)
        elif instr.op == "uniform":
            emit_uniform(e, ar, instr)
        elif instr.op == "zero":
            emit_zero(e, instr)
        elif instr.op == "update":
            if current is not None:
                e.line(e.ff.layers_end())
                current = None
            emit_update(e, ar, plan, instr, api)
        elif instr.op == "batch":
            batch, n_in, n_out = instr.args
            x, y = f"xs + ({index_type(batch * n_in)})n * {n_in}", f"ys + ({index_type(batch * n_out)})n * {n_out}"
            e.each("n", batch, f"{api['forward']}(v, {x});", f"{api['backprop']}(v, {x}, {y});")
        else:
            raise NNBuildError(f"internal error: no C for Gravity instruction '{instr.op}'")
    if current is not None:
        e.line(e.ff.layers_end())


def render(model, *, precision=None, storage="const", passes_log=(), input_range=None):
    """{file name: text or JSON-able} for a Gravity model (`precision` overrides the .g's)."""
    plan = ir.plan(model, precision)
    num, name, prefix = plan.number, model.name, model.prefix
    ar = Arithmetic(num, neuron_block(storage))
    api = {what: api_name(prefix, what) for what in ("version", "memory_size", "memory_hard", "initialize",
                                                     "activate", "train", "forward", "backprop")}
    functions = {"initialize": api["initialize"], "activate": api["forward"], "backprop": api["backprop"],
                 "train": api["train"]}
    ff = common.FlowFacts(name, functions=True)
    ff.entry = api["activate"]
    bodies = {"helpers": axpy_helpers(ff, plan, ar)}
    for program in ("initialize", "activate", "backprop", "train"):
        e = Emitter(ff)
        e.lines.append(ff.function(functions[program]))
        program_body(e, ar, plan, program, api)
        bodies[program] = "\n".join(e.lines[1:])
        bodies[program + "_mark"] = e.lines[0]
    guard = c_identifier(name).upper()
    uses = fixed_helpers_used("\n".join(bodies.values())) if num.fixed else set()
    context = {
        "name": name, "guard": guard, "version": __version__, "gravity_version": ir.VERSION,
        "source": (model.source_files[0].rsplit("/", 1)[-1] if model.source_files else name),
        "precision": num.name, "ctype": num.ctype, "fixed": num.fixed, "frac": num.frac,
        "uses": uses, "qmax": num.qmax if num.fixed else None, "qmin": num.qmin if num.fixed else None,
        "half": half(ar) if num.fixed else None, "api": api, "bodies": bodies,
        "n_in": model.inputs, "n_out": model.output_size, "batch": model.batch,
        "hard_bytes": plan.hard_bytes, "size_bytes": plan.size_bytes, "output_offset": plan.output_offset,
        "sizes": model.sizes, "cost": model.cost, "rate": model.learning_rate,
        "layers": [layer_label(model, l) for l in range(len(model.layers))],
        "frac_scale": literal(num, 2.0 ** -num.frac) if num.fixed else None,
        "frac_unit": float(1 << num.frac),
        "narrow_convert": num.fixed and num.bits <= 24,
        "product": ar.product() if num.fixed else None,
        "value_facts": ar.value_facts,
    }
    text = templating.render("gravity.c.j2", context)
    code, facts, _ = ff.resolve(text)
    facts["entries"] = [api["activate"], api["train"]]
    del facts["entry"]
    files = {f"{name}.h": templating.render("gravity.h.j2", context), f"{name}.c": code,
             f"{name}.flowfacts.json": facts,
             f"{name}.trace.json": trace(plan, facts, api)}
    return files


#: the fixed-point helpers each helper calls
HELPER_CALLS = {"gv_mul": ("gv_narrow",), "gv_narrow": ("gv_sat", "gv_floor_shift"), "gv_add": ("gv_sat",),
                "gv_sub": ("gv_sat",), "gv_real": (), "gv_fixed": (), "gv_sat": (), "gv_floor_shift": ()}


def fixed_helpers_used(code):
    """The helpers the code calls, with the ones they call (an unused static function is a warning)."""
    used = {h for h in HELPER_CALLS if h + "(" in code}
    while True:
        more = used | {c for h in used for c in HELPER_CALLS[h]}
        if more == used:
            return used
        used = more


def trace(plan, facts, api):
    """Each declared layer -> its lines in each program (`lines`: the activate program's, as every
    kind reports; `program_lines`: all four); the blob map, hard region apart."""
    model = plan.model
    ranges = {l["name"]: [l["first_line"], l["last_line"]] for l in facts["layers"]}
    layers = []
    for i, layer in enumerate(model.layers):
        mark = layer_mark(i, model)
        layers.append({"index": i, "name": mark, "type": f".{layer.directive}", "activation": layer.activation,
                       "inputs": model.sizes[i], "units": layer.size, "code": f"{model.name}.c",
                       "where": layer.where.rsplit("/", 1)[-1],
                       "lines": ranges.get(f"activate.{mark}", [None, None]),
                       "program_lines": {p: ranges[f"{p}.{mark}"] for p in plan.programs if f"{p}.{mark}" in ranges}})
    return {"model": model.name, "kind": ir.KIND, "shape": "gravity",
            "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
            "precision": plan.number.name, "api": api, "passes": [], "layers": layers,
            "program": {"cost": model.cost, "batch": model.batch, "rate": model.learning_rate},
            "blob": {"memory_hard_bytes": plan.hard_bytes, "memory_size_bytes": plan.size_bytes,
                     "rest_bytes": plan.size_bytes - plan.hard_bytes, "element_bytes": plan.number.bytes,
                     "output_offset": plan.output_offset, "regions": [vars(r) for r in plan.regions]}}
