"""Control-flow graph of one code region, for every instruction set the builtin analyzers read
(nnbuild.wcet.avr_cfg, nnbuild.wcet.thumb2_cfg give the instruction facts; the loop finder
avr_loops and the ILP avr_ilp read the graph), and the strongly connected components the loop
nestings of avr_loops and the OTAWA adapter's irreducible-loop check are built on (`sccs`).

A region is the code reachable by jumps and branches from one start address (a function entry, a
call target, or the target of a jump that leaves another region) without leaving the interval
between the enclosing function symbol and the next symbol. Anything that leaves the interval (a
jump, a conditional branch or a fall-through into the next symbol) is a *tail call*: a pseudo node
whose cost is the WCET of the target analysed as its own region, followed by the region's exit.
This handles shared library tails and branches into other routines soundly, because the target's
own return ends the caller's invocation as well.

What an instruction set says, as an `Isa` of four functions:
  fetch(addr)       the decoded instruction at `addr` (raises naming the region when there is none)
  exits(insn)       None when control falls through to insn.end (not a block end); else
                    [(address or None for a return, taken?)] in edge order
  taken_extra(insn) cycles a taken exit of a block ending in `insn` adds (asked once per block,
                    before its exits)
  callee(insn)      a call's target address, a tuple of addresses (indirect, from the flow facts),
                    or None when `insn` calls nothing
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List

from nnbuild.errors import NNBuildError

ENTRY = "ENTRY"
EXIT = "EXIT"


@dataclass
class Block:
    """A basic block; `calls` are (call insn, target) pairs whose callee WCET is added to its cost."""

    start: int
    insns: list
    calls: List[tuple] = field(default_factory=list)

    @property
    def last(self):
        return self.insns[-1]


@dataclass
class Tail:
    """Pseudo node for control leaving the region: `target` runs as a region, then we return."""

    key: tuple
    target: int
    insn: object  # the jump/branch/last instruction that leaves


@dataclass
class Edge:
    src: object
    dst: object
    extra: int = 0


@dataclass
class Region:
    start: int
    name: str
    blocks: Dict[int, Block]
    tails: Dict[tuple, Tail]
    edges: List[Edge]

    def node_ids(self):
        return list(self.blocks) + list(self.tails)


@dataclass
class Isa:
    """The instruction facts a region needs (see the module docstring)."""

    fetch: Callable
    exits: Callable
    taken_extra: Callable
    callee: Callable


def leaders(isa, start, lo, hi):
    """Block leaders reachable from `start` inside [lo, hi) (phase 1 of block building)."""
    found, seen, work = {start}, set(), [start]
    while work:
        addr = work.pop()
        while lo <= addr < hi and addr not in seen:
            seen.add(addr)
            insn = isa.fetch(addr)
            succ = isa.exits(insn)
            if succ is None:
                addr = insn.end
                continue
            for s, _taken in succ:
                if s is not None and lo <= s < hi:
                    found.add(s)
                    work.append(s)
            break
    return found


def build_region(prog, start, isa):
    """Blocks, edges (taken extras) and call sites of the region starting at `start`."""
    lo, hi = prog.interval(start)
    starts = leaders(isa, start, lo, hi)
    blocks, tails, edges = {}, {}, [Edge(ENTRY, start, 0)]

    def link(src, dst, extra, insn):
        if dst is None:
            edges.append(Edge(src, EXIT, extra))
        elif lo <= dst < hi:
            edges.append(Edge(src, dst, extra))
        else:
            key = ("tail", src, dst)
            if key not in tails:
                tails[key] = Tail(key, dst, insn)
                edges.append(Edge(key, EXIT, 0))
            edges.append(Edge(src, key, extra))

    for lead in sorted(starts):
        insns, addr = [], lead
        while True:
            insn = isa.fetch(addr)
            insns.append(insn)
            if isa.exits(insn) is not None or insn.end in starts or not lo <= insn.end < hi:
                break
            addr = insn.end
        block = Block(lead, insns)
        for i in insns:
            target = isa.callee(i)
            if target is not None:
                block.calls.append((i, target))
        blocks[lead] = block
        last = block.last
        extra = isa.taken_extra(last)
        succ = isa.exits(last)
        if succ is None:
            link(lead, last.end, 0, last)
        else:
            for dst, taken in succ:
                link(lead, dst, extra if taken else 0, last)
    return Region(start, prog.describe(start), blocks, tails, edges)


def fetch(prog, addr, start, analyzer):
    """The decoded instruction at `addr`, for an Isa's fetch: an address the region reaches without
    an instruction (data, or code the disassembly does not cover) stops the analysis in one line."""
    insn = prog.insns.get(addr)
    if insn is None:
        raise NNBuildError(f"{analyzer}: no instruction at 0x{addr:x} in {prog.function_of(addr)} (reached from "
                           f"the region at {prog.describe(start)})", path=prog.elf)
    return insn


def require_bounds(loops, prog, analyzer, sources):
    """Stops, in one line naming the function and header address, at the first loop (by address)
    no bound reached; `sources` names what could have bounded it ("flow fact or table entry")."""
    for loop in sorted(loops, key=lambda l: l.header if isinstance(l.header, int) else 0):
        if not loop.bounds:
            note = "; ".join(loop.sources)
            raise NNBuildError(f"{analyzer}: unbounded loop in {prog.function_of(loop.header)} at "
                               f"{prog.describe(loop.header)}: no {sources}" + (f" ({note})" if note else ""))


def node_address(node):
    """A block's address, or a tail node's (("tail", source, target): its target)."""
    return node if isinstance(node, int) else node[2]


def sccs(nodes, succ, removed):
    """Strongly connected components of the subgraph on `nodes` without edges in `removed` (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes, key=node_address):
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt, i in it:
                if nxt not in nodes or i in removed:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(succ[nxt])))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        n = stack.pop()
                        on.discard(n)
                        comp.add(n)
                        if n == node:
                            break
                    out.append(comp)
    return out
