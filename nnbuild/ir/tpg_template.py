"""The expression language of TPG environment files: one grammar, parsed, checked and re-emitted.

An instruction's "c" value is a statement of this grammar (docs tpg.md, environment files):

    template       := "$0" "=" expression ";"
    expression     := comparison [ "?" expression ":" expression ]
    comparison     := additive [ ( "<" | "<=" | ">" | ">=" | "==" | "!=" ) additive ]
    additive       := multiplicative { ( "+" | "-" ) multiplicative }
    multiplicative := unary { ( "*" | "/" ) unary }
    unary          := ( "-" | "+" ) unary | primary
    primary        := "$" digits | number | function "(" expression { "," expression } ")"
                    | "(" expression ")"
    number         := decimal digits with an optional fraction and exponent (no suffix, no hex)
    function       := one of FUNCTIONS (C99 <math.h>, with its number of arguments)

Nothing else is a template: no other name, cast, comma operator, assignment, increment, string,
brace, comment or directive, so a template can compute a double and do nothing else. The parsed
tree is the only form nnbuild uses: the generated C is `to_c(tree)` (every literal a double
literal, parentheses where C needs them), never the file's text, and the reference interpreter
evaluates the same tree (nnbuild.ir.tpg_reference). The optional "python" value must denote the
same tree (`from_python`), so it documents the instruction and cannot disagree with the C.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Tuple, Union

from nnbuild.errors import NNBuildError

#: The functions a template may call: C99 <math.h> name -> number of arguments.
FUNCTIONS = {"cos": 1, "sin": 1, "tan": 1, "acos": 1, "asin": 1, "atan": 1, "atan2": 2,
             "cosh": 1, "sinh": 1, "tanh": 1, "exp": 1, "log": 1, "log10": 1, "sqrt": 1,
             "pow": 2, "fabs": 1, "floor": 1, "ceil": 1, "fmin": 2, "fmax": 2}
#: Comparison operators (C gives int 0 or 1, used as a double where arithmetic needs one).
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
#: Longest template text read (a template is one short expression).
MAX_TEMPLATE_CHARS = 1000
#: Deepest nesting of a tree (parentheses, unary operators, calls): bounds the recursion.
MAX_DEPTH = 50
#: Literals must be 0 or of a magnitude a binary32 holds as a normal number: avr-gcc's double is
#: 32 bits, and a constant it would flush to zero or overflow is a compile error under -Werror.
FLOAT32_MIN, FLOAT32_MAX = 2.0 ** -126, (2.0 - 2.0 ** -23) * 2.0 ** 127


@dataclass(frozen=True)
class Operand:
    index: int  # $1..$n


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "+"
    operand: "Node"


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / or a comparison
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Conditional:
    test: "Node"
    then: "Node"
    orelse: "Node"


@dataclass(frozen=True)
class Call:
    function: str
    args: Tuple["Node", ...]


Node = Union[Operand, Number, Unary, Binary, Conditional, Call]


class TemplateError(ValueError):
    """Why a template is not one of the grammar (the caller names the file and the instruction)."""


# ----------------------------------------------------------------------------- parsing C

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<operand>\$\d{1,4}(?![\w$]))
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.$]))
  | (?P<name>[A-Za-z_]\w*)
  | (?P<punct><=|>=|==|!=|[-+*/<>?:(),=;])
""", re.X)
#: C tokens the grammar has no place for, with why (the rest are just "not allowed")
_REFUSED = {"++": "increments", "--": "decrements", "+=": "assigns", "-=": "assigns", "*=": "assigns",
            "/=": "assigns", "%": "takes a remainder", "&&": "uses a logical operator",
            "||": "uses a logical operator", "!": "uses a logical operator", "{": "opens a brace",
            "}": "closes a brace", "#": "holds a directive", "/*": "holds a comment",
            "//": "holds a comment", "*/": "closes a comment", '"': "holds a string literal", "'": "holds a character literal",
            "[": "indexes an array", "->": "follows a pointer", "&": "uses a bitwise operator",
            "|": "uses a bitwise operator", "^": "uses a bitwise operator", "~": "uses a bitwise operator",
            "<<": "shifts", ">>": "shifts", "\\": "holds a backslash"}
_REFUSED_LONGEST_FIRST = sorted(_REFUSED, key=len, reverse=True)


def _tokens(text):
    """[(kind, text)] of a template, or TemplateError at the first character outside the grammar."""
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"is {len(text)} characters long (at most {MAX_TEMPLATE_CHARS})")
    out, pos = [], 0
    while pos < len(text):
        for bad in () if text.startswith(("<=", ">=", "==", "!="), pos) else _REFUSED_LONGEST_FIRST:
            if text.startswith(bad, pos):
                raise TemplateError(f"{_REFUSED[bad]} ('{bad}' at character {pos + 1}): a template "
                                    "computes one value from its operands")
        m = _TOKEN.match(text, pos)
        if m is None:
            raise TemplateError(f"has {_shown(text[pos:pos + 12])} at character {pos + 1}, which the "
                                "template grammar does not allow")
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group(), pos))
        pos = m.end()
    return out


def _shown(fragment):
    return repr(fragment) if fragment.isprintable() else ascii(fragment)


class _Parser:
    """Recursive descent over the tokens of one template (depth bounded by MAX_DEPTH)."""

    def __init__(self, text, arity):
        self.tokens = _tokens(text)
        self.pos = 0
        self.arity = arity
        self.depth = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "", None)

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expect(self, text, what):
        kind, got, at = self.take()
        if got != text:
            raise TemplateError(f"expects {what}, found {self._found(kind, got, at)}")

    @staticmethod
    def _found(kind, got, at):
        if got == "=":
            raise TemplateError(f"assigns ('=' at character {at + 1}): a template is one statement "
                                "'$0 = <expression>;' computing one value")
        return "the end" if kind == "end" else f"'{got[:20]}' at character {at + 1}"

    def statement(self):
        kind, got, at = self.take()
        if got != "$0":
            raise TemplateError("is not of the form '$0 = <expression>;'")
        self.expect("=", "'=' after '$0' (a template is '$0 = <expression>;')")
        tree = self.expression()
        self.expect(";", "';' to end the expression (one expression, no comma operator)")
        kind, got, at = self.peek()
        if kind != "end":
            raise TemplateError(f"goes on after its ';' ({self._found(kind, got, at)}): a template is one "
                                "statement '$0 = <expression>;'")
        return tree

    def nested(self, parse):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TemplateError(f"nests deeper than {MAX_DEPTH} levels")
        try:
            return parse()
        finally:
            self.depth -= 1

    def expression(self):
        test = self.comparison()
        if self.peek()[1] != "?":
            return test
        self.take()
        then = self.nested(self.expression)
        self.expect(":", "':' of the conditional '?:'")
        return Conditional(test, then, self.nested(self.expression))

    def comparison(self):
        left = self.additive()
        if self.peek()[1] in COMPARISONS:
            op = self.take()[1]
            left = Binary(op, left, self.additive())
            if self.peek()[1] in COMPARISONS:
                raise TemplateError("chains comparisons (write the parentheses: C and Python read "
                                    "'a < b < c' differently)")
        return left

    def additive(self):
        left = self.multiplicative()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            left = Binary(op, left, self.multiplicative())
        return left

    def multiplicative(self):
        left = self.unary()
        while self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            left = Binary(op, left, self.unary())
        return left

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            op = self.take()[1]
            return Unary(op, self.nested(self.unary))
        return self.primary()

    def primary(self):
        kind, got, at = self.take()
        if kind == "operand":
            index = int(got[1:])
            if not 1 <= index <= self.arity:
                raise TemplateError(f"uses {got} but the instruction has {self.arity} operand(s) "
                                    f"($1..${self.arity})")
            return Operand(index)
        if kind == "number":
            return Number(literal(got))
        if got == "(":
            inner = self.nested(self.expression)
            self.expect(")", "')'")
            return inner
        if kind == "name":
            return self.call(got, at)
        raise TemplateError(f"expects an operand, a number, a function call or '(', found "
                            f"{self._found(kind, got, at)}")

    def call(self, name, at):
        if name not in FUNCTIONS:
            raise TemplateError(f"names '{name[:40]}' (character {at + 1}), which is not an allowed function "
                                f"({', '.join(sorted(FUNCTIONS))}); operands are $1..$n")
        self.expect("(", f"'(' after the function {name}")
        args = [self.nested(self.expression)]
        while self.peek()[1] == ",":
            self.take()
            args.append(self.nested(self.expression))
        self.expect(")", f"')' closing the call of {name}")
        if len(args) != FUNCTIONS[name]:
            raise TemplateError(f"calls {name} with {len(args)} argument(s), it takes {FUNCTIONS[name]}")
        return Call(name, tuple(args))


def literal(text) -> float:
    """The double of a numeric literal, refused if no binary32 holds it as 0 or a normal number."""
    value = float(text)
    if not math.isfinite(value) or value > FLOAT32_MAX:
        raise TemplateError(f"has the number {text[:20]}, which is not a finite double of at most "
                            f"{FLOAT32_MAX:.7g} (the largest 32-bit float: AVR's double)")
    if 0.0 < value < FLOAT32_MIN:
        raise TemplateError(f"has the number {text[:20]}, smaller than the smallest normal 32-bit float "
                            f"{FLOAT32_MIN:.7g} (AVR's double would flush it to zero)")
    return value


def parse(text: str, arity: int) -> Node:
    """The tree of a C template `$0 = <expression>;` over operands $1..$arity (TemplateError if it
    is not one of the grammar)."""
    return _Parser(text, arity).statement()


# ----------------------------------------------------------------------------- the python form

_PY_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_PY_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def from_python(text: str, arity: int) -> Node:
    """The tree of a "python" value (the same language in Python's spelling: `a if c else b`)."""
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"is {len(text)} characters long (at most {MAX_TEMPLATE_CHARS})")
    source = re.sub(r"\$(\d{1,4})", r"_op\1", text)
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        raise TemplateError(exc.msg) from None
    except ValueError as exc:  # a NUL
        raise TemplateError(" ".join(str(exc).split())) from None

    def build(node, depth=0):
        if depth > MAX_DEPTH:
            raise TemplateError(f"nests deeper than {MAX_DEPTH} levels")
        down = depth + 1
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Number(literal(repr(node.value)))
        if isinstance(node, ast.Name) and re.fullmatch(r"_op\d+", node.id):
            index = int(node.id[3:])
            if not 1 <= index <= arity:
                raise TemplateError(f"uses ${index} but the instruction has {arity} operand(s) ($1..${arity})")
            return Operand(index)
        if isinstance(node, ast.BinOp) and type(node.op) in _PY_BINARY:
            return Binary(_PY_BINARY[type(node.op)], build(node.left, down), build(node.right, down))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return Unary("-" if isinstance(node.op, ast.USub) else "+", build(node.operand, down))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _PY_COMPARE:
            return Binary(_PY_COMPARE[type(node.ops[0])], build(node.left, down),
                          build(node.comparators[0], down))
        if isinstance(node, ast.IfExp):
            return Conditional(build(node.test, down), build(node.body, down), build(node.orelse, down))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                and not node.keywords and len(node.args) == FUNCTIONS[node.func.id]):
            return Call(node.func.id, tuple(build(a, down) for a in node.args))
        what = ast.dump(node)[:60]
        raise TemplateError(f"unsupported expression {what} (allowed: + - * /, comparisons, "
                            f"'a if c else b', {', '.join(sorted(FUNCTIONS))})")

    return build(tree)


# ----------------------------------------------------------------------------- emitting C

#: binding strength of each operator in C (higher binds tighter)
_PRECEDENCE = {"?": 1, "<": 2, "<=": 2, ">": 2, ">=": 2, "==": 2, "!=": 2, "+": 3, "-": 3, "*": 4, "/": 4}


def to_c(tree: Node, operand=lambda k: f"${k}") -> str:
    """C99 text of a tree; `operand(k)` gives the C text of $k (an identifier, an array element or
    a parenthesised literal). Operands of comparisons and conditionals that are not atoms get
    parentheses (no -Wparentheses warning, no C/Python reading difference), literals are double
    literals (so `1 / 2` is 0.5 in C as in the reference)."""
    def emit(node, need=0, right=False):
        if isinstance(node, Operand):
            return operand(node.index)
        if isinstance(node, Number):
            return double_literal(node.value)
        if isinstance(node, Call):
            return f"{node.function}({', '.join(emit(a) for a in node.args)})"
        if isinstance(node, Unary):
            inner = emit(node.operand, 5)
            return f"{node.op}({inner})" if isinstance(node.operand, Unary) else f"{node.op}{inner}"
        if isinstance(node, Conditional):
            text = f"{emit(node.test, 3)} ? {emit(node.then, 3)} : {emit(node.orelse, 3)}"
            return f"({text})" if need else text
        level = _PRECEDENCE[node.op]
        if node.op in COMPARISONS:
            text = f"{emit(node.left, 3)} {node.op} {emit(node.right, 3)}"
        else:
            text = f"{emit(node.left, level)} {node.op} {emit(node.right, level, right=True)}"
        return f"({text})" if level < need or (right and level == need) or level == 2 and need else text

    return emit(tree)


def double_literal(value: float) -> str:
    """The shortest C double literal that reads back as `value` (finite, non-negative)."""
    text = repr(float(value))
    return text if re.search(r"[.e]", text) else text + ".0"


def calls(tree: Node) -> bool:
    """True when the tree calls a <math.h> function."""
    if isinstance(tree, Call):
        return True
    return any(calls(child) for child in children(tree))


def children(tree: Node):
    if isinstance(tree, Unary):
        return (tree.operand,)
    if isinstance(tree, Binary):
        return (tree.left, tree.right)
    if isinstance(tree, Conditional):
        return (tree.test, tree.then, tree.orelse)
    if isinstance(tree, Call):
        return tree.args
    return ()


def operands(tree: Node) -> set:
    """The operand indices a tree reads."""
    if isinstance(tree, Operand):
        return {tree.index}
    out = set()
    for child in children(tree):
        out |= operands(child)
    return out


def check(name, c_text, python_text, arity):
    """The tree of an instruction: its C template parsed, and its python form, if given, the same
    tree. NNBuildError (without a path: the caller names the file) otherwise."""
    try:
        tree = parse(c_text, arity)
    except TemplateError as exc:
        raise NNBuildError(f"instruction '{_name(name)}': C template {_short(c_text)} {exc}") from None
    if python_text is None:
        return tree
    try:
        py_tree = from_python(python_text, arity)
    except TemplateError as exc:
        raise NNBuildError(f"instruction '{_name(name)}': python semantics {_short(python_text)}: {exc}") from None
    if py_tree != tree:
        raise NNBuildError(f"instruction '{_name(name)}': python semantics {_short(python_text)} is not the "
                           f"C template's expression ({to_c(tree)}); nnbuild computes the C template's "
                           "tree in both (the \"python\" key may be left out)")
    return tree


def _name(name):
    text = str(name)
    return text[:40] if text.isprintable() else ascii(text[:40])


def _short(text):
    return _shown(text if len(text) <= 80 else text[:77] + "...")
