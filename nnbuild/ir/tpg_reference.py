"""Reference interpreter of Tangled Program Graphs, with GEGELATI's rules exactly (docs tpg.md 3).

1. Start at the root team.
2. Run every outgoing edge's program in file order, each on zeroed registers; the bid is register 0.
   An operand reads `raw location % address space` of its data source.
3. A NaN bid counts as -infinity; the running best is kept with `>=`, so on equal bids the last
   edge wins.
4. Follow the winning edge; repeat until an action: its id is the result.

The interpreter is vectorised over observations: each team runs its programs on the observations
that reached it, then splits them by winning edge (teams in topological order). Numbers are IEEE
double as in C: + - * / by numpy (exact), math functions element by element through Python's
`math` (the C library's libm) with C99 Annex F results where `math` would raise (log(0) = -inf,
log(-1) = NaN, exp overflow = inf, cos(inf) = NaN). A team with a single edge runs no program:
the result cannot depend on it.

Instruction semantics are the parsed C templates of the environment file (nnbuild.ir.tpg_template:
operands, double literals, + - * /, comparisons, `?:` and the C99 math functions of FUNCTIONS),
compiled once by `compile_semantics`; the generated C is emitted from the same trees, and nothing
else is ever evaluated.
"""

from __future__ import annotations

import math

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir import tpg_template

INF, NAN = float("inf"), float("nan")


def _c_log(v):
    if v > 0.0:
        return math.log(v)
    return -INF if v == 0.0 else NAN


def _c_log10(v):
    if v > 0.0:
        return math.log10(v)
    return -INF if v == 0.0 else NAN


def _c_exp(v):
    try:
        return math.exp(v)
    except OverflowError:
        return INF


def _c_periodic(fn):
    def f(v):
        return NAN if math.isinf(v) else fn(v)
    return f


def _c_domain(fn):
    """acos/asin/sqrt out of domain: NaN (C), not ValueError (Python)."""
    def f(v):
        try:
            return fn(v)
        except ValueError:
            return NAN
    return f


def _c_hyperbolic(fn):
    def f(v):
        try:
            return fn(v)
        except OverflowError:
            return math.copysign(INF, v) if fn is math.sinh else INF
    return f


def _c_pow(a, b):
    try:
        return math.pow(a, b)
    except OverflowError:
        return INF if a > 0 or float(b).is_integer() and int(b) % 2 == 0 else -INF
    except (ValueError, ZeroDivisionError):
        if a == 0.0 and b < 0:  # pole: +-inf with the sign of zero for odd integer b
            odd = float(b).is_integer() and int(b) % 2 == 1
            return math.copysign(INF, a) if odd else INF
        return NAN


def _elementwise(fn, nargs):
    ufunc = np.frompyfunc(fn, nargs, 1)

    def apply(*args):
        out = ufunc(*[np.asarray(a, dtype=np.float64) for a in args])
        return np.asarray(out, dtype=np.float64)
    return apply


#: name -> vectorised implementation with the C library's results
FUNCTIONS = {
    "cos": _elementwise(_c_periodic(math.cos), 1),
    "sin": _elementwise(_c_periodic(math.sin), 1),
    "tan": _elementwise(_c_periodic(math.tan), 1),
    "acos": _elementwise(_c_domain(math.acos), 1),
    "asin": _elementwise(_c_domain(math.asin), 1),
    "atan": _elementwise(math.atan, 1),
    "atan2": _elementwise(math.atan2, 2),
    "cosh": _elementwise(_c_hyperbolic(math.cosh), 1),
    "sinh": _elementwise(_c_hyperbolic(math.sinh), 1),
    "tanh": _elementwise(math.tanh, 1),
    "exp": _elementwise(_c_exp, 1),
    "log": _elementwise(_c_log, 1),
    "log10": _elementwise(_c_log10, 1),
    "pow": _elementwise(_c_pow, 2),
    "sqrt": lambda a: np.sqrt(np.asarray(a, dtype=np.float64)),  # correctly rounded, as C
    "fabs": lambda a: np.abs(np.asarray(a, dtype=np.float64)),
    "floor": lambda a: np.floor(np.asarray(a, dtype=np.float64)),
    "ceil": lambda a: np.ceil(np.asarray(a, dtype=np.float64)),
    "fmin": lambda a, b: np.fmin(np.asarray(a, dtype=np.float64), b),
    "fmax": lambda a, b: np.fmax(np.asarray(a, dtype=np.float64), b),
}
_ARITHMETIC = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}
#: comparisons give 0.0 or 1.0, the double of C's int result
_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}
assert set(FUNCTIONS) == set(tpg_template.FUNCTIONS), "the reference must implement every template function"


def compile_semantics(instruction):
    """A function (operand arrays...) -> float64 array computing the instruction's parsed template
    (the tree the generated C is emitted from), with C's double semantics."""
    def build(node):
        if isinstance(node, tpg_template.Number):
            value = node.value
            return lambda ops: value
        if isinstance(node, tpg_template.Operand):
            k = node.index - 1
            return lambda ops: ops[k]
        if isinstance(node, tpg_template.Unary):
            a = build(node.operand)
            if node.op == "+":
                return a
            return lambda ops: np.negative(np.asarray(a(ops), dtype=np.float64))
        if isinstance(node, tpg_template.Binary):
            a, b = build(node.left), build(node.right)
            if node.op in _COMPARE:
                fn = _COMPARE[node.op]
                return lambda ops: fn(a(ops), b(ops)).astype(np.float64)
            fn = _ARITHMETIC[node.op]
            return lambda ops: fn(a(ops), b(ops), dtype=np.float64)
        if isinstance(node, tpg_template.Conditional):
            c, a, b = build(node.test), build(node.then), build(node.orelse)
            # C takes a non-zero test (NaN included) as true
            return lambda ops: np.where(np.asarray(c(ops)) != 0, a(ops), b(ops))
        if isinstance(node, tpg_template.Call):
            fn, args = FUNCTIONS[node.function], [build(a) for a in node.args]
            return lambda ops: fn(*[a(ops) for a in args])
        raise NNBuildError(f"internal error: template node {type(node).__name__}")

    body = build(instruction.tree)

    def run(*operands):
        with np.errstate(all="ignore"):
            out = body(operands)
            return np.asarray(out, dtype=np.float64)
    return run


class Interpreter:
    """Runs one TPG on batches of observations (compiles each instruction once)."""

    def __init__(self, tpg):
        self.tpg = tpg
        env = tpg.environment
        self.env = env
        self.semantics = [compile_semantics(i) for i in env.instructions]
        self.sources = env.sources
        self.offsets = []
        offset = 0
        for s in env.inputs:
            self.offsets.append(offset)
            offset += s.size

    def program(self, prog, x):
        """Register 0 after running program `prog` on observations x [n, inputs] (float64 [n])."""
        n = len(x)
        regs = np.zeros((self.env.registers, n))
        instructions = self.env.instructions
        n_inputs_first = 1 + (1 if self.env.constants else 0)
        with np.errstate(all="ignore"):
            for line in prog.lines:
                ins = instructions[line.instruction]
                values = []
                for op, typ in zip(line.operands, ins.operand_types):
                    src = self.sources[op.source]
                    loc = op.location % src.address_space(typ)
                    if src.role == "registers":
                        values.append(regs[loc].copy())
                    elif src.role == "constants":
                        values.append(np.full(n, float(prog.constants[loc])))
                    else:
                        k = op.source - n_inputs_first
                        values.append(x[:, self.offsets[k] + loc])
                result = self.semantics[line.instruction](*values)
                regs[line.destination] = np.broadcast_to(result, (n,))
        return regs[0]

    def run(self, x, *, path=False):
        """Action ids (int64 [N]) for observations x [N, inputs]; with path=True also the list of
        team indices each observation visited."""
        tpg = self.tpg
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.env.input_size:
            raise NNBuildError(f"observations have shape {x.shape}, model '{tpg.name}' reads "
                               f"[N, {self.env.input_size}]")
        actions = np.full(len(x), -1, dtype=np.int64)
        at = {tpg.root: np.arange(len(x))}
        visits = [[] for _ in range(len(x))] if path else None
        for team in tpg.reachable():
            rows = at.pop(team, None)
            if rows is None or not len(rows):
                continue
            if path:
                for r in rows:
                    visits[r].append(team)
            edges = tpg.teams[team].edges
            if len(edges) == 1:
                winner = np.zeros(len(rows), dtype=np.int64)
            else:
                obs = x[rows]
                bids = np.stack([self.program(tpg.programs[tpg.edges[e].program], obs) for e in edges])
                bids[np.isnan(bids)] = -INF
                # last index of the maximum: ties go to the last edge
                winner = len(edges) - 1 - np.argmax(bids[::-1], axis=0)
            for k, e in enumerate(edges):
                chosen = rows[winner == k]
                if not len(chosen):
                    continue
                edge = tpg.edges[e]
                if edge.action is not None:
                    actions[chosen] = edge.action
                else:
                    at[edge.team] = np.concatenate([at[edge.team], chosen]) if edge.team in at else chosen
        return (actions, visits) if path else actions


def run(tpg, x):
    """Action ids (int64 [N]) of `tpg` for observations x [N, inputs] (or one observation -> int)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        return int(Interpreter(tpg).run(x[None, :])[0])
    return Interpreter(tpg).run(x)
