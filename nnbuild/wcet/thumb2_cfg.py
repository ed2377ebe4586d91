"""Control-flow graph of one Thumb code region for builtin-thumb2: the instruction facts
nnbuild.wcet.cfg builds it from (the graph shapes, the loop finder and the ILP serve both ISAs).

A region is the code reachable from a start address without leaving the interval between the
enclosing symbol and the next one; control that leaves it (a branch, or a fall-through into the
next symbol) is a tail node that costs the target's own region and then ends the caller's call
too. Costs: a block costs the not-taken clocks of its instructions, an edge the difference of its
branch's taken clocks (a conditional branch, CBZ/CBNZ, or a return inside an IT block) when it is
the taken way; a BL adds the callee's bound to its block.

Returns: BX LR, POP/LDM SP! with the PC, LDR PC, [SP], #4 and MOV PC, LR. Any other write of the
PC (BLX/BX to a register, TBB/TBH, MOV/ADD/LDR to the PC) needs its targets from the flow facts
("indirect") or stops the analysis naming the function and address.
"""

from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing as timing
from nnbuild.wcet import cfg
from nnbuild.wcet.thumb2_decode import insns_between, read_words

ANALYZER = "builtin-thumb2"
#: the mnemonics of indirect calls and jumps, as objdump writes them (flow facts by file + line)
INDIRECT_MNEMONICS = ("blx", "bx", "mov", "ldr", "ldr.w", "tbb", "tbh", "add")
#: control kinds of an instruction
NEXT, BRANCH, JUMP, CALL, RETURN, INDIRECT_CALL, INDIRECT_JUMP = (
    "next", "branch", "jump", "call", "return", "indirect-call", "indirect-jump")


def conditional(insn):
    return insn.base in ("cbz", "cbnz") or insn.cond not in (None, "al")


def writes_pc(insn):
    """True when the instruction may write the PC other than as a direct branch or call."""
    ops = insn.ops
    if insn.base in ("pop", "ldm", "ldmia", "ldmfd", "ldmdb", "ldmea"):
        return "pc" in timing.register_list(insn.operands)
    return bool(ops) and ops[0] == "pc"


#: the 32-bit instructions of ARMv6-M (Thumb-1 code): every other one is Thumb-2
_ARMV6M_WIDE = ("bl", "dmb", "dsb", "isb", "mrs", "msr")


def far_jump(prog, insn):
    """An unconditional BL to a label inside its own function, past its first instruction, in
    ARMv6-M code that never returns through LR: the branch gcc emits beyond B's 2 KB reach (it saves
    LR in the prologue for it and returns with POP {..., pc}); a jump, not a call. Elsewhere a BL
    to a local label calls a subroutine (libgcc's hand-written ieee754-df.S: `bleq` to a routine
    ending in BX LR, or tail-jumping to one), and Thumb-2 code reaches any label with B.W."""
    lo, hi = prog.interval(insn.addr)
    return lo < insn.target < hi and insn.cond in (None, "al") and _far_jump_shape(prog, lo, hi)


def _far_jump_shape(prog, lo, hi):
    """True for a function of ARMv6-M instructions without BX LR or MOV PC, LR (cached per function)."""
    cache = prog.__dict__.setdefault("_far_jump_shape", {})
    if lo not in cache:
        insns = insns_between(prog, lo, hi)
        cache[lo] = not any(i.base == "bx" and i.ops == ("lr",) or i.base == "mov" and i.ops == ("pc", "lr")
                            or i.size == 4 and i.base not in _ARMV6M_WIDE for i in insns)
    return cache[lo]


def control(insn, prog=None):
    """How the instruction passes control on (one of the kinds above); `prog` tells a far jump
    (far_jump) from a call."""
    b = insn.base
    if b in ("b", "cbz", "cbnz"):
        if insn.target is None:
            raise NNBuildError(f"{ANALYZER}: branch without a target at 0x{insn.addr:x}")
        return BRANCH if conditional(insn) else JUMP
    if b == "bl" and insn.target is not None:
        return JUMP if prog is not None and far_jump(prog, insn) else CALL
    if b == "blx" or b == "bl":
        return INDIRECT_CALL
    if b == "bx":
        return RETURN if insn.ops == ("lr",) else INDIRECT_JUMP
    if b in ("tbb", "tbh"):
        return INDIRECT_JUMP
    if writes_pc(insn):
        ops = insn.ops
        if b == "pop" or (b.startswith("ldm") and ops and ops[0] == "sp!"):
            return RETURN
        if b == "ldr" and len(ops) == 3 and ops[1] == "[sp]" and ops[2] == "#4":
            return RETURN
        if b == "mov" and ops == ("pc", "lr"):
            return RETURN
        return INDIRECT_JUMP
    return NEXT


def _previous(prog, insn, lo):
    """The instruction that ends right before `insn` inside the interval, or None."""
    for size in (2, 4):
        prev = prog.insns.get(insn.addr - size)
        if prev is not None and prev.end == insn.addr and prev.addr >= lo:
            return prev
    return None


def jump_table(prog, insn):
    """Targets of a compiler's bounded jump table ending in `mov pc, rY` (ARMv6-M switch code):
        cmp rX, #N ; bls S (then an unconditional branch) | bhi away
        S: ldr rT, [pc, #k] ; lsls rX, rX, #2 ; ldr rY, [rT, rX] ; mov pc, rY
    with S reached only from that branch: N + 1 words of the table rT points to. None when the
    code has another shape."""
    lo, hi = prog.interval(insn.addr)
    seq = [insn]
    for _ in range(3):
        prev = _previous(prog, seq[0], lo)
        if prev is None:
            return None
        seq.insert(0, prev)
    literal, shift, load, jump = seq
    y = jump.ops[1] if len(jump.ops) == 2 else None
    if not (load.base == "ldr" and len(load.ops) == 2 and load.ops[0] == y):
        return None
    mem = [r.strip() for r in load.ops[1].strip("[]").split(",")]
    if len(mem) != 2 or shift.base != "lsl" or shift.ops != (mem[1], mem[1], "#2"):
        return None
    x, t = mem[1], mem[0]
    if t == x or not (literal.base == "ldr" and literal.ops[0] == t and literal.ops[1].startswith("[pc")):
        return None
    start = literal.addr
    guard = _previous(prog, literal, lo)
    if guard is not None and guard.base == "b" and not conditional(guard):
        branch = _previous(prog, guard, lo)
        ok = branch is not None and branch.base == "b" and branch.cond == "ls" and branch.target == start
    else:
        branch = guard
        ok = branch is not None and branch.base == "b" and branch.cond == "hi"
    compare = _previous(prog, branch, lo) if ok else None
    if not (compare is not None and compare.base == "cmp" and len(compare.ops) == 2 and compare.ops[0] == x
            and compare.ops[1].startswith("#")):
        return None
    into = [i for i in insns_between(prog, lo, hi) if i.target is not None
            and start <= i.target <= jump.addr and i is not branch]
    table = prog.word(((literal.addr + 4) & ~3) + int(literal.ops[1].strip("[]").split("#")[1]))
    if into or table is None:
        return None
    words = read_words(prog.elf, table, int(compare.ops[1][1:], 0) + 1)
    return sorted({w & ~1 for w in words}) if words else None


def _indirect(prog, insn, indirect):
    targets = indirect.get(insn.addr)
    if targets is None and insn.base == "mov":
        targets = jump_table(prog, insn)
    if targets is None:
        raise NNBuildError(f"{ANALYZER}: indirect {insn.mnem} {insn.operands} in {prog.function_of(insn.addr)} at "
                           f"{prog.describe(insn.addr)}: targets unknown (give 'indirect' flow facts)")
    return list(targets)


def _successors(prog, insn, indirect):
    """[(address, taken?)] where control goes after `insn` inside the program (None for the exit)."""
    kind = control(insn, prog)
    if kind == BRANCH:
        return [(insn.end, False), (insn.target, True)]
    if kind == JUMP:
        return [(insn.target, True)]
    if kind == RETURN:
        return [(None, True)] + ([(insn.end, False)] if conditional(insn) else [])
    if kind == INDIRECT_JUMP:
        return [(t, True) for t in _indirect(prog, insn, indirect)]
    return None


def cost_of(prog, insn):
    """(not taken, taken) clocks, or the one line that stops the analysis."""
    if insn.cost is None:
        raise NNBuildError(f"{ANALYZER}: no cycle cost for '{insn.mnem} {insn.operands}'".rstrip() +
                           f" in {prog.function_of(insn.addr)} at {prog.describe(insn.addr)}")
    return insn.cost


def isa(prog, start, indirect):
    """The Thumb facts cfg.build_region reads, for the region starting at `start`."""

    def taken_extra(insn):
        not_taken, taken = cost_of(prog, insn)
        return taken - not_taken

    def callee(insn):
        kind = control(insn, prog)
        if kind == CALL:
            return insn.target
        if kind == INDIRECT_CALL:
            return tuple(_indirect(prog, insn, indirect))
        return None

    return cfg.Isa(lambda addr: cfg.fetch(prog, addr, start, ANALYZER), lambda insn: _successors(prog, insn, indirect),
                   taken_extra, callee)


def build_region(prog, start, indirect=None):
    """Blocks, edges (taken extras) and call sites of the region starting at `start`."""
    return cfg.build_region(prog, start, isa(prog, start, indirect or {}))


def block_cycles(prog, block):
    """Clocks of a block's own instructions, its last one not taken (callees excluded); an
    instruction in the middle is charged its worst (the runner charges it taken)."""
    total = 0
    for insn in block.insns[:-1]:
        total += max(cost_of(prog, insn))
    return total + cost_of(prog, block.last)[0]
