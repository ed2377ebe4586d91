"""Loops (Steensgaard loop-nesting forest: natural and irreducible) and loop bounds of a region.

A loop bound is a linear constraint relative to the loop's entry edges (IPET, docs/wcet.md 4):
  ("header", N): executions of the header block <= N * entries
  ("back", N):   traversals of back edges      <= N * entries
  ("edge", N, i): traversals of edge i         <= N * entries
Every source that applies adds its constraint (all are sound, the ILP keeps the tightest), except
that a loop takes one generator flow fact, the loosest of those matching it (`apply_flowfacts`).
Sources: generator flow facts (file+line of the `for`; a fact with "counts": "header" bounds the
executions of the loop's first block, for assembly loops that test at the end of it), the shipped
avr_libloops.json table,
and the automatic ldi/dec/brne counter analysis.
"""

import json
import os
from dataclasses import dataclass, field
from typing import List, Set

from nnbuild.errors import NNBuildError
from nnbuild.wcet import cfg
from nnbuild.wcet.cfg import ENTRY, EXIT, node_address, sccs
from nnbuild.wcet.avr_regs import applies, defs, entry_reg_numbers, pattern, reg

TABLE_PATH = os.path.join(os.path.dirname(__file__), "avr_libloops.json")


@dataclass
class Loop:
    """A loop of the Steensgaard loop-nesting forest: a strongly connected component.

    `headers` are the nodes entered from outside (one for a natural loop, several for an
    irreducible one); `header` is the lowest of them, used to name and key the loop.
    """

    headers: Set[object]
    body: Set[object]
    back_edges: List[int]
    entry_edges: List[int]
    header_exits: bool
    bounds: list = field(default_factory=list)
    sources: list = field(default_factory=list)

    @property
    def header(self):
        return min(self.headers, key=node_address)


def graph(region):
    """succ/pred maps over block and tail nodes (ENTRY/EXIT excluded) with edge indices."""
    succ = {n: [] for n in region.node_ids()}
    pred = {n: [] for n in region.node_ids()}
    for i, e in enumerate(region.edges):
        if e.src != ENTRY and e.dst != EXIT:
            succ[e.src].append((e.dst, i))
            pred[e.dst].append((e.src, i))
    return succ, pred


def find_loops(region, prog=None):
    """All loops, outermost first: each SCC is a loop; its back edges (edges into its headers
    from inside) are removed to find the loops nested in it."""
    succ, _ = graph(region)
    loops, removed = [], set()
    work = [set(region.node_ids())]
    while work:
        nodes = work.pop()
        for comp in sccs(nodes, succ, removed):
            if len(comp) == 1:
                n = next(iter(comp))
                if not any(d == n and i not in removed for d, i in succ[n]):
                    continue
            entries = [i for i, e in enumerate(region.edges) if e.dst in comp and e.src not in comp]
            headers = {region.edges[i].dst for i in entries}
            backs = [i for i, e in enumerate(region.edges)
                     if e.src in comp and e.dst in headers and i not in removed]
            exits = any(d not in comp for h in headers for d, _ in succ[h]) or any(
                e.src in headers and e.dst == EXIT for e in region.edges)
            loops.append(Loop(headers, comp, backs, entries, exits))
            removed.update(backs)
            work.append(comp)
    return loops


# ---------------------------------------------------------------- flow facts (generator loops)

def _lines(region, nodes):
    out = set()
    for n in nodes:
        b = region.blocks.get(n)
        if b:
            out.update((os.path.basename(i.file), i.line) for i in b.insns if i.file)
    return out


#: instructions that do an iteration's work (memory, calls, multiplies) rather than test the loop
_WORK = ("ld", "ldd", "lds", "st", "std", "sts", "lpm", "elpm", "call", "rcall", "icall",
         "mul", "muls", "mulsu", "fmul", "fmuls", "fmulsu", "push", "pop")


def frame_load(insn):
    """A load through Y (avr-gcc's frame pointer): a spill reload, not an iteration's work."""
    return insn.mnem in ("ld", "ldd") and len(insn.ops) > 1 and insn.ops[1].lstrip("-").startswith("Y")


def top_tested(region, loop, line=None):
    """True when the header runs once more than the body: it exits, is not a latch, and does no
    iteration work. Then back edges <= N per entry. Otherwise every header execution starts one
    iteration (rotated loops, single-block loops, loops entered mid-body), so header <= N.

    "Iteration work" is a memory access, call or multiply on a line other than the `for` line:
    moves and compares that the optimiser puts in a test block (a pointer-compare loop at -Os)
    do not count, nor does reloading the induction variable at -O0, nor a load from the stack
    frame (a spilled value reloaded where gcc put it, e.g. v1's table entry pointer in the
    kernels' `ky` test: counting it as work took 6 runs of that test for 5, 20% under a measured
    run). Whatever a load through Y is, calling a loop top-tested is the sound side: back edges
    <= N holds for every loop shape, header <= N only for rotated ones. The structural rules come
    first so that a stray line attribution can only make the bound looser, never unsound,
    except for work hoisted into a pure test block, which gcc does not do on AVR.
    """
    latches = {region.edges[i].src for i in loop.back_edges}
    if not loop.header_exits or loop.headers & latches:
        return False
    for h in loop.headers:
        for insn in region.blocks[h].insns:
            if insn.mnem in _WORK and insn.line is not None and insn.line != line and not frame_load(insn):
                return False
    return True


def own_nodes(loop, loops):
    """The loop's blocks minus those of loops nested in it."""
    inner = set()
    for other in loops:
        if other is not loop and other.body < loop.body:
            inner |= other.body
    return loop.body - inner


def _innermost(cands):
    return [l for l in cands if not any(o is not l and o.body < l.body for o in cands)]


def _range_owner(region, loop, loops, facts):
    """The innermost fact whose [line, last_line] holds every source line of the loop's own
    blocks in that fact's file (used when no header/latch carries a `for` line)."""
    lines = _lines(region, own_nodes(loop, loops))
    best = None
    for k, fact in enumerate(facts):
        if fact.get("last_line") is None:
            continue
        base, lo, hi = os.path.basename(fact["file"]), int(fact["line"]), int(fact["last_line"])
        mine = [ln for f, ln in lines if f == base]
        if mine and all(lo <= ln <= hi for ln in mine):
            if best is None or hi - lo < int(facts[best]["last_line"]) - int(facts[best]["line"]):
                best = k
    return best


def _fact_bound(region, loop, fact):
    """The constraint a fact puts on `loop`: ("back", N) for a top-tested loop, else ("header", N)."""
    n = int(fact["max_iterations"])
    counts_back = fact.get("counts") != "header" and top_tested(region, loop, int(fact["line"]))
    return ("back", n) if counts_back else ("header", n)


def _bound_by_fact(region, loop, facts, k, how, matched, totals=False):
    """`totals`: also the fact's total_iterations, body executions per invocation of the region
    (sound: one invocation is part of one call of the entry, over which the fact sums; only for
    the loop that is the fact's own `for`)."""
    kind, n = _fact_bound(region, loop, facts[k])
    key = (os.path.basename(facts[k]["file"]), int(facts[k]["line"]))
    loop.bounds.append((kind, n))
    loop.sources.append(f"flowfacts {key[0]}:{key[1]} max_iterations={n} ({how})")
    total = facts[k].get("total_iterations")
    if totals and total is not None:
        loop.bounds.append(("total", int(total), kind))
        loop.sources.append(f"flowfacts {key[0]}:{key[1]} total_iterations={total} (per invocation)")
    matched.append((k, loop.header))


def _holds_body_of(region, loop, fact):
    """True when the loop holds code of the fact's loop body (a line in (line, last_line] of its
    file), or the fact gives no last_line, or its loop is one line (an assembly loop in a macro).
    A `for` line found in a loop that holds none of that `for`'s body came there with shared or
    moved code (avr-gcc gives an arena address computed for one layer the line of an earlier
    layer's `for`), and does not make the loop that `for`."""
    if fact.get("last_line") is None or int(fact["last_line"]) <= int(fact["line"]):
        return True
    base, lo, hi = os.path.basename(fact["file"]), int(fact["line"]), int(fact["last_line"])
    return any(f == base and lo < ln <= hi for f, ln in _lines(region, loop.body))


def _looser(bound):
    """Sort key of a fact bound by the header executions per entry it allows (back N: N + 1)."""
    kind, n = bound
    return (n + 1 if kind == "back" else n, kind == "back")


def apply_flowfacts(region, loops, facts):
    """Bound loops from the generator's facts: loops whose header or latch blocks carry a fact's
    `for` line and that hold code of that `for`'s body (innermost match wins). A loop matched by
    several facts takes the loosest of them: each fact is one `for`, so at most one is the loop's
    own and the others came with a stray line attribution, which must only loosen a bound (taking
    the tightest, a pooling loop of 16 channels got the 12 rows of an earlier layer's `for` whose
    line avr-gcc gave its arena address: 0.07% under a measured run of LeNet-5 q8). Loops matching
    no `for` line are left to the shipped table, the counter analysis and, last,
    `apply_flowfact_ranges`."""
    matched, per_loop = [], {}
    for k, fact in enumerate(facts):
        key = (os.path.basename(fact["file"]), int(fact["line"]))
        cands = [l for l in loops
                 if key in _lines(region, list(l.headers) + [region.edges[i].src for i in l.back_edges])
                 and _holds_body_of(region, l, fact)]
        for loop in _innermost(cands):
            per_loop.setdefault(id(loop), (loop, []))[1].append(k)
    for loop, ks in per_loop.values():
        bounds = {k: _fact_bound(region, loop, facts[k]) for k in ks}
        mine = max(ks, key=lambda k: _looser(bounds[k]))
        _bound_by_fact(region, loop, facts, mine, "for line", matched, totals=len(ks) == 1)
        for k in ks:
            if k != mine:
                f = facts[k]
                loop.sources.append(f"flowfacts {os.path.basename(f['file'])}:{f['line']} "
                                    f"max_iterations={f['max_iterations']} (for line, not applied: a looser fact matched)")
    return matched


def apply_flowfact_ranges(region, loops, facts):
    """Loops still without any bound: the innermost fact whose line range holds all of the loop's
    own code. Run after the table and the counter analysis: a loop the compiler made inside a
    `for` (a 32-bit shift by 7 is an `ldi 7; ...; dec; brne` loop at -Os) lies in that `for`'s
    range but runs its own count, which may exceed the `for`'s (7 against 4, 0.8% under a measured
    run of a fixed-point conv before this order)."""
    matched = []
    for loop in loops:
        if not loop.bounds:
            k = _range_owner(region, loop, loops, facts)
            if k is not None:
                _bound_by_fact(region, loop, facts, k, "line range", matched)
    return matched


# ---------------------------------------------------------------- shipped table

def load_table(path=TABLE_PATH):
    with open(path) as f:
        return json.load(f)["loops"]


def load_paths(path=TABLE_PATH):
    """The table's infeasible-path constraint entries (avr_paths)."""
    with open(path) as f:
        return json.load(f).get("paths", [])


def load_counters(path=TABLE_PATH):
    """The table's counters ({name: entry}) that paths entries may bound across calls."""
    with open(path) as f:
        return {c["name"]: c for c in json.load(f).get("counters", [])}


def apply_table(region, loops, prog, table, own=frozenset(), site=None, regs=None):
    """Bound loops whose header is a table entry's symbol+offset and whose code matches its
    pattern; entries with a context ("within", "call_site") only where it holds (avr_paths);
    entries with "entry_regs" only in a region that starts at the symbol with every named
    register known at its entry (`regs`: {register: value}), bounded by their expression."""
    regs = regs or {}
    for l in loops:
        if not isinstance(l.header, int):
            continue
        for ent in table:
            names = prog.names.get(l.header - ent["offset"], [])
            if ent["symbol"] not in names or not applies(ent, prog, own, site):
                continue
            env = {var: regs.get(r) for var, r in entry_reg_numbers(ent).items()}
            if env and (region.start != l.header - ent["offset"] or None in env.values()):
                continue
            if pattern(prog, l.header, len(ent["pattern"])) != ent["pattern"]:
                l.sources.append(f"table {ent['symbol']}+{ent['offset']:#x}: pattern mismatch, not applied")
                continue
            kind = "header" if "header_max" in ent else "back"
            n = bound_value(ent, kind, env)
            l.bounds.append((kind, n))
            where = []
            if "within" in ent or "call_site" in ent:
                where = ent.get("within", []) + (["call@" + ent["call_site"]] if "call_site" in ent else [])
            where += [f"{ent['entry_regs'][v]}={x}" for v, x in sorted(env.items())]
            where = " in " + ", ".join(where) if where else ""
            l.sources.append(f"table {ent['symbol']}+{ent['offset']:#x}{where} {kind}_max={n}")


def bound_value(ent, kind, env):
    """A table entry's bound: an integer, or (entry_regs entries) an expression of the entry
    register values in `env`: integers, + - * // %, parentheses, min(), max()."""
    val = ent[f"{kind}_max"]
    if not isinstance(val, str):
        return int(val)
    try:
        n = eval_expr(val, env)
    except (ValueError, SyntaxError, ZeroDivisionError) as exc:
        raise NNBuildError(f"builtin-avr: table entry {ent['symbol']}+{ent['offset']:#x}: bad bound "
                           f"'{val}': {exc}")
    if n < 0:
        raise NNBuildError(f"builtin-avr: table entry {ent['symbol']}+{ent['offset']:#x}: bound '{val}' "
                           f"is negative for {env}")
    return n


def eval_expr(text, env):
    """Integer value of a small arithmetic expression over the names in `env` (no eval())."""
    import ast
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in env and env[node.id] is not None:
            return int(env[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
                and node.args and not node.keywords):
            return (min if node.func.id == "min" else max)(ev(a) for a in node.args)
        raise ValueError(f"unsupported expression element {ast.dump(node)[:60]}")

    return ev(ast.parse(text, mode="eval"))


# ---------------------------------------------------------------- automatic counter loops

def _ldi_value(region, pred, node, regs, seen):
    """Constant loaded by the `ldi` that reaches the end of `node` for each of `regs`, else None."""
    if node == ENTRY or not isinstance(node, int) or node in seen or len(seen) > 32:
        return None
    seen = seen | {node}
    vals = {}
    for insn in reversed(region.blocks[node].insns):
        d = defs(insn)
        hit = set(regs) if d is None else d & set(regs) - set(vals)
        for r in hit:
            if insn.mnem != "ldi" or reg(insn.ops[0]) != r:
                return None
            vals[r] = int(insn.ops[1], 0)
        if len(vals) == len(regs):
            return vals
    preds = [p for p, _ in pred[node]]
    if any(e.dst == node and e.src == ENTRY for e in region.edges) or not preds:
        return None
    results = [_ldi_value(region, pred, p, [r for r in regs if r not in vals], seen) for p in preds]
    if any(r is None for r in results) or len({tuple(sorted(r.items())) for r in results}) != 1:
        return None
    return {**vals, **results[0]}


def _counter_shape(block, body):
    """(regs, continue-successor) if `block` ends with dec/subi 1/sbiw 1 then brne into the loop."""
    if len(block.insns) < 2 or block.last.mnem != "brne" or block.last.target not in body:
        return None
    if block.last.end in body:
        return None
    d = block.insns[-2]
    r = reg(d.ops[0]) if d.ops else None
    if r is None:
        return None
    if d.mnem == "dec" or (d.mnem == "subi" and int(d.ops[1], 0) == 1):
        return [r], d
    if d.mnem == "sbiw" and int(d.ops[1], 0) == 1:
        return [r, r + 1], d
    return None


def apply_auto(region, loops):
    """ldi K ... dec/subi 1/sbiw 1 + brne: the continue edge runs at most K-1 times per entry."""
    succ, pred = graph(region)
    for l in loops:
        for n in l.body:
            b = region.blocks.get(n)
            shape = b and _counter_shape(b, l.body)
            if not shape:
                continue
            regs, dec = shape
            if not _only_writer(region, l.body, regs, dec):
                continue
            inits = [_ldi_value(region, pred, region.edges[i].src, regs, frozenset()) for i in l.entry_edges]
            if not inits or any(v is None for v in inits):
                continue
            width = 8 * len(regs)
            ks = [sum(v[r] << (8 * j) for j, r in enumerate(regs)) or (1 << width) for v in inits]
            cont = [i for i, e in enumerate(region.edges) if e.src == n and e.dst == b.last.target]
            l.bounds.append(("edge", max(ks) - 1, cont[0]))
            l.sources.append(f"auto counter r{regs[0]} from ldi {max(ks)} at 0x{n:x}")


def _only_writer(region, body, regs, dec):
    for n in body:
        b = region.blocks.get(n)
        if b is None:
            return False  # a tail call leaves and re-enters nothing, but be strict
        for insn in b.insns:
            d = defs(insn)
            if insn is not dec and (d is None or d & set(regs)):
                return False
    return True


def require_bounds(region, loops, prog):
    """One line naming the function and header address of the first loop with no bound (cfg.require_bounds)."""
    cfg.require_bounds(loops, prog, "builtin-avr", "flow fact, table entry or counter")
