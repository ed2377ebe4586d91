"""Control-flow graph of one code region: basic blocks, costed edges, calls and tail calls.

A region is the code reachable by jumps and branches from one start address (a function entry, a
call target, or the target of a jump that leaves another region) without leaving the interval
between the enclosing function symbol and the next symbol. Anything that leaves the interval (a
jump, a conditional branch or a fall-through into the next symbol) is a *tail call*: a pseudo node
whose cost is the WCET of the target analysed as its own region, followed by the region's exit.
This handles avr-libc's shared tails and branches into other routines soundly, because the
target's own return ends the caller's invocation as well.
"""

from dataclasses import dataclass, field
from typing import Dict, List

from nnbuild.errors import NNBuildError
from nnbuild.wcet import avr_timing as T

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


def _indirect_error(prog, insn):
    return NNBuildError(f"builtin-avr: indirect {insn.mnem} in {prog.function_of(insn.addr)} at "
                        f"{prog.describe(insn.addr)}: targets unknown (give 'indirect' flow facts)")


def _is_terminator(insn):
    m = insn.mnem
    return (T.is_cond_branch(m) or m in T.SKIPS or m in ("rjmp", "jmp", "ijmp", "eijmp")
            or m in T.RETURNS)


def _fetch(prog, addr, start):
    insn = prog.insns.get(addr)
    if insn is None:
        raise NNBuildError(f"builtin-avr: no instruction at 0x{addr:x} (reached from region "
                           f"{prog.describe(start)})", path=prog.elf)
    return insn


def _leaders(prog, start, lo, hi, indirect):
    """Block leaders reachable from `start` inside [lo, hi) (phase 1 of block building)."""
    leaders, seen, work = {start}, set(), [start]
    while work:
        addr = work.pop()
        while lo <= addr < hi and addr not in seen:
            seen.add(addr)
            insn = _fetch(prog, addr, start)
            m, nxt = insn.mnem, insn.end
            succ = []
            if T.is_cond_branch(m):
                succ = [insn.target, nxt]
            elif m in T.SKIPS:
                skipped = _fetch(prog, nxt, start)
                succ = [nxt, skipped.end]
            elif m in ("rjmp", "jmp"):
                succ = [insn.target]
            elif m in ("ijmp", "eijmp"):
                if insn.addr not in indirect:
                    raise _indirect_error(prog, insn)
                succ = list(indirect[insn.addr])
            elif m in T.RETURNS:
                succ = []
            else:
                addr = nxt
                continue
            for s in succ:
                if lo <= s < hi:
                    leaders.add(s)
                    work.append(s)
            break
    return leaders


def build_region(prog, start, fam, indirect=None):
    """Blocks, edges (with taken/skip extra cycles) and call sites of the region starting at `start`."""
    indirect = indirect or {}
    lo, hi = prog.interval(start)
    leaders = _leaders(prog, start, lo, hi, indirect)
    blocks, tails, edges = {}, {}, [Edge(ENTRY, start, 0)]

    def link(src_block, dst, extra, insn):
        if lo <= dst < hi:
            edges.append(Edge(src_block, dst, extra))
            return
        key = ("tail", src_block, dst)
        if key not in tails:
            tails[key] = Tail(key, dst, insn)
            edges.append(Edge(key, EXIT, 0))
        edges.append(Edge(src_block, key, extra))

    for lead in sorted(leaders):
        insns, addr = [], lead
        while True:
            insn = _fetch(prog, addr, start)
            insns.append(insn)
            if _is_terminator(insn) or insn.end in leaders or not (lo <= insn.end < hi):
                break
            addr = insn.end
        block = Block(lead, insns)
        for i in insns:
            if i.mnem in ("call", "rcall") and i.target != i.end:
                block.calls.append((i, i.target))
            elif i.mnem in ("icall", "eicall"):
                targets = indirect.get(i.addr)
                if targets is None:
                    raise _indirect_error(prog, i)
                block.calls.append((i, tuple(targets)))
        blocks[lead] = block
        last, m = block.last, block.last.mnem
        if T.is_cond_branch(m):
            link(lead, last.end, 0, last)
            link(lead, last.target, T.branch_taken_extra(fam), last)
        elif m in T.SKIPS:
            skipped = prog.insns[last.end]
            link(lead, last.end, 0, last)
            link(lead, skipped.end, T.skip_extra(fam, skipped.size), last)
        elif m in ("rjmp", "jmp"):
            link(lead, last.target, 0, last)
        elif m in ("ijmp", "eijmp"):
            for t in indirect[last.addr]:
                link(lead, t, 0, last)
        elif m in T.RETURNS:
            edges.append(Edge(lead, EXIT, 0))
        else:
            link(lead, last.end, 0, last)
    return Region(start, prog.describe(start), blocks, tails, edges)


def block_base_cycles(block, fam, prog):
    """Cycles of a block's own instructions (branches/skips not taken, callees excluded)."""
    return sum(T.cycles(fam, i.mnem, f" at {prog.describe(i.addr)}") for i in block.insns)
