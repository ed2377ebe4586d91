"""Gravity `.g` front-end: the whole language of Givargis's compiler (docs formats.md section 5).

    .module "name";  .prefix "p";  .optimizer sgd 0.1;  .precision float | double | fixed [w, f];
    .costfnc quadratic | exponential | cross_entropy;  .batch EXPR;  .input EXPR;
    .output EXPR ACT;  .hidden EXPR ACT;     (ACT: relu linear softmax sigmoid, and tanh)

`//` comments, integer expressions (+ - * / % with C precedence, unary minus, parentheses; the sign
of an integer literal is part of the token, so `28 -1` is an error and `28 - 1` is 27), reals with a
point and an upper-case `E` exponent, strings in single or double quotes with backslash escapes or
doubled quotes. Hidden layers keep their declared order (Gravity's compiler reverses them). Where
this reader is kinder than Gravity's: a final comment may end the file without a newline, and CR
counts as white space. Every error is one line `file:line:column: message`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from nnbuild import files
from nnbuild.errors import NNBuildError
from nnbuild.ir.gravity import ACTIVATIONS, COSTS, FLOAT32_MIN_NORMAL, GravityModel, Layer, validate
from nnbuild.names import MAX_IDENTIFIER, is_c_identifier

KIND = "gravity"
#: a .g file is a few lines: anything bigger is not one
MAX_BYTES = 1 << 20
MAX_INPUT = 1_000_000
MAX_BATCH = 1000

_TOKENS = re.compile(r"""
    (?P<space>[ \t\r\n]+) | (?P<comment>//[^\n]*(\n|$)) |
    (?P<real>-?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:E[+-]?[0-9]+)?) | (?P<int>-?[0-9]+) |
    (?P<string>"(?:[^"\\\n]|\\.|"")*"|'(?:[^'\\\n]|\\.|'')*') |
    (?P<directive>\.[A-Za-z_]+) | (?P<word>[A-Za-z_][A-Za-z_0-9]*) | (?P<punct>[;,\[\]()+*/%-])
""", re.VERBOSE)


class Token:
    def __init__(self, kind, text, line, column):
        self.kind, self.text, self.line, self.column = kind, text, line, column

    def __repr__(self):
        return f"{self.kind}:{self.text}"


def describe(token):
    return "end of file" if token.kind == "eof" else f"'{token.text}'"


class Reader:
    """Tokens of one .g file with their positions, and the error that names a position."""

    def __init__(self, path, text):
        self.path, self.tokens, self.pos = str(path), [], 0
        line, start, offset = 1, 0, 0
        while offset < len(text):
            match = _TOKENS.match(text, offset)
            if not match:
                self.fail_at(line, offset - start + 1, f"unexpected character {text[offset]!r}")
            kind = match.lastgroup
            if kind not in ("space", "comment"):
                self.tokens.append(Token(kind, match.group(), line, offset - start + 1))
            for k, ch in enumerate(match.group()):
                if ch == "\n":
                    line, start = line + 1, offset + k + 1
            offset = match.end()
        self.tokens.append(Token("eof", "", line, offset - start + 1))

    def fail_at(self, line, column, message):
        raise NNBuildError(f"{self.path}:{line}:{column}: {message}")

    def fail(self, token, message):
        self.fail_at(token.line, token.column, message)

    def where(self, token):
        return f"{self.path}:{token.line}:{token.column}"

    def peek(self):
        return self.tokens[self.pos]

    def next(self):
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, kind, text=None, what=None):
        token = self.next()
        if token.kind != kind or (text is not None and token.text != text):
            self.fail(token, f"expected {what or repr(text) or kind}, found {describe(token)}")
        return token

    def word(self, choices, what):
        token = self.next()
        if token.kind != "word" or token.text not in choices:
            self.fail(token, f"expected {what} ({' | '.join(choices)}), found {describe(token)}")
        return token.text


# --------------------------------------------------------------------------- integer expressions


def expression(reader):
    """EXPR := TERM (('+' | '-') TERM)*, as an int; a negative literal right after a value is an error."""
    value = term(reader)
    while reader.peek().kind == "punct" and reader.peek().text in "+-":
        op = reader.next().text
        right = term(reader)
        value = value + right if op == "+" else value - right
    return value


def term(reader):
    value = unary(reader)
    while reader.peek().kind == "punct" and reader.peek().text in "*/%":
        op_token = reader.next()
        right = unary(reader)
        if op_token.text == "*":
            value *= right
        elif right == 0:
            reader.fail(op_token, f"division by zero in '{op_token.text}'")
        else:   # C semantics: truncate toward zero
            quotient = abs(value) // abs(right) * (1 if (value < 0) == (right < 0) else -1)
            value = quotient if op_token.text == "/" else value - quotient * right
        if abs(value) > 1 << 62:
            reader.fail(op_token, "integer expression out of range")
    return value


def unary(reader):
    token = reader.next()
    if token.kind == "punct" and token.text == "-":
        return -unary(reader)
    if token.kind == "punct" and token.text == "(":
        value = expression(reader)
        reader.expect("punct", ")")
        return value
    if token.kind == "int":
        if len(token.text) > 18:
            reader.fail(token, "integer literal out of range")
        return int(token.text)
    reader.fail(token, f"expected an integer expression, found {describe(token)}")


# --------------------------------------------------------------------------- directives


def string_value(reader, token):
    """The text of a string token: backslash escapes the next character, a doubled quote is one."""
    body, quote, out, k = token.text[1:-1], token.text[0], [], 0
    while k < len(body):
        ch = body[k]
        if ch == "\\":
            out.append(body[k + 1])
            k += 2
        elif ch == quote:
            out.append(quote)
            k += 2
        else:
            out.append(ch)
            k += 1
    return "".join(out)


def identifier(reader, directive, empty_ok):
    """A quoted name that becomes C symbols and file names: a C identifier of at most
    MAX_IDENTIFIER characters (nnbuild.names)."""
    token = reader.expect("string", what="a quoted name")
    value = string_value(reader, token)
    if len(value) > MAX_IDENTIFIER:
        reader.fail(token, f".{directive} name of {len(value):,} characters: at most {MAX_IDENTIFIER} "
                           "(the significant characters of a C identifier)")
    if not (empty_ok and value == "") and not is_c_identifier(value):
        reader.fail(token, f"{value!r} is not a C identifier")
    return value


def parse(path, text):
    """The GravityModel a .g text declares; one line file:line:column on any error."""
    reader = Reader(path, text)
    seen, values, layers, output = {}, {}, [], None
    while reader.peek().kind != "eof":
        token = reader.expect("directive", what="a directive (.module, .input, ...)")
        name = token.text[1:]
        if name != "hidden" and name in seen:
            reader.fail(token, f".{name} given twice (first at line {seen[name].line})")
        seen[name] = token
        if name in ("module", "prefix"):
            values[name] = identifier(reader, name, empty_ok=name == "prefix")
        elif name == "optimizer":
            reader.word(("sgd",), "an optimizer")
            rate = reader.next()
            if rate.kind != "real":
                reader.fail(rate, f"expected a real learning rate such as 0.1, found {describe(rate)}")
            values["rate"] = float(rate.text)
            values["rate_token"] = rate
            if not 0 < values["rate"] <= 1:
                reader.fail(rate, f"the sgd rate must be in (0, 1], got {rate.text}")
        elif name == "precision":
            values["precision"] = precision(reader)
        elif name == "costfnc":
            values["cost"] = reader.word(COSTS, "a cost function")
        elif name in ("batch", "input"):
            start = reader.peek()
            value = expression(reader)
            limit = MAX_BATCH if name == "batch" else MAX_INPUT
            if not 1 <= value <= limit:
                reader.fail(start, f".{name} must be 1 to {limit:,}, got {value}")
            values[name] = value
        elif name in ("output", "hidden"):
            start = reader.peek()
            size = expression(reader)
            if not 1 <= size <= MAX_INPUT:
                reader.fail(start, f".{name} layer size must be 1 to {MAX_INPUT:,}, got {size}")
            act = reader.word(ACTIVATIONS, "an activation")
            layer = Layer(size, act, reader.where(token), name)
            if name == "output":
                output = layer
            else:
                layers.append(layer)
        else:
            reader.fail(token, f"unknown directive '.{name}'")
        reader.expect("punct", ";", what="';'")
    end = reader.peek()
    for required in ("module", "input", "output", "hidden"):
        if required not in seen:
            reader.fail(end, f"missing .{required} directive")
    if "rate" in values and values["rate"] / values.get("batch", 1) < FLOAT32_MIN_NORMAL:
        reader.fail(values["rate_token"], rate_refusal(values["rate"], values.get("batch", 1)))
    layers = [replace(l, name=f"hidden{i + 1}") for i, l in enumerate(layers)] + [replace(output, name="output")]
    model = GravityModel(name=values["module"], prefix=values.get("prefix", "g"), inputs=values["input"],
                         layers=layers, precision=values.get("precision", "float32"),
                         cost=values.get("cost", "cross_entropy"), batch=values.get("batch", 1),
                         learning_rate=values.get("rate", 0.1), source_files=[str(path)])
    return validate(model)


def rate_refusal(rate, batch):
    return (f"the sgd rate {rate!r} / batch {batch} is below the smallest normal float32 "
            f"{FLOAT32_MIN_NORMAL:.7g}: the generated update would multiply by zero or a subnormal")


def precision(reader):
    """float -> float32, double -> float64, fixed [w, f] -> fixedW.F (w >= 1, f >= 0, w + f <= 64)."""
    kind = reader.word(("float", "double", "fixed"), "a precision")
    if kind != "fixed":
        return {"float": "float32", "double": "float64"}[kind]
    reader.expect("punct", "[")
    start = reader.peek()
    whole = expression(reader)
    reader.expect("punct", ",")
    frac = expression(reader)
    reader.expect("punct", "]")
    if whole < 1 or frac < 0 or whole + frac > 64:
        reader.fail(start, f"fixed [{whole}, {frac}]: needs w >= 1, f >= 0 and w + f <= 64")
    return f"fixed{whole}.{frac}"


def load(path):
    """The GravityModel of a .g file."""
    path = Path(path)
    try:
        raw = path.read_bytes()[:MAX_BYTES + 1]
    except OSError as exc:
        raise NNBuildError(f"cannot read: {exc.strerror}", path=path) from None
    if len(raw) > MAX_BYTES:
        raise NNBuildError(f"larger than {MAX_BYTES:,} bytes: not a .g program", path=path)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise NNBuildError(f"{path}:{line}:{column}: non-ASCII byte 0x{raw[exc.start]:02x}") from None
    return parse(path, text)


def write(model, path):
    """A .g text that reads back as `model` (the JIT saves trained programs with it)."""
    precision = {"float32": "float", "float64": "double"}.get(model.precision)
    if precision is None:
        whole, frac = model.precision[len("fixed"):].split(".")
        precision = f"fixed [{whole}, {frac}]"
    lines = [f'.module "{model.name}";', f'.prefix "{model.prefix}";', f".optimizer sgd {real_text(model.learning_rate)};",
             f".precision {precision};", f".costfnc {model.cost};", f".batch {model.batch};",
             f".input {model.inputs};"]
    lines += [f".hidden {l.size} {l.activation};" for l in model.layers[:-1]]
    lines.append(f".output {model.layers[-1].size} {model.layers[-1].activation};")
    files.write_text(path, "\n".join(lines) + "\n")


def real_text(value):
    """A REAL token for `value`: a point always, an upper-case E exponent (`1e-05` -> `1.0E-05`)."""
    mantissa, _, exponent = repr(float(value)).partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + (f"E{exponent}" if exponent else "")
