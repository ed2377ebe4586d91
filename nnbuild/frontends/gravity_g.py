"""Gravity `.g` front-end: the language of Givargis's compiler, token for token (docs formats.md
section 5; Gravity's src/g_lang.l and src/g_lang.y at the release commit).

    .module "name";  .prefix "p";  .optimizer sgd 0.1;  .precision float | double | fixed [w, f];
    .costfnc quadratic | exponential | cross_entropy;  .batch EXPR;  .input EXPR;
    .output EXPR ACT;  .hidden EXPR ACT;  ;     (ACT: relu linear softmax sigmoid, and tanh)

Tokens as Gravity's lexer makes them, the longest match first: the directives and keywords are
fixed strings that need no separator (`sgd.5`, `2relu`, `.module"m"`); an integer is `-?[0-9]+`
(the sign is part of the token, so `28 -1` and `28-1` are errors and `28 - 1` is 27); a real has a
point or an upper-case `E` exponent or both (`0.1`, `.5`, `1.`, `1E-1`, `.5E-1`); a string is
quoted with ' or " and holds `\\x` pairs, doubled quotes or any other character but the newline,
and its value is the text between the quotes, unprocessed (then checked as a C identifier); `//`
comments run to the end of the line; white space is space, tab and newline. A file is a sequence
of phrases: a directive and its `;`, or a lone `;`. Integer expressions: + - * / % with C
precedence and truncating division, unary minus binding tightest, parentheses.

nnbuild's deviations, on purpose: hidden layers keep their declared order (Gravity's compiler
reverses them); the activation `tanh` exists; a final comment may end the file without a newline
and CR counts as white space (kinder); refused where Gravity's compiler takes a value it cannot
build: sizes and .batch below 1, integer literals over 18 digits or expressions beyond 2^62, names
that are C keywords, reserved file stems, start with `_` or exceed 63 characters (nnbuild.names),
and an sgd rate / batch below the smallest normal float32. Every error is one line
`file:line:column: message`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from nnbuild import files
from nnbuild.errors import NNBuildError
from nnbuild.ir.gravity import ACTIVATIONS, COSTS, FLOAT32_MIN_NORMAL, GravityModel, Layer, validate
from nnbuild.names import MAX_NAME_LENGTH, is_c_identifier

KIND = "gravity"
#: a .g file is a few lines: anything bigger is not one
MAX_BYTES = 1 << 20
MAX_INPUT = 1_000_000
MAX_BATCH = 1000

#: Gravity's fixed-string tokens: its directives and keywords (and nnbuild's `tanh`)
DIRECTIVES = ("module", "prefix", "optimizer", "precision", "costfnc", "batch", "input", "output", "hidden")
KEYWORDS = ("sgd", "float", "double", "fixed") + COSTS + ACTIVATIONS
#: each pattern matched at the current position; the longest match wins, the first on a tie
_RULES = [
    ("directive", re.compile("|".join(re.escape("." + d) for d in DIRECTIVES))),
    ("word", re.compile("|".join(re.escape(k) for k in KEYWORDS))),
    ("punct", re.compile(r"[,;\[\]()+\-*/%]")),
    ("int", re.compile(r"-?[0-9]+")),
    *[("real", re.compile("-?" + form)) for form in (r"[0-9]+\.[0-9]*", r"\.[0-9]+", r"[0-9]+E[-+]?[0-9]+",
                                                     r"[0-9]+\.[0-9]*E[-+]?[0-9]+", r"\.[0-9]*E[-+]?[0-9]+")],
    ("space", re.compile(r"[ \t\r\n]")),
    ("comment", re.compile(r"//[^\n]*(?:\n|$)")),
]


def _string_end(text, start):
    """End of the longest string token at `start` (a quote), or None: the quote, then `\\x` pairs,
    doubled quotes or other characters but the newline, then the quote (Gravity's lexer rule,
    whose longest match a left-to-right regex does not always find)."""
    quote, best = text[start], None
    states = {"body"}   # body: inside; backslash: after a backslash; quote: after a quote
    for k in range(start + 1, len(text)):
        ch, nxt = text[k], set()
        if ch == "\n":
            break
        for state in states:
            if state == "backslash":
                nxt.add("body")
            elif state == "quote":
                if ch == quote:
                    nxt.add("body")
            elif ch == quote:
                best = k + 1
                nxt.add("quote")
            else:
                nxt.add("body")
                if ch == "\\":
                    nxt.add("backslash")
        states = nxt
        if not states:
            break
    return best


def _longest(text, offset):
    """(kind, end) of the longest token at `offset` (the first rule on a tie), or None."""
    best = None
    if text[offset] in "'\"":
        end = _string_end(text, offset)
        if end is not None:
            best = ("string", end)
    for kind, pattern in _RULES:
        m = pattern.match(text, offset)
        if m and m.end() > offset and (best is None or m.end() > best[1]):
            best = (kind, m.end())
    return best


_UNKNOWN_WORD = re.compile(r"\.?[A-Za-z_][A-Za-z_0-9]*")


def _unknown(text, offset):
    """Where no token starts, a run of letters (or a dot and letters) becomes an "unknown" token,
    which every parser rule refuses: the error then names the word (`hinge`, `.speed`) where
    Gravity's lexer would stop at its first character. What is accepted does not change."""
    m = _UNKNOWN_WORD.match(text, offset)
    return ("unknown", m.end()) if m else None


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
            match = _longest(text, offset) or _unknown(text, offset)
            if not match:
                self.fail_at(line, offset - start + 1, f"unexpected character {text[offset]!r}")
            kind, end = match
            if kind not in ("space", "comment"):
                self.tokens.append(Token(kind, text[offset:end], line, offset - start + 1))
            for k in range(offset, end):
                if text[k] == "\n":
                    line, start = line + 1, k + 1
            offset = end
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
    """The value of a string token: the text between its quotes, as Gravity takes it (escapes and
    doubled quotes stay as written, and are then no C identifier)."""
    return token.text[1:-1]


def identifier(reader, directive, empty_ok):
    """A quoted name that becomes C symbols and file names: a C identifier of at most
    MAX_NAME_LENGTH characters (nnbuild.names)."""
    token = reader.expect("string", what="a quoted name")
    value = string_value(reader, token)
    if len(value) > MAX_NAME_LENGTH:
        reader.fail(token, f".{directive} name of {len(value):,} characters: at most {MAX_NAME_LENGTH} "
                           "(the significant characters of a C identifier)")
    if not (empty_ok and value == "") and not is_c_identifier(value):
        reader.fail(token, f"{ascii(value)} is not a C identifier")
    return value


def parse(path, text):
    """The GravityModel a .g text declares; one line file:line:column on any error."""
    reader = Reader(path, text)
    seen, values, layers, output = {}, {}, [], None
    while reader.peek().kind != "eof":
        if reader.peek().kind == "punct" and reader.peek().text == ";":
            reader.next()   # an empty phrase
            continue
        if reader.peek().kind == "unknown" and reader.peek().text.startswith("."):
            reader.fail(reader.peek(), f"unknown directive '{reader.peek().text}'")
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
            try:
                values["rate"] = float(rate.text)
            except ValueError:   # `.E1`: a real token strtod does not read, as in Gravity
                reader.fail(rate, f"invalid numeric value '{rate.text}'")
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
