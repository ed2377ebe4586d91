"""C of a Recurrent layer (LSTM, GRU, simple RNN; nnbuild.ir.graph.Recurrent), shared by the CNN shapes.

One sequence per call: every direction starts from its initial state (zero, the model's constant,
or the caller's: state inputs of the model are arguments of the C function) copied into local
arrays of the call, so nothing survives between calls. Every loop
has a literal bound: the steps (the sequence length), the units, the features. Per step and
unit, the gate pre-activations are the bias plus the input products plus the recurrence
products, in that order (nnbuild.ir.semantics.recurrent computes the same terms); the hidden
state is double-buffered (the products read the previous one while the new one is written).
Weights are per direction: W [G*H][F], R [G*H][H] rows in ONNX's gate order.
"""

from nnbuild.codegen import common
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier


def lower(op, layer, prefix, storage, array):
    """Fill `op` with the recurrent plan and its weight arrays (`array(symbol, values, layer, comment)`)."""
    sym = f"{prefix}_{c_identifier(layer.name)}"
    what = f"{layer.source_type} '{layer.name}'"
    steps, features = op["in_shapes"][0]
    dirs = []
    arrays = op.setdefault("arrays", [])
    for d, direction in enumerate(layer.directions):
        entry = {"direction": direction}
        roles = [("w", layer.w[d], "input weights W [gates*hidden][features]"),
                 ("r", layer.r[d], "recurrence weights R [gates*hidden][hidden]"),
                 ("b", layer.bias[d], "gate biases (W and R biases summed, but the GRU candidate's R bias)")]
        if layer.rbias is not None:
            roles.append(("rb", layer.rbias[d], "GRU candidate recurrence bias"))
        if layer.peephole is not None:
            roles.append(("p", layer.peephole[d], "peepholes (i, o, f)"))
        if layer.initial_h is not None:
            roles.append(("h0", layer.initial_h[d], "initial hidden state"))
        if layer.initial_c is not None:
            roles.append(("c0", layer.initial_c[d], "initial cell state"))
        for role, values, comment in roles:
            a = array(f"{sym}_{role}{d}", values, layer, f"{what} direction {direction}: {comment}")
            if storage in common.FLASH_STORAGES and a["size"] * common.FLOAT_BYTES > common.MAX_ARRAY_BYTES:
                raise NNBuildError(f"{what}: {comment.split(' [')[0]} of {a['size'] * common.FLOAT_BYTES} bytes "
                                   f"exceed avr-gcc's {common.MAX_ARRAY_BYTES}-byte array limit in flash")
            entry[role] = a
            arrays.append(a)
        dirs.append(entry)
    op.update(kind="recurrent", cell=layer.cell, T=int(steps), F=int(features), H=layer.hidden,
              D=len(layer.directions), dirs=dirs, acts=tuple(layer.activations), clip=layer.clip,
              cell_clip=layer.cell_clip, coupling=layer.coupling, lbr=bool(layer.linear_before_reset),
              output=layer.output, cell_activations=tuple(layer.activations),
              state_inputs=list(layer.state_inputs))


def _act(name, value):
    return f"nn_{name}({value})"


def _clip(code, var, bound):
    if bound is not None:
        lo, hi = code.lit(-float(bound)), code.lit(float(bound))
        code.line(f"{var} = {var} < {lo} ? {lo} : ({var} > {hi} ? {hi} : {var});")


def _read(code, entry, role, index):
    """A weight (float32 in the weights file) in the computing precision."""
    read = f"NN_READF_AT(NN_ADDR({entry[role]['symbol']}), {index})"
    return read if code.real == "float" else f"({code.real}){read}"


def _products(code, op, entry, rows, source, length, var):
    """acc_<g> += M[row g*H + j][k] * source[k] for each gate g of `rows`, over k < length."""
    code.loop("k", length)
    code.line(f"{code.real} v = {source}[k];")
    H = op["H"]
    for gate in rows:
        row = f"({gate * H}u + j) * {length}u + k" if gate else f"j * {length}u + k"
        code.line(f"acc_{gate} += {_read(code, entry, var, row)} * v;")
    code.end()


def _gates(code, op, entry, rows, xt):
    """acc_<g> = b[g*H + j] + W x_t + R h for the gates of `rows`."""
    H = op["H"]
    for gate in rows:
        code.line(f"{code.real} acc_{gate} = {_read(code, entry, 'b', f'{gate * H}u + j' if gate else 'j')};")
    _products(code, op, entry, rows, xt, op["F"], "w")
    _products(code, op, entry, rows, "hp", op["H"], "r")


def _lstm_step(code, op, entry, d, t):
    f_act, g_act, h_act = op["acts"]
    H = op["H"]
    # gate rows: 0 i, 1 o, 2 f, 3 c
    rows = [0, 1, 2, 3]
    if op["coupling"] == "forget_from_input":
        rows = [0, 1, 3]
    elif op["coupling"] == "input_from_forget":
        rows = [1, 2, 3]
    code.loop("j", H)
    _gates(code, op, entry, rows, "xt")
    if "p" in entry:
        if 0 in rows:
            code.line(f"acc_0 += {_read(code, entry, 'p', 'j')} * c[j];")
        if 2 in rows:
            code.line(f"acc_2 += {_read(code, entry, 'p', f'{2 * H}u + j')} * c[j];")
    for gate in rows:
        if gate != 1:
            _clip(code, f"acc_{gate}", op["clip"])
    one = code.lit(1)
    if op["coupling"] == "input_from_forget":
        code.line(f"{code.real} gf = {_act(f_act, 'acc_2')};")
        code.line(f"{code.real} gi = {one} - gf;")
    else:
        code.line(f"{code.real} gi = {_act(f_act, 'acc_0')};")
        code.line(f"{code.real} gf = {one + ' - gi' if op['coupling'] == 'forget_from_input' else _act(f_act, 'acc_2')};")
    code.line(f"{code.real} cj = gf * c[j] + gi * {_act(g_act, 'acc_3')};")
    _clip(code, "cj", op["cell_clip"])
    code.line("c[j] = cj;")
    if "p" in entry:
        code.line(f"acc_1 += {_read(code, entry, 'p', f'{H}u + j')} * cj;")
    _clip(code, "acc_1", op["clip"])
    code.line(f"hn[j] = {_act(f_act, 'acc_1')} * {_act(h_act, 'cj')};")
    _store_step(code, op, d, t)
    code.end()


def _gru_step(code, op, entry, d, t):
    f_act, g_act = op["acts"]
    H = op["H"]
    code.loop("j", H)
    _gates(code, op, entry, [0, 1], "xt")
    _clip(code, "acc_0", op["clip"])
    _clip(code, "acc_1", op["clip"])
    code.line(f"z[j] = {_act(f_act, 'acc_0')};")
    code.line(f"rg[j] = {_act(f_act, 'acc_1')}{'' if op['lbr'] else ' * hp[j]'};")
    code.end()
    code.loop("j", H)
    code.line(f"{code.real} acc_2 = {_read(code, entry, 'b', f'{2 * H}u + j')};")
    _products(code, op, entry, [2], "xt", op["F"], "w")
    code.line(f"{code.real} q = {code.lit(0)};")
    code.loop("k", H)
    code.line(f"q += {_read(code, entry, 'r', f'({2 * H}u + j) * {H}u + k')} * {'hp' if op['lbr'] else 'rg'}[k];")
    code.end()
    rb = _read(code, entry, "rb", "j")
    code.line(f"acc_2 = acc_2 + rg[j] * (q + {rb});" if op["lbr"] else f"acc_2 = acc_2 + (q + {rb});")
    _clip(code, "acc_2", op["clip"])
    code.line(f"hn[j] = ({code.lit(1)} - z[j]) * {_act(g_act, 'acc_2')} + z[j] * hp[j];")
    _store_step(code, op, d, t)
    code.end()


def _rnn_step(code, op, entry, d, t):
    code.loop("j", op["H"])
    _gates(code, op, entry, [0], "xt")
    _clip(code, "acc_0", op["clip"])
    code.line(f"hn[j] = {_act(op['acts'][0], 'acc_0')};")
    _store_step(code, op, d, t)
    code.end()


def _stored(code, op, value):
    """`value` as the output tensor's element type (the API's float when the precision is double)."""
    dst = code.ptr(op["dst"])
    return value if dst == code.real else f"({dst}){value}"


def _store_step(code, op, d, t):
    if op["output"] == "sequence":
        D, H = op["D"], op["H"]
        at = f"{t} * {D * H}u + {d * H}u + j" if d else f"{t} * {D * H}u + j"
        code.line(f"y[{at}] = {_stored(code, op, 'hn[j]')};")


def render(code, op):
    """The statements of one recurrent op into `code` (a v2 TensorCode)."""
    code.header(op)
    T, F, H = op["T"], op["F"], op["H"]
    several = len(op["src"]) > 1
    x = "x0" if several else "x"
    # the state inputs follow the sequence: x1 (h, or c), x2 (c)
    state = {name: f"x{k + 1}" for k, name in enumerate(op["state_inputs"])}

    def initial(name, d, entry):
        if name in state:
            value = f"{state[name]}[{d * H}u + j]" if d else f"{state[name]}[j]"
            return value if code.ptr(op["src"][1 + op["state_inputs"].index(name)]) == code.real else \
                f"({code.real}){value}"
        role = name + "0"
        return _read(code, entry, role, "j") if role in entry else code.lit(0)
    for d, entry in enumerate(op["dirs"]):
        origin = ("the caller's" if state else "the given" if "h0" in entry or "c0" in entry else "the zero")
        code.line(f"/* direction {d}: {entry['direction']}, {T} steps from {origin} initial state */")
        code.block()
        code.line(f"{code.real} hs[{2 * H}];")
        if op["cell"] == "lstm":
            code.line(f"{code.real} c[{H}];")
        elif op["cell"] == "gru":
            code.line(f"{code.real} z[{H}];")
            code.line(f"{code.real} rg[{H}];")
        code.line(f"{code.real} *hp = hs;")
        code.line(f"{code.real} *hn = hs + {H};")
        code.loop("j", H)
        code.line(f"hp[j] = {initial('h', d, entry)};")
        if op["cell"] == "lstm":
            code.line(f"c[j] = {initial('c', d, entry)};")
        code.end()
        code.loop("s", T)
        t = "s" if entry["direction"] == "forward" else "t"
        if t == "t":
            code.line(f"{'uint_fast32_t' if T > 65535 else 'unsigned int'} t = {T - 1}u - s;")
        code.line(f"const {code.ptr(op['src'][0])} *xt = {x} + {t} * {F}u;")
        {"lstm": _lstm_step, "gru": _gru_step, "rnn": _rnn_step}[op["cell"]](code, op, entry, d, t)
        code.line("{")
        code.line(f"    {code.real} *swap = hp;")
        code.line("    hp = hn;")
        code.line("    hn = swap;")
        code.line("}")
        code.end()
        if op["output"] != "sequence":
            code.loop("j", H)
            value = "hp[j]" if op["output"] == "last" else "c[j]"
            code.line(f"y[{d * H}u + j] = {_stored(code, op, value)};" if d else
                      f"y[j] = {_stored(code, op, value)};")
            code.end()
        code.close()
