"""Control-flow graph of one AVR code region (nnbuild.wcet.cfg builds it; here the instruction
facts: which instructions end a block, where they go, what a taken branch or skip costs, and which
call which callee).
"""

from nnbuild.errors import NNBuildError
from nnbuild.wcet import avr_timing as T
from nnbuild.wcet import cfg


def _indirect_error(prog, insn):
    return NNBuildError(f"builtin-avr: indirect {insn.mnem} in {prog.function_of(insn.addr)} at "
                        f"{prog.describe(insn.addr)}: targets unknown (give 'indirect' flow facts)")


def isa(prog, start, fam, indirect):
    """The AVR facts cfg.build_region reads, for the region starting at `start`."""

    def fetch(addr):
        return cfg.fetch(prog, addr, start, "builtin-avr")

    def exits(insn):
        m = insn.mnem
        if T.is_cond_branch(m):
            return [(insn.end, False), (insn.target, True)]
        if m in T.SKIPS:
            return [(insn.end, False), (fetch(insn.end).end, True)]
        if m in ("rjmp", "jmp"):
            return [(insn.target, False)]
        if m in ("ijmp", "eijmp"):
            if insn.addr not in indirect:
                raise _indirect_error(prog, insn)
            return [(t, False) for t in indirect[insn.addr]]
        if m in T.RETURNS:
            return [(None, False)]
        return None

    def taken_extra(insn):
        if T.is_cond_branch(insn.mnem):
            return T.branch_taken_extra(fam)
        if insn.mnem in T.SKIPS:
            return T.skip_extra(fam, prog.insns[insn.end].size)
        return 0

    def callee(insn):
        if insn.mnem in ("call", "rcall") and insn.target != insn.end:
            return insn.target
        if insn.mnem in ("icall", "eicall"):
            targets = indirect.get(insn.addr)
            if targets is None:
                raise _indirect_error(prog, insn)
            return tuple(targets)
        return None

    return cfg.Isa(fetch, exits, taken_extra, callee)


def build_region(prog, start, fam, indirect=None):
    """Blocks, edges (with taken/skip extra cycles) and call sites of the region starting at `start`."""
    return cfg.build_region(prog, start, isa(prog, start, fam, indirect or {}))


def block_base_cycles(block, fam, prog):
    """Cycles of a block's own instructions (branches/skips not taken, callees excluded)."""
    return sum(T.cycles(fam, i.mnem, f" at {prog.describe(i.addr)}") for i in block.insns)
