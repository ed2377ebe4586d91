"""Call contexts and infeasible-path constraints for the builtin-avr analyser.

Context. A region is analysed once per *context*: the set of context functions active in the
frames around it (outer frames, and this frame before reaching the region through tail jumps or
fall-throughs), plus the address of the call instruction that made the current frame when a
table entry names it. Only functions and call sites that some table entry mentions are tracked,
so code outside the library (the generated inference function) shares one context per callee.
A function is active once control has been at its entry in a frame: a call to it, or a tail
jump or fall-through into it (avr_trace.c follows the same rule when it checks the facts).

Table entries (avr_libloops.json) may carry
  "within": ["exp", ...]            every named function is active (the region's own counts),
  "call_site": "sym+0xoff"          the frame was made by the call instruction at that address.
Loop entries with a context add their bound only in matching contexts (on top of any entry
without one). "paths" entries add linear constraints over block execution counts of one routine
invocation, with optional auxiliary 0/1 variables to express "either ... or ...":
  {"symbol": S, "blocks": {name: [offset, [mnemonics...]]}, "binaries": [names],
   "rows": [[{name: coeff, ...}, rhs], ...], "justification": ...}
Each row means sum(coeff * count) <= rhs, where a block name counts the executions of the
instruction at S+offset (checked against the mnemonics) and a binary name is a 0/1 variable
the ILP may choose. Every feasible execution must satisfy all rows for some choice of the
binaries; avr_trace.c checks that on simavr (tests/test_wcet_avr_context.py).
"""

from dataclasses import dataclass, field
from typing import FrozenSet, Optional

from nnbuild.errors import NNBuildError


@dataclass(frozen=True)
class Ctx:
    """Relevant context of a region: active context functions and (if relevant) the call site."""

    names: FrozenSet[str] = frozenset()
    site: Optional[int] = None

    def label(self, prog):
        parts = sorted(self.names)
        if self.site is not None:
            parts.append("call@" + prog.describe(self.site).split(" ")[0])
        return " in " + ", ".join(parts) if parts else ""


EMPTY = Ctx()


@dataclass
class PathRows:
    """Extra ILP rows of one region: ({("node", n) or ("aux", k): coeff}, rhs) and #binaries."""

    rows: list = field(default_factory=list)
    binaries: int = 0
    sources: list = field(default_factory=list)


def resolve_site(prog, text):
    """Byte address of 'sym+0xoff' (None when the symbol is not in this program)."""
    sym, _, off = text.partition("+")
    try:
        return prog.address_of(sym) + (int(off, 0) if off else 0)
    except NNBuildError:
        return None


class Contexts:
    """Which function names and call sites the table's entries refer to, and context stepping."""

    def __init__(self, prog, entries):
        self.prog = prog
        self.names = set()
        self.sites = set()
        for ent in entries:
            self.names.update(ent.get("within", []))
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

    def call(self, own, call_addr):
        """Context of a callee called from the instruction at `call_addr`."""
        return Ctx(own, call_addr if call_addr in self.sites else None)

    @staticmethod
    def tail(own, ctx):
        """Context of a tail target: the same frame."""
        return Ctx(own, ctx.site)


def applies(ent, prog, own, site):
    """True when a table entry's context holds for a region with active names `own` and frame
    call site `site`."""
    if not set(ent.get("within", [])) <= own:
        return False
    if "call_site" in ent:
        addr = resolve_site(prog, ent["call_site"])
        return addr is not None and addr == site
    return True


def _pattern(prog, addr, n):
    out = []
    for _ in range(n):
        insn = prog.insns.get(addr)
        if insn is None:
            break
        out.append(insn.mnem)
        addr = insn.end
    return out


def _block_of(region, addr):
    for start, b in region.blocks.items():
        if start <= addr < b.last.end and any(i.addr == addr for i in b.insns):
            return start
    return None


def path_rows(region, prog, entries, own, site):
    """PathRows for the region from the table's "paths" entries whose symbol starts the region,
    whose context holds and whose blocks all match; mismatches are reported, never applied."""
    out = PathRows()
    names = set(prog.names.get(region.start, []))
    for ent in entries:
        if ent["symbol"] not in names or not applies(ent, prog, own, site):
            continue
        tag = f"paths {ent['symbol']}" + (f" ({ent['id']})" if "id" in ent else "")
        nodes, ok = {}, True
        for name, (off, pattern) in ent["blocks"].items():
            addr = region.start + off
            node = _block_of(region, addr)
            if node is None or _pattern(prog, addr, len(pattern)) != pattern:
                out.sources.append(f"{tag}: block {name} at +{off:#x} does not match, not applied")
                ok = False
                break
            nodes[name] = node
        if not ok:
            continue
        aux = {b: out.binaries + k for k, b in enumerate(ent.get("binaries", []))}
        for terms, rhs in ent["rows"]:
            row = {}
            for name, c in terms.items():
                key = ("node", nodes[name]) if name in nodes else ("aux", aux[name])
                row[key] = row.get(key, 0) + c
            out.rows.append((row, rhs))
        out.binaries += len(aux)
        out.sources.append(tag)
    return out
