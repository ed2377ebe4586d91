"""Static stack bound of one AVR function call, from the linked ELF (no source, no .su files).

Convention (the same as the `stack=` field of nnbuild/runners/simavr_run.c): the bound counts
bytes below the SP the caller had just before its CALL instruction, i.e. the return address the
CALL pushes (2 bytes with a 16-bit PC) plus everything the function and its callees push or
reserve. AVR's SP points at the next free byte, so the call uses RAM addresses
[SP_before - bytes + 1, SP_before]. Interrupt handlers are not included.

Method: for each function reachable from the entry (CALL/RCALL targets, and jumps or
fall-throughs that leave the enclosing symbol = tail calls), a forward data flow over its
instructions with the SP depth below the function's entry SP as the value, plus a small abstract
register file so the avr-gcc frame idiom can be followed:

    in r28,0x3d ; in r29,0x3e ; subi r28,lo ; sbci r29,hi ; ... out 0x3e,r29 ; out 0x3d,r28

Registers hold "low/high byte of SP at depth d", a constant, or unknown. Pair arithmetic
(sbiw/adiw, subi+sbci, sub+sbc and add+adc with constant operands) moves a known depth; an SP
write is accepted only when both halves come from the same known depth. The libgcc
-mcall-prologues helpers __prologue_saves__/__epilogue_restores__ are analysed inline with the
caller's registers (X = frame size, Z = return point, r30 = bytes to pop).

Indirect calls: the flow facts' "indirect" entries (nnbuild.wcet.avr_indirect: by address,
function+offset, or source file+line as the v1 code shape writes them) give the possible callees
of an ICALL/EICALL (the bound takes the deepest) and the targets of an IJMP/EIJMP (tail calls).

Assumptions (avr-gcc ABI): r1 is zero at a symbol's entry and after a call, and r2-r17, r28,
r29 survive calls. Refused with NNBuildError naming the function and address: an SP write the
analysis cannot follow, ICALL/EICALL without an indirect flow fact, IJMP to a target neither the
registers nor a flow fact give, recursion, a RET or tail call at a non-zero depth, popping below
the entry SP, or two paths meeting at different depths.
"""

from nnbuild.wcet.avr_regs import reg
from nnbuild.wcet import avr_decode
from nnbuild.wcet import avr_indirect
from nnbuild.wcet import avr_timing as T
from nnbuild.wcet import stack_walk
from nnbuild.wcet.stack_walk import State

SPL, SPH = 0x3D, 0x3E          # I/O addresses of the stack pointer (data 0x5d/0x5e)
SREG = 0x3F
#: libgcc -mcall-prologues helpers, analysed inline as part of their caller
HELPERS = ("__prologue_saves__", "__epilogue_restores__")
#: registers a call may clobber (avr-gcc ABI: call-used); r1 comes back zero
CALL_USED = (0, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 30, 31)
#: instructions whose first register operand is read, not written
_NO_DEST = frozenset({"st", "std", "sts", "out", "push", "cp", "cpc", "cpi", "cpse", "sbrc",
                      "sbrs", "sbic", "sbis", "tst", "bst", "sbi", "cbi", "spm"})
_MULTIPLY = frozenset({"mul", "muls", "mulsu", "fmul", "fmuls", "fmulsu"})
_POINTERS = {"X": 26, "Y": 28, "Z": 30}
_SP_SAFE_WHILE_PENDING = frozenset({"cli", "sei", "in", "out", "nop"})


def return_address_bytes(board):
    """Bytes a CALL pushes: 2 with a 16-bit PC (<= 128 KB flash), 3 with a 22-bit PC."""
    return 3 if int((board or {}).get("flash_bytes", 0)) > 128 * 1024 else 2


def stack_bound(elf, entry, board, flowfacts=None):
    """Sound bound of the stack bytes one call of `entry` uses (return address included).

    `flowfacts` (dict, JSON path or None): the generator's flow facts; only their "indirect"
    entries are used (targets of calls through function pointers).

    Returns {"bytes", "path" (call chain to the maximum), "per_function" (own frame bytes of
    each function reached: pushes and reserved frame, callees and return address excluded),
    "return_address_bytes"}.
    """
    prog = avr_decode.load(elf, board)
    indirect = avr_indirect.indirect_targets(avr_indirect.load_flowfacts(flowfacts), prog)
    analysis = _Analysis(prog, return_address_bytes(board), indirect)
    return analysis.bound(prog.address_of(entry), analysis.ret)


class _Analysis(stack_walk.Analysis):
    """The AVR program's analyses, with the -mcall-prologues helpers inline in their callers."""

    def __init__(self, prog, ret, indirect=None):
        super().__init__(prog)
        self.ret = ret
        #: indirect call/jump address -> possible target addresses (flow facts)
        self.indirect = indirect or {}
        self.helpers = [prog.interval(prog.address_of(h)) for h in HELPERS
                        if any(s.name == h for s in prog.symbols)]

    def walk(self, func, chain):
        return _FlowWalk(self, func, chain)

    def name(self, addr):
        d = self.prog.describe(addr)
        return d.rsplit(" (", 1)[0]

    def in_helper(self, addr):
        return any(lo <= addr < hi for lo, hi in self.helpers)


def _imm(op):
    return int(op, 0) & 0xFF


def _signed16(v):
    v &= 0xFFFF
    return v - 0x10000 if v >= 0x8000 else v


def _const(regs, r):
    v = regs[r] if r is not None else None
    return v[1] if v and v[0] == "c" else None


class _FlowWalk(stack_walk.FlowWalk):
    """The AVR instructions' effect on the SP depth and the register file (State.regs: r0-r31, each
    ("lo"/"hi", depth) for a byte of the SP at that depth, ("hip", depth) for a pair's high byte
    before its carry half, ("c", int), or None)."""

    def __init__(self, analysis, func, chain):
        super().__init__(analysis, func, chain)
        self.lo, self.hi = self.prog.interval(func.start)

    def initial(self):
        regs = [None] * 32
        if self.prog.symbol_at(self.func.start) is not None:
            regs[1] = ("c", 0)         # ABI: __zero_reg__ at a public entry
        return State(0, tuple(regs))

    def decode(self, addr):
        return self.prog.insns.get(addr)

    @staticmethod
    def join(old, new):
        return tuple(x if x == y else None for x, y in zip(old, new))

    def local(self, addr):
        """True when control at `addr` stays in this function (own interval or an inline helper)."""
        return self.lo <= addr < self.hi or self.a.in_helper(addr)

    def step(self, addr, st):
        """Successors of one instruction: [(addr, state)]."""
        insn = self.fetch(addr)
        m, ops = insn.mnem, insn.ops
        depth, regs = st.depth, list(st.regs)
        if st.pending is not None and m not in _SP_SAFE_WHILE_PENDING:
            raise self.a.error(addr, f"'{m}' between the two halves of an SP write")
        pending = st.pending
        nxt = insn.end
        if m == "push":
            depth += 1
        elif m == "pop":
            depth -= 1
            regs[reg(ops[0])] = None
        elif m in ("call", "rcall"):
            if insn.target == nxt:            # rcall .+0: reserves return-address bytes
                depth += self.a.ret
            else:
                self.call(insn.target, depth + self.a.ret)
                for r in CALL_USED:
                    regs[r] = None
                regs[1] = ("c", 0)
        elif m in ("icall", "eicall"):
            targets = self.a.indirect.get(addr)
            if not targets:
                raise self.a.error(addr, f"indirect call '{m}': callee unknown")
            for target in targets:
                self.call(target, depth + self.a.ret)
            for r in CALL_USED:
                regs[r] = None
            regs[1] = ("c", 0)
        elif m in T.RETURNS:
            if depth != 0 or pending:
                raise self.a.error(addr, f"{m} at SP depth {depth} (expected 0)")
            return []
        elif m == "out" or (m == "sts" and int(ops[0], 0) in (SPL + 0x20, SPH + 0x20)):
            port = int(ops[0], 0) - (0x20 if m == "sts" else 0)
            if port in (SPL, SPH):
                depth, pending = self.sp_write(addr, port, regs[reg(ops[1])], depth, pending)
        elif m == "in":
            port = int(ops[1], 0)
            regs[reg(ops[0])] = ("lo", depth) if port == SPL else ("hi", depth) if port == SPH else None
        else:
            self.registers(insn, regs)
        if depth < 0:
            raise self.a.error(addr, "pops below the function's entry SP")
        self.peak(depth)
        return self.successors(insn, State(depth, tuple(regs), pending))

    def sp_write(self, addr, port, value, depth, pending):
        """One half of an SP write; the second half sets the depth from the register pair."""
        if pending is None:
            return depth, (port, value)
        first_port, first = pending
        lo, hi = (value, first) if port == SPL else (first, value)
        if first_port == port or not (lo and hi and lo[0] == "lo" and hi[0] == "hi" and lo[1] == hi[1]):
            raise self.a.error(addr, "SP set to a value the analysis cannot follow "
                               "(variable-size frame: alloca or a variable-length array?)")
        return lo[1], None

    def registers(self, insn, regs):
        """Abstract effect of a non-stack instruction on the register file."""
        m, ops = insn.mnem, insn.ops
        d = reg(ops[0]) if ops else None
        for op in ops:                         # ld/st with X+/-Y/...: the pointer moves
            p = op.strip("+-")
            if p in _POINTERS and op != p:
                regs[_POINTERS[p]] = regs[_POINTERS[p] + 1] = None
        if m in _MULTIPLY:                     # result in r1:r0, operands untouched
            regs[0] = regs[1] = None
        elif m in ("lpm", "elpm") and not ops:
            regs[0] = None
        elif m in ("lpm", "elpm", "ld", "ldd", "lds"):
            regs[d] = None
        elif m in _NO_DEST or d is None:
            return
        elif m in ("ldi", "ser"):
            regs[d] = ("c", 0xFF if m == "ser" else _imm(ops[1]))
        elif m in ("eor", "sub") and ops[0] == ops[1]:
            regs[d] = ("c", 0)
        elif m == "mov":
            regs[d] = regs[reg(ops[1])]
        elif m == "movw":
            s = reg(ops[1])
            regs[d], regs[d + 1] = regs[s], regs[s + 1]
        elif m in ("adiw", "sbiw"):
            k = int(ops[1], 0) * (1 if m == "sbiw" else -1)
            self.pair_set(regs, d, k, pending=False)
        elif m in ("subi", "sub", "add"):
            self.pair_first(insn, regs, d)
        elif m in ("sbci", "sbc", "adc") and regs[d] and regs[d][0] == "hip":
            regs[d] = ("hi", regs[d][1])
        else:
            regs[d] = None

    def pair_first(self, insn, regs, d):
        """subi/sub/add on the low byte of a register pair followed by its carry half."""
        m, ops = insn.mnem, insn.ops
        nxt = self.prog.insns.get(insn.end)
        carry = ("adc",) if m == "add" else ("sbci", "sbc")
        if d % 2 or not nxt or nxt.mnem not in carry or reg(nxt.ops[0]) != d + 1:
            regs[d] = None
            return
        lo = _imm(ops[1]) if m == "subi" else _const(regs, reg(ops[1]))
        hi = _imm(nxt.ops[1]) if nxt.mnem == "sbci" else _const(regs, reg(nxt.ops[1]))
        if lo is None or hi is None:
            regs[d] = None
            return
        k = _signed16((hi << 8) | lo)
        self.pair_set(regs, d, -k if m == "add" else k, pending=True)

    @staticmethod
    def pair_set(regs, d, deeper, pending):
        """Move the pair d:d+1 `deeper` bytes below where it pointed (if SP-relative)."""
        lo, hi = regs[d], regs[d + 1]
        if lo and hi and lo[0] == "lo" and hi[0] == "hi" and lo[1] == hi[1]:
            depth = lo[1] + deeper
            regs[d], regs[d + 1] = ("lo", depth), ("hip" if pending else "hi", depth)
        else:
            regs[d] = None
            if not pending:
                regs[d + 1] = None

    def successors(self, insn, st):
        """Local successors with their state; control leaving the function is a tail call."""
        m, nxt = insn.mnem, insn.end
        if T.is_cond_branch(m):
            targets = [nxt, insn.target]
        elif m in T.SKIPS:
            targets = [nxt, self.fetch(nxt).end]
        elif m in ("rjmp", "jmp"):
            targets = [insn.target]
        elif m in ("ijmp", "eijmp") and self.a.indirect.get(insn.addr):
            targets = list(self.a.indirect[insn.addr])
        elif m == "ijmp":
            z = (_const(st.regs, 30), _const(st.regs, 31))
            if None in z:
                raise self.a.error(insn.addr, "ijmp to a target the analysis cannot follow")
            targets = [2 * (z[0] | z[1] << 8)]
        elif m == "eijmp":
            raise self.a.error(insn.addr, "eijmp: target unknown")
        else:
            targets = [nxt]
        out = []
        for t in targets:
            if self.local(t):
                out.append((t, st))
            else:
                if st.depth != 0 or st.pending:
                    raise self.a.error(insn.addr, f"tail call to 0x{t:x} at SP depth {st.depth}")
                self.call(t, st.depth)
        return out
