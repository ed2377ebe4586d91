"""Call contexts and infeasible-path constraints for the builtin-avr analyser.

Context. A region is analysed once per *context*: the set of context functions active in the
frames around it (outer frames, and this frame before reaching the region through tail jumps or
fall-throughs), plus the address of the call instruction that made the current frame when a
table entry names it. Only functions and call sites that some table entry mentions are tracked,
so code outside the library (the generated inference function) shares one context per callee.
A function is active once control has been at its entry in a frame: a call to it, or a tail
jump or fall-through into it (avr_trace.c follows the same rule when it checks the facts).

Table entries (avr_libloops.json) may carry
  "within": ["exp", ...]            every named function (or operand tag) is active,
  "call_site": "sym+0xoff"          the frame was made by the call instruction at that address.
Loop entries with a context add their bound only in matching contexts (on top of any entry
without one).

Paths. "paths" entries add linear constraints over the block execution counts of one routine
invocation, with optional auxiliary 0/1 variables to express "either ... or ...":
  {"symbol": S, "blocks": {name: [offset, [mnemonics...]]}, "binaries": [names],
   "counters": {name: counter}, "rows": [[{name: coeff, ...}, rhs], ...], "justification": ...}
Each row means sum(coeff * value) <= rhs, where a block name counts the executions of the
instruction at S+offset (checked against the mnemonics) and a binary name is a 0/1 variable
the ILP may choose. Every feasible execution must satisfy all rows for some choice of the
binaries; avr_trace.c checks that on simavr (tests/test_wcet_avr_context.py).

Counters. A counter name in "counters" refers to a table "counters" entry ({"name", "points":
[{"symbol", "offset", "pattern"}, ...]}): the executions of those instructions during the whole
invocation, callees included. The analyser then charges each call that can reach a point with
the callee's WCET per counter value ("choice" variables, avr_ilp), so a row can bound a sum
over several calls (e.g. the denormalisation passes of all products of one polynomial). A point
with "weight": k counts k per execution (as if listed k times).

Entry registers. A loop entry with "entry_regs": {"n": "r16"} bounds the loop by an expression
of the register's value at the entry of its symbol ("header_max": "n // 8 + 1"), e.g. the count
register of libgcc's 64-bit shifts. Contexts then carry the registers that such entries name
(Ctx.regs) when they hold a known constant at the call: a forward must-constant dataflow over the
calling region (register_constants: ldi/mov/movw/clr, from the caller's own entry values), the
value at a tail jump or fall-through carried into the tail target. The entry applies only in a
region that starts at its symbol and where every named register is known; the context-free entry
for the same loop bounds every other case. (Like operand tags, the dataflow assumes that no
store goes to the memory-mapped register file and, for calls from compiled C only, that the
callee keeps r2-r17/r28-r29 and clears r1: avr-gcc relies on the same.)

Operand tags. A call from compiled C to a float operator whose argument registers hold a
constant (from `ldi`/`mov`/`movw`/`eor`, call_constants) adds tags to the callee's context, e.g.
"__mulsf3:C.e<=128" (one factor is a normal constant with biased exponent <= 128); entries name
them in "within" like context functions (operand_tags lists them).

Value facts. The generator may prove facts about the operands of the float operations it emits
(flow facts "values": [{"file", "line", "op": "mul" | "add" | "div" | "exp" | "cos" | "fix" | "float", "tags": [...], "why": ...}], e.g. both
factors of a multiply-accumulate are zero or normal). A call from compiled C on that line to a
routine of the op (VALUE_OPS) gets those tags in its context exactly like operand tags; table
entries name them in "within" (value_fact_tags). An "add" fact with "adds" (float32 bits) goes only
to a call that adds that constant (B of __addsf3, -B of __subsf3, from call_constants).
"""

from dataclasses import dataclass, field, replace
from typing import FrozenSet, Optional, Tuple

from nnbuild.errors import NNBuildError
from nnbuild.wcet.avr_regs import applies, defs, entry_reg_numbers, pattern, reg, resolve_site


@dataclass(frozen=True)
class Ctx:
    """Relevant context of a region: active context functions and (if relevant) the call site."""

    names: FrozenSet[str] = frozenset()
    site: Optional[int] = None
    #: (register, value) of the tracked registers (entry_regs entries) known at the region entry
    regs: FrozenSet[Tuple[int, int]] = frozenset()

    def label(self, prog):
        parts = sorted(self.names)
        if self.site is not None:
            parts.append("call@" + prog.describe(self.site).split(" ")[0])
        parts += [f"r{r}={v}" for r, v in sorted(self.regs)]
        return " in " + ", ".join(parts) if parts else ""

    def without_regs(self):
        return replace(self, regs=frozenset()) if self.regs else self

    def without_names(self):
        return Ctx(regs=self.regs)


EMPTY = Ctx()


@dataclass
class PathRows:
    """Extra ILP rows of one region: ({("node", n), ("aux", k) or ("counter", name): coeff}, rhs),
    the number of binaries, and for each counter used its blocks inside the region."""

    rows: list = field(default_factory=list)
    binaries: int = 0
    sources: list = field(default_factory=list)
    counters: set = field(default_factory=set)
    counter_nodes: dict = field(default_factory=dict)


class Contexts:
    """Which function names and call sites the table's entries refer to, and context stepping."""

    def __init__(self, prog, entries):
        self.prog = prog
        self.names = set()
        self.sites = set()
        #: registers that some entry_regs entry reads at its symbol's entry
        self.regs = set()
        for ent in entries:
            self.names.update(ent.get("within", []))
            self.regs.update(entry_reg_numbers(ent).values())
            if "call_site" in ent:
                addr = resolve_site(prog, ent["call_site"])
                if addr is not None:
                    self.sites.add(addr)
        self.names = frozenset(self.names)

    def own(self, ctx, addr):
        """Active names inside a region starting at `addr` (its function counts when the region
        starts at the function's entry)."""
        names = [n for n in self.prog.names.get(addr, []) if n in self.names]
        return ctx.names | frozenset(names) if names else ctx.names

    def _regs(self, state):
        return frozenset((r, v) for r, v in (state or {}).items() if r in self.regs)

    def call(self, own, call_addr, tags=(), state=None):
        """Context of a callee called from the instruction at `call_addr` (operand `tags`,
        register constants `state` before the call)."""
        rel = frozenset(tags) & self.names
        return Ctx(own | rel if rel else own, call_addr if call_addr in self.sites else None, self._regs(state))

    def tail(self, own, ctx, state=None):
        """Context of a tail target: the same frame (register constants `state` at the jump)."""
        return Ctx(own, ctx.site, self._regs(state))


def _unmatched_lower_bounded(prog, ent, counters):
    """The first counter that a row of `ent` bounds from below (negative coefficient) and that has
    a point whose code does not match (or is not in the ELF), else None."""
    ctr = ent.get("counters", {})
    lower = sorted({ctr[name] for terms, _ in ent["rows"] for name, c in terms.items() if name in ctr and c < 0})
    for name in lower:
        for pt in counters.get(name, {"points": [None]})["points"]:
            try:
                addr = prog.address_of(pt["symbol"]) + pt["offset"]
            except (NNBuildError, TypeError):
                return name
            if pattern(prog, addr, len(pt["pattern"])) != pt["pattern"]:
                return name
    return None


def _block_of(region, addr):
    for start, b in region.blocks.items():
        if start <= addr < b.last.end and any(i.addr == addr for i in b.insns):
            return start
    return None


def path_rows(region, prog, entries, own, site, counters=None):
    """PathRows for the region from the table's "paths" entries whose symbol starts the region,
    whose context holds and whose blocks all match; mismatches are reported, never applied. An
    entry whose rows give a counter a negative coefficient (a lower bound on the counter) applies
    only when every point of that counter (`counters`: {name: entry}) matches the code: a
    mismatched point counts nothing, which only a row with positive coefficients survives."""
    out = PathRows()
    names = set(prog.names.get(region.start, []))
    for ent in entries:
        if ent["symbol"] not in names or not applies(ent, prog, own, site):
            continue
        tag = f"paths {ent['symbol']}" + (f" ({ent['id']})" if "id" in ent else "")
        bad = _unmatched_lower_bounded(prog, ent, counters or {})
        if bad:
            out.sources.append(f"{tag}: counter {bad} does not match the code, not applied")
            continue
        nodes, ok = {}, True
        for name, (off, mnemonics) in ent["blocks"].items():
            addr = region.start + off
            node = _block_of(region, addr)
            if node is None or pattern(prog, addr, len(mnemonics)) != mnemonics:
                out.sources.append(f"{tag}: block {name} at +{off:#x} does not match, not applied")
                ok = False
                break
            nodes[name] = node
        if not ok:
            continue
        aux = {b: out.binaries + k for k, b in enumerate(ent.get("binaries", []))}
        ctr = ent.get("counters", {})
        for terms, rhs in ent["rows"]:
            row = {}
            for name, c in terms.items():
                key = (("node", nodes[name]) if name in nodes else ("counter", ctr[name]) if name in ctr
                       else ("aux", aux[name]))
                row[key] = row.get(key, 0) + c
            out.rows.append((row, rhs))
        out.binaries += len(aux)
        out.counters.update(ctr.values())
        out.sources.append(tag)
    return out


# ---------------------------------------------------------------- constant operands

#: float operators whose constant operands give context tags (operand_tags)
OPERATORS = frozenset(["__mulsf3", "__divsf3"])
_CALLEE_SAVED = frozenset([*range(2, 18), 28, 29])


def _transfer(state, insn):
    """Register constants after `insn` ({reg: byte} of known registers)."""
    m, ops = insn.mnem, insn.ops
    if m in ("call", "rcall", "icall", "eicall"):
        if m == "rcall" and insn.target == insn.end:  # `rcall .+0` only pushes
            return state
        # calls from compiled C (line info) follow the ABI: callee-saved registers survive and
        # r1 is zero again; calls inside hand-written library code may clobber anything
        keep = _CALLEE_SAVED if insn.file else frozenset()
        out = {r: v for r, v in state.items() if r in keep}
        out[1] = 0
        return out
    out = dict(state)
    d = defs(insn)
    if d is None:
        return {}
    for r in d:
        out.pop(r, None)
    rd = reg(ops[0]) if ops else None
    if m == "ldi":
        out[rd] = int(ops[1], 0) & 0xFF
    elif m == "mov" and reg(ops[1]) in state:
        out[rd] = state[reg(ops[1])]
    elif m == "movw" and reg(ops[1]) in state and reg(ops[1]) + 1 in state:
        out[rd], out[rd + 1] = state[reg(ops[1])], state[reg(ops[1]) + 1]
    elif m in ("eor", "sub") and len(ops) == 2 and ops[0] == ops[1]:
        out[rd] = 0
    elif m == "clr":
        out[rd] = 0
    return out


def _dataflow(region, entry):
    """(block -> constants at its start, block -> constants at its end) of a forward
    must-constant dataflow from `entry` ({reg: byte} at the region entry). Blocks never
    reached from the entry have no state."""
    preds = {}
    for e in region.edges:
        if e.dst in region.blocks:
            preds.setdefault(e.dst, []).append(e.src)
    ins, outs = {}, {}
    order = sorted(region.blocks)
    changed = True
    while changed:
        changed = False
        for n in order:
            srcs = preds.get(n, [])
            states = [dict(entry) if p == "ENTRY" else outs.get(p) for p in srcs]
            states = [st for st in states if st is not None]
            if not states:
                continue
            st = dict(states[0])
            for other in states[1:]:
                st = {r: v for r, v in st.items() if other.get(r) == v}
            if ins.get(n) == st and n in outs:
                continue
            ins[n] = st
            cur = st
            for insn in region.blocks[n].insns:
                cur = _transfer(cur, insn)
            if outs.get(n) != cur:
                outs[n] = cur
                changed = True
    return ins, outs


def _before_calls(region, ins):
    """{call insn address: (insn, constants just before it)}."""
    found = {}
    for n in sorted(region.blocks):
        cur = ins.get(n)
        if cur is None:
            continue
        for insn in region.blocks[n].insns:
            if insn.mnem in ("call", "rcall", "icall", "eicall"):
                found[insn.addr] = (insn, cur)
            cur = _transfer(cur, insn)
    return found


def call_constants(region):
    """{call insn address: (A, B)} for the calls in `region`, A = r25:r22 and B = r21:r18 as
    32-bit words when every byte is a known constant there (else None). Forward must-constant
    dataflow from the region entry (r1 = 0, the ABI's zero register)."""
    ins, _ = _dataflow(region, {1: 0})
    found = {}
    for addr, (insn, cur) in _before_calls(region, ins).items():
        if insn.mnem in ("call", "rcall"):
            a = [cur.get(r) for r in (22, 23, 24, 25)]
            b = [cur.get(r) for r in (18, 19, 20, 21)]
            found[addr] = (None if None in a else int.from_bytes(bytes(a), "little"),
                           None if None in b else int.from_bytes(bytes(b), "little"))
    return found


def register_constants(region, entry, regs):
    """Constants of the registers `regs` ({reg: byte}, known ones only) where control leaves the
    region for a callee or a tail target: ({call address: state}, {tail key: state}). `entry`
    holds the known values at the region entry (the context's Ctx.regs); nothing else is assumed
    (not even r1 = 0, which library code does not keep). A tail's state is the one at the end of
    its source block: the jump, branch or skip that leaves writes no register, and a fall-through
    leaves after the block's last instruction."""
    regs = set(regs)
    if not regs:
        return {}, {}
    ins, outs = _dataflow(region, entry)
    keep = lambda st: {r: v for r, v in st.items() if r in regs}  # noqa: E731
    calls = {a: keep(st) for a, (_, st) in _before_calls(region, ins).items()}
    tails = {k: keep(outs[t.key[1]]) for k, t in region.tails.items() if t.key[1] in outs}
    return calls, tails


def _fields(word):
    """(biased exponent, mantissa bits) of a float32 bit pattern."""
    return (word >> 23) & 0xFF, word & 0x7FFFFF


def operand_tags(callee_names, a, b):
    """Context tags of a call to a float operator with constant operands (None = unknown).

    __mulsf3: "C.e<=128", "C.e>=126", "C.e>=122", "C.e>=118": one factor is a normal constant
    with that biased exponent. __divsf3: "A.normal" (the dividend is a normal constant) and "A.e>=127" (a normal
    constant with |A| >= 1).
    """
    tags = set()
    names = set(callee_names)
    if "__mulsf3" in names:
        for c in (a, b):
            if c is None:
                continue
            e, _ = _fields(c)
            if 1 <= e <= 254:
                if e <= 128:
                    tags.add("__mulsf3:C.e<=128")
                for n in (126, 122, 118):
                    if e >= n:
                        tags.add(f"__mulsf3:C.e>={n}")
    if "__divsf3" in names and a is not None:
        e, mant = _fields(a)
        if 1 <= e <= 254:
            tags.add("__divsf3:A.normal")
            if e >= 127:
                tags.add("__divsf3:A.e>=127")
    return tags


#: value fact op -> the float routines that implement it (a C `a - b` calls __subsf3, which flips
#: b's sign and falls into __addsf3: the fact is about the addition __addsf3x performs)
VALUE_OPS = {"mul": frozenset(["__mulsf3"]), "add": frozenset(["__addsf3", "__subsf3"]),
             "div": frozenset(["__divsf3"]), "exp": frozenset(["exp", "expf"]), "cos": frozenset(["cos", "cosf"]),
             "fix": frozenset(["__fixsfsi"]), "float": frozenset(["__floatsisf"])}


def value_facts(facts):
    """{(file basename, line): [(routine names, tags, addend)]} from the flow facts' "values"
    entries (addend: the float32 bits an "add" fact requires as the added operand, or None); an
    entry with an unknown op is one clear error (a fact the analyser cannot place)."""
    import os
    out = {}
    for ent in (facts or {}).get("values", []):
        if ent.get("op") not in VALUE_OPS:
            raise NNBuildError(f"value flow fact at {ent.get('file')}:{ent.get('line')}: unknown op "
                               f"'{ent.get('op')}' (known: {', '.join(sorted(VALUE_OPS))})")
        adds = ent.get("adds")
        if adds is not None and ent["op"] != "add":
            raise NNBuildError(f"value flow fact at {ent.get('file')}:{ent.get('line')}: 'adds' is for op 'add'")
        key = (os.path.basename(ent["file"]), int(ent["line"]))
        out.setdefault(key, []).append((VALUE_OPS[ent["op"]], frozenset(ent["tags"]),
                                        None if adds is None else int(adds, 16)))
    return out


def value_fact_tags(facts_at_line, callee_names, operand_b=None):
    """Tags of the value facts on a call's line that are about the called routine. A fact with an
    addend applies only when the call adds exactly that constant: B (r21:r18, `operand_b`, None
    when not a known constant) for __addsf3, B with its sign flipped for __subsf3 (which negates
    B and falls into __addsf3)."""
    names = set(callee_names)
    found = set()
    for routines, tags, addend in facts_at_line:
        if not routines & names:
            continue
        if addend is not None:
            if operand_b is None:
                continue
            added = operand_b ^ 0x80000000 if "__subsf3" in names else operand_b
            if added != addend:
                continue
        found.update(tags)
    return frozenset(found)


def counter_points(prog, ent):
    """Addresses of counter entry `ent`'s instructions (points whose symbol is not in the ELF
    are left out: their code cannot run)."""
    out = set()
    for pt in ent["points"]:
        try:
            out.add(prog.address_of(pt["symbol"]) + pt["offset"])
        except NNBuildError:
            continue
    return frozenset(out)


def counter_nodes(region, prog, ent):
    """Blocks of `region` holding one of counter entry `ent`'s instructions (pattern-checked).
    A point whose code does not match is not counted: the counter then stays 0 in that region,
    so its callers see a single value whose cost is the unconstrained WCET (sound, looser)."""
    nodes = []
    for pt in ent["points"]:
        try:
            addr = prog.address_of(pt["symbol"]) + pt["offset"]
        except NNBuildError:
            continue
        node = _block_of(region, addr)
        if node is None:
            continue
        if pattern(prog, addr, len(pt["pattern"])) == pt["pattern"]:
            nodes.extend([node] * pt.get("weight", 1))
    return nodes
