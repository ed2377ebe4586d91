"""Lowering of a Tangled Program Graph to C expressions, shared by the tpg_switch and tpg_stack shapes.

What makes the generated code cheaper than GEGELATI's while computing the same doubles:
* A team with a single outgoing edge runs no program (its result cannot change the action).
* Programs become expression DAGs: registers are SSA values (a register read before any write is
  the literal 0.0, as GEGELATI zeroes them), lines that do not reach register 0 (introns) vanish,
  and identical computations (same instruction on the same operands, e.g. two programs computing
  `cos(screen[746])`, or two copies of one program) are computed once per team.
* With `share=True` (switch shape), a value computed in a team is reused by every team it
  dominates (every path to them passes through it), instead of being computed again.
Every operation keeps its C semantics exactly (no reassociation, no folding by us): each node is
one instruction of the source program, rendered from the environment's C template, so with
FLT_EVAL_METHOD 0 the C result is bit-identical to the reference interpreter's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from nnbuild.codegen.common import FLASH_STORAGES, NEAR_STORAGE
from nnbuild.errors import NNBuildError
from nnbuild.numerics.float_facts import TPG_COS_TAGS, TPG_INT_LIMIT, TPG_INT_TAGS

_PLACEHOLDER = re.compile(r"\$(\d+)")
#: switch shape: above this many operations, team bodies become functions of their own
SWITCH_INLINE_OPERATIONS = 2000


@dataclass
class Node:
    """One value: a literal, an input element, or an instruction applied to other nodes."""

    id: int
    kind: str  # "literal", "input", "op"
    text: str  # C text of a literal/input reference, or the C expression of an op over $1..$n
    instruction: Optional[int] = None
    args: Tuple[int, ...] = ()
    libm: bool = False
    origin: str = ""  # "P5 line 2" of the first line that produced it
    chain: Tuple[int, ...] = ()  # tabled instructions applied in turn to `base`, outermost first

    @property
    def var(self) -> str:
        return f"v{self.id}"


@dataclass
class Table:
    """A one-operand <math.h> instruction tabulated on the integers lo..hi (environment
    "integer_tables"): the helper returns the table entry for an integer argument in range, and
    calls libm otherwise. The entries are the reference interpreter's doubles (the build
    machine's libm), so the generated code returns what the reference computes."""

    instruction: int
    helper: str  # C function name
    symbol: str  # C table name
    call: str  # the instruction's C expression with the operand named x
    lo: int
    hi: int
    values: List[str]  # C literals, lo first
    values32: List[str]  # the same rounded to binary32, for targets whose double is 32-bit (AVR)
    #: (C condition on x under which libm is called, C expression of the result otherwise) or None
    domain: Optional[Tuple[str, str]] = None

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass
class Chain:
    """Tabled one-operand instructions applied in turn to one value y (`cos(exp(y))`), tabled
    whole on the integers lo..hi: the helper returns the entry for an integer y in range, and
    otherwise the outer instruction's helper of the inner value, which the code computes anyway.
    The entries compose the reference's doubles, so they are what the code computes step by step.
    Hosts only: where double is binary32 (AVR) each step rounds to float, and libm's float results
    are not the reference's, so there the code goes step by step."""

    instructions: Tuple[int, ...]  # outermost first
    helper: str
    symbol: str
    outer: str  # helper of the outermost instruction's table
    call: str  # the composition with the operand named y, e.g. cos(exp(y))
    lo: int
    hi: int
    values: List[str]

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


#: longest composition tabled (each one a table of its own)
CHAIN_DEPTH = 3


@dataclass
class EdgePlan:
    index: int  # edge index in the TPG
    program: str  # "P5"
    bid: Optional[int]  # node id of the bid (None for a single-edge team)
    dest_team: Optional[int]  # team state (position in `order`) or
    action: Optional[int]  # action id
    file_line: int

    @property
    def dest_label(self) -> str:
        return f"A{self.action}" if self.action is not None else f"S{self.dest_team}"


@dataclass
class TeamPlan:
    state: int  # position in the topological order (the switch state)
    team: int  # team index in the TPG
    label: str  # "T3"
    edges: List[EdgePlan]
    compute: List[int] = field(default_factory=list)  # nodes this team computes, in order
    reused: List[int] = field(default_factory=list)  # nodes it reads from dominating teams
    keep: List[int] = field(default_factory=list)  # computed nodes dominated teams read later
    #: memoised <math.h> values this team computes: node -> ("check" and/or "set" the node's
    #: computed-flag), and the team's nodes only they read (computed inside their `if`)
    memo: Dict[int, Tuple[str, ...]] = field(default_factory=dict)
    blocks: Dict[int, List[int]] = field(default_factory=dict)
    members: set = field(default_factory=set)
    #: exp(u +- cos(u)) under one test of |u| (Guard), keyed by the cos node; `guarded`: the sum and
    #: exp nodes the guard computes (not emitted on their own)
    guards: Dict[int, "Guard"] = field(default_factory=dict)
    guarded: set = field(default_factory=set)


@dataclass
class Plan:
    name: str
    nodes: List[Node]
    teams: List[TeamPlan]  # topological order, root first
    shared: List[int]  # nodes stored in function-scope variables (switch shape)
    depth: int
    inputs: list  # DataSource of each argument
    stats: dict
    tables: List[Table] = field(default_factory=list)
    flags: List[int] = field(default_factory=list)  # memoised nodes with a computed-flag
    chains: List["Chain"] = field(default_factory=list)  # tables of compositions (hosts only)
    #: inner values of compositions nothing else reads: written into the composition's expression
    #: (evaluated only when its argument is off the table), not computed beforehand
    inlined: set = field(default_factory=set)
    #: tables whose helper has a `_small` variant (arguments |x| < GUARD_LIMIT, see Guard)
    small: List[Table] = field(default_factory=list)
    #: helpers of `small` tables whose in-range arguments go to the `_small` variant (_routes_small)
    routed: set = field(default_factory=set)


#: |u| bound of a Guard's test: below it avr-libc's cos reduces its argument in at most 10 passes
#: (biased exponent <= 136, the value fact COS_SMALL_TAG); at or above it u +- cos(u) is outside
#: exp's domain (|u +- c| >= 1023 > 745.14)
GUARD_LIMIT = 1024.0
COS_SMALL_TAG = TPG_COS_TAGS[0]


@dataclass
class Guard:
    """exp(u + cos(u)) (or u - cos(u), cos(u) - u, ...) of one team, computed under one test of
    |u| < GUARD_LIMIT: below it, cos goes through its helper's `_small` variant, whose libm call
    carries a value fact (few range-reduction passes); at or above it, the sum is outside exp's
    domain and the exp helper's own out-of-domain expression gives its value without a call. The
    values are the helpers' very results; the point is the code's shape: the WCET analysis sees
    that a slow cos (huge u) and a slow exp exclude each other."""

    u: int
    cos: int
    sum: int
    exp: int
    cos_table: "Table"
    exp_table: "Table"


def _literal(value) -> str:
    if isinstance(value, int):
        text = f"{value}.0"
    else:
        if value != value or value in (float("inf"), float("-inf")):
            raise NNBuildError(f"program constant {value} has no C literal")
        text = repr(float(value))
        if not re.search(r"[.eE]", text):
            text += ".0"
    return f"({text})" if text.startswith("-") else text


def _c_double(value) -> str:
    """An exact C literal of a double (shortest round-trip decimal), or a <math.h> macro."""
    if value != value:
        return "((double)NAN)"
    if value in (float("inf"), float("-inf")):
        return "((double)INFINITY)" if value > 0 else "(-(double)INFINITY)"
    text = repr(float(value))
    if not re.search(r"[.eEn]", text):
        text += ".0"
    return text


#: Per <math.h> function: the arguments libm is called for (a C condition on x), and the exact
#: result for every other x (a C expression), as C99 Annex F prescribes and glibc returns bit for bit
#: (the NaN an operation on x gives, not a fixed NaN), with the reference's values at the sample
#: arguments checked at generation. The helpers answer those without the call: NaN and infinities
#: reach cos/exp/log often (log of a negative difference, then cos of that NaN), and glibc's
#: overflow, underflow and domain errors also set errno, slowly. exp's bounds are the largest double
#: with a finite exp and the smallest with a non-zero one (any faithful libm: the next doubles are
#: 1e-13 away in relative terms).
DOMAINS = {
    "cos": ("fabs(x) <= DBL_MAX", "x - x"),  # NaN -> that NaN; +-inf -> the default NaN (glibc: x / x)
    "sin": ("fabs(x) <= DBL_MAX", "x - x"),
    "exp": ("x >= -745.1332191019411 && x <= 709.782712893384",
            "(x < 0.0) ? 0.0 : x * (double)INFINITY"),  # glibc: 0, inf (errno), 1.0 + x for NaN
    "log": ("x > 0.0 && x <= DBL_MAX",
            "(x > 0.0) ? x : (x == 0.0) ? -(double)INFINITY : (x - x) / (x - x)"),  # glibc's very formulas
}
#: arguments outside each domain and the results DOMAINS gives them, for the generation-time check
_NAN, _INF = float("nan"), float("inf")
_OUTSIDE = {
    "cos": [(_NAN, _NAN), (_INF, _NAN), (-_INF, _NAN)],
    "sin": [(_NAN, _NAN), (_INF, _NAN), (-_INF, _NAN)],
    "exp": [(_NAN, _NAN), (_INF, _INF), (-_INF, 0.0), (709.7827128933841, _INF), (1e300, _INF),
            (-745.1332191019412, 0.0), (-1e300, 0.0)],
    "log": [(_NAN, _NAN), (_INF, _INF), (-_INF, _NAN), (0.0, -_INF), (-0.0, -_INF), (-1.5, _NAN),
            (-1e300, _NAN)],
}


def domain_of(instruction, semantics):
    """(condition, expression) of DOMAINS for a one-operand call of `instruction` when the reference
    semantics give the same values (NaN-ness, value, sign) at the sample arguments; else None (the
    helper calls libm for every argument off its table)."""
    import numpy as np

    from nnbuild.ir import tpg_template
    tree = instruction.tree
    if not (isinstance(tree, tpg_template.Call) and tree.function in DOMAINS and len(tree.args) == 1
            and isinstance(tree.args[0], tpg_template.Operand)):
        return None
    x, expected = zip(*_OUTSIDE[tree.function])
    got = semantics(np.array(x))
    same = all((np.isnan(g) and np.isnan(e)) or (g == e and np.signbit(g) == np.signbit(e))
               for g, e in zip(got, expected))
    return DOMAINS[tree.function] if same else None


def integer_tables(tpg, prefix):
    """Table of every one-operand <math.h> instruction of the environment, when it asks for them."""
    import numpy as np

    from nnbuild.names import c_identifier
    from nnbuild.ir import tpg_reference
    env = tpg.environment
    if not env.integer_tables:
        return {}
    lo, hi = env.integer_tables
    out = {}
    for k, ins in enumerate(env.instructions):
        if ins.arity != 1 or ins.operand_types[0] != "double" or not ins.libm:
            continue
        f = tpg_reference.compile_semantics(ins)
        zeros = f(np.array([0.0, -0.0]))
        if zeros[0].tobytes() != zeros[1].tobytes() and not np.all(np.isnan(zeros)):
            continue  # f(-0.0) != f(+0.0): (int)x cannot tell them apart
        values = f(np.arange(lo, hi + 1, dtype=np.float64))
        cname = c_identifier(ins.name)
        with np.errstate(over="ignore", under="ignore"):
            values32 = values.astype(np.float32)
        out[k] = Table(k, f"{prefix}_{cname}_int", f"{prefix}_{cname}_table",
                       _PLACEHOLDER.sub("x", ins.c_expression), lo, hi,
                       [_c_double(float(v)) for v in values], [_c_double(float(v)) for v in values32],
                       domain_of(ins, f))
    return out


class _Builder:
    def __init__(self, tpg, tables=None, prefix="tpg"):
        self.tpg = tpg
        self.prefix = prefix
        self.env = tpg.environment
        self.tables = tables or {}
        self.chains: Dict[tuple, Chain] = {}
        self.nodes: List[Node] = []
        self.table: Dict[tuple, int] = {}
        self.zero = self._node(("literal", "0.0"), "literal", "0.0")
        self.inputs = list(self.env.inputs)
        self.first_input = 1 + (1 if self.env.constants else 0)

    def _node(self, key, kind, text, **kw):
        if key not in self.table:
            self.table[key] = len(self.nodes)
            self.nodes.append(Node(len(self.nodes), kind, text, **kw))
        return self.table[key]

    def program(self, prog) -> int:
        """The node of register 0 after `prog` (SSA over the registers, zero-initialised)."""
        env, sources = self.env, self.env.sources
        regs = [self.zero] * env.registers
        for n, line in enumerate(prog.lines, start=1):
            ins = env.instructions[line.instruction]
            args = []
            for op, typ in zip(line.operands, ins.operand_types):
                src = sources[op.source]
                loc = op.location % src.address_space(typ)
                if src.role == "registers":
                    args.append(regs[loc])
                elif src.role == "constants":
                    text = _literal(prog.constants[loc])
                    args.append(self._node(("literal", text), "literal", text))
                else:
                    name = self.inputs[op.source - self.first_input].name
                    args.append(self._node(("input", name, loc), "input", f"{name}[{loc}]"))
            key = ("op", line.instruction) + tuple(args)
            if key not in self.table:
                chain, base = self._chain(line.instruction, args)
                if chain:
                    expr, args = f"{self.chain_table(chain).helper}($2, $1)", args[:1] + [base]
                elif line.instruction in self.tables:
                    expr = f"{self.tables[line.instruction].helper}($1)"
                else:
                    expr = ins.c_expression
                self._node(key, "op", expr, instruction=line.instruction, args=tuple(args),
                           libm=ins.libm, origin=f"{prog.label} line {n}", chain=chain)
            regs[line.destination] = self.table[key]
        return regs[0]

    def _chain(self, instruction, args):
        """(instructions, base node) when tabled `instruction` applies to the result of another
        tabled one-operand instruction (a composition worth a table of its own), else ((), None)."""
        if instruction not in self.tables or len(args) != 1:
            return (), None
        inner = self.nodes[args[0]]
        if inner.kind != "op" or inner.instruction not in self.tables:
            return (), None
        below = inner.chain or (inner.instruction,)
        base = inner.args[-1] if inner.chain else inner.args[0]
        if len(below) >= CHAIN_DEPTH:
            return (), None
        return (instruction,) + below, base

    def chain_table(self, chain) -> "Chain":
        if chain not in self.chains:
            import numpy as np

            from nnbuild.ir import tpg_reference
            outer = self.tables[chain[0]]
            lo, hi = outer.lo, outer.hi
            values = np.arange(lo, hi + 1, dtype=np.float64)
            call = "y"
            for k in reversed(chain):
                values = tpg_reference.compile_semantics(self.env.instructions[k])(values)
                call = _PLACEHOLDER.sub(call, self.env.instructions[k].c_expression)
            names = "_".join(self.tables[k].helper[len(self.prefix) + 1:-len("_int")] for k in chain)
            self.chains[chain] = Chain(chain, f"{self.prefix}_{names}_int", f"{self.prefix}_{names}_table",
                                       outer.helper, call, lo, hi, [_c_double(float(v)) for v in values])
        return self.chains[chain]

    def closure(self, roots, available=frozenset()):
        """Op nodes needed for `roots`, not in `available`, in creation (= dependency) order."""
        out, work = set(), [r for r in roots if r is not None]
        while work:
            n = work.pop()
            node = self.nodes[n]
            if node.kind != "op" or n in out or n in available:
                continue
            out.add(n)
            work.extend(node.args)
        return sorted(out)


def dominators(tpg, order):
    """Immediate dominator (team index) of every reachable team but the root (Cooper et al.)."""
    pos = {t: k for k, t in enumerate(order)}
    preds = {t: [] for t in order}
    for t in order:
        for e in tpg.teams[t].edges:
            d = tpg.edges[e].team
            if d is not None:
                preds[d].append(t)
    idom = {order[0]: order[0]}

    def intersect(a, b):
        while a != b:
            while pos[a] > pos[b]:
                a = idom[a]
            while pos[b] > pos[a]:
                b = idom[b]
        return a

    for t in order[1:]:  # topological order: every predecessor is done (acyclic graph)
        ps = preds[t]
        new = ps[0]
        for p in ps[1:]:
            new = intersect(p, new)
        idom[t] = new
    return idom


def lower(tpg, name, *, share=False, tables=True) -> Plan:
    """The plan of the generated code: per team (topological order) the nodes to compute and the
    edges with their bid node and destination."""
    all_tables = integer_tables(tpg, name) if tables else {}
    b = _Builder(tpg, all_tables, name)
    order = tpg.reachable()
    state = {t: k for k, t in enumerate(order)}
    bids = {}
    teams = []
    for t in order:
        edges = []
        multi = len(tpg.teams[t].edges) > 1
        for e in tpg.teams[t].edges:
            edge = tpg.edges[e]
            prog = tpg.programs[edge.program]
            if multi and edge.program not in bids:
                bids[edge.program] = b.program(prog)
            edges.append(EdgePlan(e, prog.label, bids[edge.program] if multi else None,
                                  state.get(edge.team), edge.action, edge.file_line))
        teams.append(TeamPlan(state[t], t, tpg.teams[t].label, edges))

    idom = dominators(tpg, order) if share else {}
    available = {}  # team -> nodes computed by its strict dominators
    computed = {}
    readers = {}  # node -> teams that read it from a dominator
    for plan in teams:
        t = plan.team
        avail = set()
        if share and t != order[0]:
            d = idom[t]
            avail = available[d] | set(computed[d])
        available[t] = avail
        roots = [e.bid for e in plan.edges]
        need_all = b.closure(roots)
        plan.compute = b.closure(roots, frozenset(avail))
        computed[t] = plan.compute
        plan.reused = sorted(set(need_all) - set(plan.compute))
        # nodes read from dominators: only those referenced by this team's own computations or bids
        direct = set()
        for n in plan.compute:
            direct.update(a for a in b.nodes[n].args if a in avail)
        direct.update(r for r in roots if r is not None and r in avail)
        plan.reused = sorted(direct)
        for n in direct:
            readers.setdefault(n, set()).add(t)
    memo = _memoised(tpg, teams, b) if share else {}
    shared = sorted(set(readers) | set(memo))
    shared_set = set(shared)
    for plan in teams:
        plan.keep = [n for n in plan.compute if n in shared_set]
        _memo_blocks(plan, memo, b, set(readers))
    visits = _static_stats(tpg, teams, b)
    used = {b.nodes[n].instruction for p in teams for n in p.compute}
    flags = sorted(n for n in memo if any(n in p.memo and p.memo[n] for p in teams))
    chains = sorted({b.nodes[n].chain for p in teams for n in p.compute if b.nodes[n].chain})
    inlined = _chain_inner_only(teams, b, shared_set)
    for plan in teams:
        plan.compute = [n for n in plan.compute if n not in inlined]
        plan.blocks = {m: [n for n in ns if n not in inlined] for m, ns in plan.blocks.items()}
        plan.members -= inlined
        _find_guards(plan, b, shared_set | inlined)
    tabled = [t for k, t in sorted(all_tables.items()) if k in used]
    small = {id(g.cos_table): g.cos_table for p in teams for g in p.guards.values()}
    small.update((id(t), t) for t in tabled if _routes_small(b, t))
    return Plan(name, b.nodes, teams, shared, tpg.depth(), list(tpg.environment.inputs), visits,
                tabled, flags,
                [b.chains[ch] for ch in chains], inlined,
                sorted(small.values(), key=lambda t: t.instruction),
                {t.helper for t in tabled if _routes_small(b, t)})


def _routes_small(b, table):
    """Whether a cos table's helper sends its in-range arguments that are not integers to its
    `_small` variant: every table argument is below GUARD_LIMIT in magnitude, so that libm call gets
    the variant's value fact, and the helper's own libm call keeps only the arguments off the table
    (the WCET analysis then never charges the integer test and the slowest cos on one path)."""
    from nnbuild.ir import tpg_template
    tree = b.env.instructions[table.instruction].tree
    return (isinstance(tree, tpg_template.Call) and tree.function == "cos"
            and max(-table.lo, table.hi) < GUARD_LIMIT)


def _table_function(b, node):
    """The <math.h> function name of a plain (not composed) table helper call, else None."""
    from nnbuild.ir import tpg_template
    if node.kind != "op" or node.chain or node.instruction not in b.tables:
        return None
    tree = b.env.instructions[node.instruction].tree
    return tree.function if isinstance(tree, tpg_template.Call) else None


def _is_sum(b, node):
    """Whether an op node is $1 + $2 or $1 - $2 of two distinct values."""
    from nnbuild.ir import tpg_template
    if node.kind != "op" or len(node.args) != 2 or node.args[0] == node.args[1]:
        return False
    tree = b.env.instructions[node.instruction].tree
    return (isinstance(tree, tpg_template.Binary) and tree.op in "+-" and
            {tree.left, tree.right} == {tpg_template.Operand(1), tpg_template.Operand(2)})


def _find_guards(plan, b, excluded):
    """Guards of one team: an exp table helper (with its domain shortcut) of s = u +- cos(u),
    cos a table helper, all three plain locals of this team (not shared, memoised or inlined)."""
    mine = set(plan.compute) - plan.members - set(plan.memo) - set(plan.blocks) - excluded
    lo, hi = (float(v) for v in re.findall(r"-?[0-9.]+", DOMAINS["exp"][0]))
    assert -lo < GUARD_LIMIT - 1 and hi < GUARD_LIMIT - 1  # |u +- cos(u)| >= 1023 is outside the domain
    for e in plan.compute:
        node = b.nodes[e]
        if e not in mine or _table_function(b, node) != "exp" or b.tables[node.instruction].domain is None:
            continue
        s = node.args[0]
        if s not in mine or s in plan.guarded or not _is_sum(b, b.nodes[s]):
            continue
        for c in b.nodes[s].args:
            cos = b.nodes[c]
            other = [a for a in b.nodes[s].args if a != c]
            if (c in mine and c not in plan.guards and _table_function(b, cos) == "cos"
                    and cos.args[0] == other[0]):
                plan.guards[c] = Guard(other[0], c, s, e, b.tables[cos.instruction], b.tables[node.instruction])
                plan.guarded |= {s, e}
                break


def _chain_inner_only(teams, b, shared_set):
    """Inner values of compositions that, in every team computing them, only that composition
    reads (no bid, no other operation, not shared across teams, not memoised)."""
    ok, seen = {}, set()
    for p in teams:
        bids = {e.bid for e in p.edges}
        users = {}
        for n in p.compute:
            for a in b.nodes[n].args:
                users.setdefault(a, []).append(n)
        for n in p.compute:
            seen.add(n)
            readers = users.get(n, [])
            only = (n not in bids and n not in shared_set and n not in p.memo and len(readers) == 1
                    and b.nodes[readers[0]].chain and b.nodes[readers[0]].args[0] == n
                    and b.nodes[readers[0]].args.count(n) == 1)
            ok[n] = ok.get(n, True) and bool(only)
    return {n for n in seen if ok.get(n)}


def _memoised(tpg, teams, b):
    """<math.h> values computed by two teams one inference can both visit, neither dominating the
    other (dominated teams already reuse the dominator's value): {node: teams computing it}. Each
    is computed once per inference, behind a computed-flag; a libm call costs far more than the
    flag's test."""
    below = {}  # team -> teams reachable from it (itself excluded)
    for p in reversed(teams):
        out = set()
        for e in p.edges:
            if e.dest_team is not None:
                child = teams[e.dest_team].team
                out.add(child)
                out |= below[child]
        below[p.team] = out
    computing = {}
    for p in teams:
        for n in p.compute:
            if b.nodes[n].libm:
                computing.setdefault(n, []).append(p.team)
    memo = {}
    for n, where in computing.items():
        if any(u in below[t] for t in where for u in where if u != t):
            memo[n] = where
    for p in teams:
        for n in p.compute:
            if n in memo:
                others = [u for u in memo[n] if u != p.team]
                mode = (("check",) if any(p.team in below[u] for u in others) else ()) + \
                       (("set",) if any(u in below[p.team] for u in others) else ())
                p.memo[n] = mode
    return memo


def _memo_blocks(plan, memo, b, read_later):
    """The nodes of a team computed only for one memoised value of it (not bids, not read by other
    teams): they move inside that value's `if (!computed)` block."""
    bids = {e.bid for e in plan.edges}
    users = {}
    for n in plan.compute:
        for a in b.nodes[n].args:
            users.setdefault(a, set()).add(n)
    block = {}
    for n in reversed(plan.compute):
        if n in plan.memo:
            block[n] = n if plan.memo[n] and "check" in plan.memo[n] else None
            continue
        owners = {block.get(u) for u in users.get(n, ())}
        if n not in bids and n not in read_later and len(owners) == 1 and None not in owners:
            block[n] = owners.pop()
        else:
            block[n] = None
    plan.blocks = {m: [n for n in plan.compute if block.get(n) == m and n != m]
                   for m in plan.memo if block.get(m) == m}
    plan.members = {n for ns in plan.blocks.values() for n in ns}


def _static_stats(tpg, teams, b):
    """Static counts for the trace: programs GEGELATI runs vs the operations we emit."""
    gegelati_lines = sum(len(tpg.programs[tpg.edges[e].program].lines)
                         for p in teams for e in tpg.teams[p.team].edges)
    ops = sum(len(p.compute) for p in teams)
    return {"teams": len(teams), "edges": sum(len(p.edges) for p in teams),
            "program_lines": gegelati_lines, "operations": ops,
            "libm_operations": sum(1 for p in teams for n in p.compute if b.nodes[n].libm),
            "single_edge_teams": sum(1 for p in teams if len(p.edges) == 1),
            "shared_values": len({n for p in teams for n in p.keep}),
            "memoised_values": len({n for p in teams for n in p.memo})}


def file_digest(path) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def argument_list(inputs) -> str:
    return ", ".join(f"const double {s.name}[{s.size}]" for s in inputs)


def flat_call(name, inputs) -> str:
    """The call of the entry point on one flat array holding every data source in order."""
    args, offset = [], 0
    for s in inputs:
        args.append(f"&(obs)[{offset}]")
        offset += s.size
    return f"{name}_infer({', '.join(args)})"


#: why the team loop's bound is sound (in each loop's flow fact)
LOOP_WHY = ("each team runs at most once per inference: the graph is acyclic "
            "and this is its longest root-to-action path in teams")


def recorder(name):
    """The flow-fact recorder of a TPG template: teams are its layers, each with the function its
    mark follows; loops carry why their bound holds."""
    from nnbuild.codegen import common
    return common.FlowFacts(name, functions=True, loop_extra={"why": LOOP_WHY})


#: why each team's code runs at most once per call (in each visit fact)
VISIT_WHY = ("a team is visited at most once per inference: the graph is acyclic and is walked "
             "root -> team -> ... -> action, never returning to a team")


def team_parents(plan):
    """{team label: labels of the teams with an edge to it, in team order} (the root has none)."""
    out = {t.label: [] for t in plan.teams}
    for t in plan.teams:
        for e in t.edges:
            child = plan.teams[e.dest_team].label if e.dest_team is not None else None
            if child is not None and t.label not in out[child]:
                out[child].append(t.label)
    return out


def visit_facts(facts, marks, parents):
    """One "at most once per call" fact per team: the team's code where the inference visits it.
    That is the team's mark, or, for a team whose body is a function of its own called from the
    switch, the case calling it (its `visit` marks): the bound of the team loop alone lets the WCET
    analyzer charge the costliest team on every pass (nnbuild.wcet.avr_visits). `parents` gives
    each team's parents in the graph: the visited teams form one root path of it."""
    out = []
    for lay in facts["layers"]:
        where = dict(function=lay["function"], first_line=lay["first_line"], last_line=lay["last_line"])
        case = marks.get(f"visit {lay['name']}"), marks.get(f"visit-end {lay['name']}")
        if case[0] and case[1]:
            where = dict(function=facts["entry"], first_line=case[0][0], last_line=case[1][0])
        out.append({"name": lay["name"], "file": lay["file"], **where, "max_per_call": 1,
                    "parents": parents[lay["name"]], "why": VISIT_WHY})
    return out


def finish_facts(name, facts, marks=None, parents=None):
    """The recorder's facts plus the TPG's standing facts and, given the team graph's `parents`
    (the switch shape, whose teams share one loop; the stack shape's call graph already visits each
    team once per path), the teams' visit facts; every team mark must be closed."""
    missing = [l["name"] for l in facts["layers"] if l["last_line"] is None]
    if missing:
        raise NNBuildError(f"internal error: unterminated team marks in {name}.c ({missing})")
    return dict(facts, **({"visits": visit_facts(facts, marks or {}, parents)} if parents is not None else {}),
                facts=["programs are straight-line code (no loops, no calls but <math.h> functions)",
                       "each team runs at most once per inference (acyclic graph)"])


def trace(tpg, plan, code, facts, shape):
    """TPG element -> generated code lines, for the traceability report."""
    ranges = {l["name"]: (l["first_line"], l["last_line"]) for l in facts["layers"]}
    labels = {p.state: p.label for p in plan.teams}
    n_in = tpg.input_size
    teams = []
    for p in plan.teams:
        teams.append({
            "team": p.label, "state": p.state, "lines": list(ranges.get(p.label, (None, None))),
            "edges": [{"program": e.program, "to": (f"action {e.action}" if e.action is not None
                                                      else labels[e.dest_team]),
                       "dot_line": e.file_line,
                       "bid": plan.nodes[e.bid].var if e.bid is not None and plan.nodes[e.bid].kind == "op"
                       else (plan.nodes[e.bid].text if e.bid is not None else None)} for e in p.edges],
            "operations": len(p.compute), "reused_from_dominators": len(p.reused),
        })
    return {
        "model": plan.name,
        "kind": "tpg",
        "shape": shape,
        "precision": "double",
        "sources": [s.rsplit("/", 1)[-1] for s in tpg.source_files],
        "environment": tpg.environment.name,
        "meta": {k: v for k, v in sorted(tpg.meta.items()) if isinstance(v, (str, int, float, list))},
        "passes": [],
        "stats": {**tpg.stats(), **plan.stats},
        "tables": [{"instruction": tpg.environment.instructions[t.instruction].name, "symbol": t.symbol,
                    "integers": [t.lo, t.hi]} for t in plan.tables],
        "teams": teams,
        # the report's per-layer view: one "layer" per team
        "layers": [{"index": t["state"], "name": t["team"], "type": "Team", "activation": None,
                    "inputs": n_in, "units": len(t["edges"]), "code": f"{plan.name}.c",
                    "lines": t["lines"], "weights": []} for t in teams],
    }


class Context:
    """What the TPG templates see (`c`): the plan plus naming helpers."""

    def __init__(self, tpg, plan, shape, storage="const"):
        from pathlib import Path as _Path

        from nnbuild import __version__
        self.name = plan.name
        self.guard = plan.name.upper()
        self.version = __version__
        self.shape = shape
        self.env = tpg.environment
        self.env_file = _Path(self.env.path).name if self.env.path else "(built in)"
        self.source = _Path(tpg.source_files[0]).name if tpg.source_files else "(memory)"
        self.source_sha256 = file_digest(tpg.source_files[0]) if tpg.source_files else None
        self.nodes = plan.nodes
        self.teams = plan.teams
        self.shared = plan.shared
        self.shared_set = set(plan.shared)
        self.depth = plan.depth
        self.inputs = plan.inputs
        self.n_in = tpg.input_size
        self.stats = plan.stats
        self.args = argument_list(plan.inputs)
        self.params = ", ".join(s.name for s in plan.inputs)
        self.flat_call = flat_call(plan.name, plan.inputs)
        self.tables = plan.tables
        self.flags = plan.flags
        self.chains = plan.chains
        self.inlined = plan.inlined
        self.small = plan.small
        self.guard_limit = _c_double(GUARD_LIMIT)
        self.cos_small_tag = COS_SMALL_TAG
        self.routed = plan.routed
        #: value facts of the integer test `(double)(int)x == x` (x within the table's range, checked
        #: just before): the conversions' slow paths (large magnitudes) cannot run
        self.int_tags = TPG_INT_TAGS if plan.tables and max(-plan.tables[0].lo, plan.tables[0].hi) <= TPG_INT_LIMIT else None
        #: tables in AVR flash (PROGMEM), read with ELPM or, `near`, with LPM through 16-bit pointers
        self.flash = storage in FLASH_STORAGES
        self.near = storage == NEAR_STORAGE
        #: switch shape of a large graph: each team body is its own function (compile time stays
        #: linear in the graph; one huge function takes gcc minutes), shared values in a struct
        self.team_functions = shape == "switch" and plan.stats["operations"] > SWITCH_INLINE_OPERATIONS
        self.team_params = self.params + (", &sh" if self.shared else "")
        self.team_args = self.args + (f", struct {self.name}_shared *sh" if self.shared else "")

    def ref(self, node_id):
        """How C code reads a node: a literal, an input element, a local, a shared value, or the
        expression itself (a composition's inner value that nothing else reads)."""
        node = self.nodes[node_id]
        if node.kind != "op":
            return node.text
        if node_id in self.inlined:
            return self.expr(node_id)
        return f"sh->{node.var}" if self.team_functions and node_id in self.shared_set else node.var

    def flag(self, node_id):
        """The computed-flag of a memoised node (a team visited later skips its computation)."""
        var = f"have_{self.nodes[node_id].var}"
        return f"sh->{var}" if self.team_functions else var

    def expr(self, node_id):
        """The C expression computing an op node from its operands."""
        node = self.nodes[node_id]
        return _PLACEHOLDER.sub(lambda m: self.ref(node.args[int(m.group(1)) - 1]), node.text)

    def guard_small(self, g):
        """The cos value of a Guard below its limit: the helper's `_small` variant."""
        return f"{g.cos_table.helper}_small({self.ref(g.u)})"

    def guard_outside(self, g):
        """The exp value of a Guard at or above its limit: the helper's out-of-domain expression."""
        return re.sub(r"\bx\b", self.ref(g.sum), g.exp_table.domain[1])

    def code(self, edge):
        """`next` value of an edge: the destination team's state, or -1 - action."""
        return str(edge.dest_team) if edge.action is None else f"-1 - {edge.action}"

    def dest(self, edge):
        return f"action {edge.action}" if edge.action is not None else self.teams[edge.dest_team].label

    def team_fn(self, team):
        return f"{self.name}_{team.label}"

    def team_dests(self, team):
        """Distinct destination team states of a team's edges, in first-use order."""
        out = []
        for e in team.edges:
            if e.dest_team is not None and e.dest_team not in out:
                out.append(e.dest_team)
        return out


def render(tpg, *, shape, template, share, storage="const"):
    """All output files of a TPG for one code shape, as {file name: text or JSON-able object}."""
    from nnbuild.codegen import common, templating
    name = tpg.name
    plan = lower(tpg, name, share=share)
    c = Context(tpg, plan, shape, storage)
    code, facts, marks = common.render(template, {"c": c}, recorder(name),
                                       lambda text: re.sub(r"\n{3,}", "\n\n", text))  # one blank line at most
    facts = finish_facts(name, facts, marks, team_parents(plan) if shape == "switch" else None)
    return {
        f"{name}.h": templating.render("tpg.h.j2", {"c": c}),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("tpg_weights.h.j2", {"c": c}),
        f"{name}_weights.c": templating.render("tpg_weights.c.j2", {"c": c}),
        f"{name}.flowfacts.json": facts,
        f"{name}.trace.json": dict(trace(tpg, plan, code, facts, shape),
                                   **({"near_flash_symbols": sorted(t.symbol for t in plan.tables)}
                                      if c.near and plan.tables else {})),
    }


def shape_renderer(shape, *, share):
    """The `render` of TPG code shape `shape` (template tpg_<shape>.c.j2; `share`: values computed in
    a team reused by the teams it dominates)."""
    def render_shape(model, *, precision, storage, passes_log, **_options):
        check_options(model, precision)
        if getattr(model, "kind", "nn") != "tpg":
            raise NNBuildError(f"shape '{shape}' generates Tangled Program Graphs; use shape mlp for this model")
        return render(model, shape=shape, template=f"tpg_{shape}.c.j2", storage=storage, share=share)
    return render_shape


def check_options(model, precision):
    """A TPG computes in the C type `double` of its environment: number formats do not apply."""
    if precision not in ("float32", "float64"):
        raise NNBuildError(f"precision '{precision}' does not apply to a Tangled Program Graph (its programs "
                           "compute in C double, 64-bit on hosts, 32-bit on AVR)",
                           path=model.source_files[0] if getattr(model, "source_files", None) else None)
