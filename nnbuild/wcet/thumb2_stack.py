"""Static stack bound of one Cortex-M (Thumb-2, ARMv6-M and ARMv7E-M) function call, from the
linked ELF (no source, no .su files).

Convention: the bound counts bytes below the SP the caller had at its BL to the entry (a BL pushes
nothing on ARM: the return address goes to LR), i.e. everything the function and its callees push
or reserve. The stack is full-descending, so the call uses RAM addresses [SP_at_call - bytes,
SP_at_call). Exception frames (interrupts, faults) are not included.

Method: each function reachable from the entry (BL targets, flow-fact targets of BLX/BX through a
register, and branches at depth 0 to another symbol's start = tail calls; a branch into another
function's body, or one at a non-zero depth, is followed as the function's own code, as libgcc's
__aeabi_f2d shares __adddf3's tail) is decoded with capstone by
following its control flow from its entry (literal pools are never decoded), and a forward data
flow over it carries the SP depth below the function's entry SP plus a small register file
("SP at depth d", a constant, or unknown) so frame-pointer and large-frame idioms can be followed:

    push {r4-r7, lr} ; vpush {d8-d9} ; sub sp, #N ; sub.w sp, sp, #N ; subw sp, sp, #N
    stmdb sp!, {...} ; str r, [sp, #-4]! ; ldr pc, [sp], #4 ; ldmia sp!, {..., pc}
    add r7, sp, #0 ... mov sp, r7            (frame pointer)
    ldr r3, =-N ; add sp, r3                 (ARMv6-M frames beyond 508 bytes)
    movw r3, #N ; sub sp, sp, r3             (ARMv7-M frames beyond an immediate)

Returns are BX LR, POP/LDM/LDR with PC from the stack, MOV PC, LR; each must leave the SP at the
entry depth. Conditional instructions (a Bcc, CBZ/CBNZ, or anything inside an IT block) have
both successors. TBB/TBH switch tables are read from the image, their size from the `cmp rN, #K ;
bhi` guard in front of them.

Indirect calls: the flow facts' "indirect" entries (by address, function + offset, or source file
+ line through the DWARF line table, as for AVR: nnbuild.wcet.avr_indirect) give the possible
callees of a BLX rN (the bound takes the deepest) and the targets of a BX rN (tail calls).

Assumptions (AAPCS): r4-r11 survive calls. Refused with NNBuildError in one line naming the
function and address: an SP write the analysis cannot bound (a variable-size frame), a PC write it
cannot follow, an indirect call or jump without a flow fact, recursion, a return at a non-zero depth, popping above the entry SP, two paths meeting at different depths, or an
instruction capstone cannot decode.
"""

import os

from nnbuild.errors import NNBuildError
from nnbuild.wcet import avr_indirect
from nnbuild.wcet import stack_walk
from nnbuild.wcet.stack_walk import State

#: registers a call may clobber (AAPCS: r0-r3, r12 and lr)
CALL_CLOBBERED = ("r0", "r1", "r2", "r3", "ip", "lr")
_ARM_INS_B = 11          # capstone.arm.ARM_INS_B: B and every Bcc
_BRANCHES = ("b", "cbz", "cbnz", "tbb", "tbh", "bx")
#: libgcc's ARMv6-M switch helpers (gcc -Os): `bl __gnu_thumb1_case_uqi` with the table after the BL
_THUMB1_CASE = "__gnu_thumb1_case_"
#: the helpers this analysis reads the table of: entry width in bytes and signedness
_THUMB1_TABLES = {"uqi": (1, False), "sqi": (1, True), "uhi": (2, False), "shi": (2, True)}


def stack_bound(elf, entry, board=None, flowfacts=None):
    """Sound bound of the stack bytes one call of `entry` uses.

    `flowfacts` (dict, JSON path or None): the generator's flow facts; only their "indirect"
    entries are used (targets of calls through function pointers).

    Returns {"bytes", "path" (call chain to the maximum), "per_function" (own frame bytes of each
    function reached, callees excluded), "return_address_bytes" (0: BL keeps it in LR)}.
    """
    prog = _program(elf)
    facts = avr_indirect.load_flowfacts(flowfacts)
    analysis = _Analysis(prog, prog.indirect_targets(facts))
    return analysis.bound(prog.address_of(entry), 0)


_PROGRAMS = {}


def _program(elf):
    """The Program of `elf`, one per file and process (the size step bounds several entries of one
    image; a rebuilt ELF, new mtime or size, is read again)."""
    try:
        st = os.stat(elf)
    except OSError:
        return Program(elf)                          # its one-line error names the file
    key = (os.path.realpath(elf), st.st_mtime_ns, st.st_size)
    if key not in _PROGRAMS:
        if len(_PROGRAMS) >= 8:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = Program(elf)
    return _PROGRAMS[key]


class Program:
    """The linked image: its bytes, code symbols and a capstone decoder (one instruction at a time,
    where control flow leads)."""

    def __init__(self, elf):
        import capstone
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
        from nnbuild.compilers import elf as elf_file
        self.elf = str(elf)
        self.chunks = []
        try:
            with open(elf, "rb") as stream:
                image = ELFFile(stream)
                for section in image.iter_sections():
                    if section["sh_flags"] & 2 and section["sh_type"] == "SHT_PROGBITS":   # SHF_ALLOC
                        self.chunks.append((section["sh_addr"], section.data(), bool(section["sh_flags"] & 4)))
        except (OSError, ELFError) as error:
            raise NNBuildError(f"not a readable ELF file: {error}", path=self.elf) from None
        code = [s for s in elf_file.symbols(elf) if s.kind in "TtWw"]
        self.symbols = sorted(((s.addr & ~1, s.size, s.name) for s in code), key=lambda s: (s[0], s[2]))
        self.entries = {start for start, _size, _name in self.symbols}
        self.cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
        self.cs.detail = True
        self.insns = {}
        self._writes = {}
        self._lines = None

    def address_of(self, name):
        for addr, _size, sym in self.symbols:
            if sym == name:
                return addr
        raise NNBuildError(f"no function {name} in the program", path=self.elf)

    def symbol_at(self, addr):
        """(start, end, name) of the code symbol containing `addr`, or None."""
        best = None
        for start, size, name in self.symbols:
            if start > addr:
                break
            end = start + size if size else self._next_start(start)
            if start <= addr < end and (best is None or start > best[0] or (start == best[0] and end > best[1])):
                best = (start, end, name)
        return best

    def _next_start(self, start):
        return next((s for s, _size, _name in self.symbols if s > start), start + 2)

    def is_entry(self, addr):
        """True when a code symbol starts at `addr` (a function a tail call may enter)."""
        return addr in self.entries

    def describe(self, addr):
        sym = self.symbol_at(addr)
        if sym is None:
            return f"0x{addr:x}"
        return sym[2] if sym[0] == addr else f"{sym[2]}+0x{addr - sym[0]:x}"

    def read(self, addr, size, code=False):
        for base, data, executable in self.chunks:
            if base <= addr and addr + size <= base + len(data) and (executable or not code):
                return data[addr - base:addr - base + size]
        return None

    def word(self, addr, size=4):
        raw = self.read(addr, size)
        return int.from_bytes(raw, "little") if raw is not None else None

    def insn(self, addr):
        """The capstone instruction at `addr` (decoded once), or None."""
        if addr not in self.insns:
            raw = self.read(addr, 4, code=True) or self.read(addr, 2, code=True)
            self.insns[addr] = next(self.cs.disasm(raw, addr, 1), None) if raw else None
        return self.insns[addr]

    def writes(self, insn):
        """The names of the registers the capstone instruction writes (worked out once per address:
        the walk steps an instruction once per state reaching it, for every entry of the image)."""
        found = self._writes.get(insn.address)
        if found is None:
            found = self._writes[insn.address] = frozenset(insn.reg_name(r) for r in insn.regs_access()[1])
        return found

    def line_at(self, addr):
        if self._lines is None:
            from nnbuild.compilers import elf as elf_file
            self._lines = elf_file.line_lookup(self.elf)
        return self._lines.at(addr)

    def indirect_targets(self, facts):
        """{site address or (file base name, line): [target addresses]} from the 'indirect' facts."""
        out = {}
        for ent in (facts or {}).get("indirect", []):
            targets = [avr_indirect._target(self, t) & ~1 for t in ent.get("targets", [])]
            if not targets:
                continue
            if "file" in ent and "line" in ent and "address" not in ent and "offset" not in ent:
                key = (os.path.basename(ent["file"]), int(ent["line"]))
            else:
                addr = ent.get("address")
                addr = int(addr, 0) if isinstance(addr, str) else addr
                key = addr if addr is not None else self.address_of(ent["function"]) + int(ent.get("offset", 0))
            known = out.setdefault(key, [])
            known.extend(t for t in targets if t not in known)
        return out


class _Analysis(stack_walk.Analysis):
    """The program's analyses, with the indirect targets of the flow facts."""

    def __init__(self, prog, indirect):
        super().__init__(prog)
        self.indirect = indirect

    def walk(self, func, chain):
        return _FlowWalk(self, func, chain)

    def targets_of(self, addr):
        """Flow-fact targets of the indirect call or jump at `addr` (by address, else by line)."""
        if addr in self.indirect:
            return self.indirect[addr]
        if any(isinstance(k, tuple) for k in self.indirect):
            file, line = self.prog.line_at(addr)
            if file:
                return self.indirect.get((os.path.basename(file), line))
        return None


def _reg(insn, op):
    return insn.reg_name(op.reg)


def _list_bytes(insn, ops):
    """Bytes a register list moves: 4 per core or single-precision register, 8 per double (d0-d31)."""
    return sum(8 if _reg(insn, o)[0] == "d" and _reg(insn, o)[1:].isdigit() else 4 for o in ops)


class _FlowWalk(stack_walk.FlowWalk):
    """The Thumb instructions' effect on the SP depth and the register file; one state per
    (address, local return point in LR), so code a `bl label` enters from two places returns to
    each of them (libgcc's __aeabi_dmul). The register file (State.regs): sorted (name, value) pairs,
    value ("sp", depth), ("c", int) or ("ret", address after a `bl label`) for LR."""

    def __init__(self, analysis, func, chain):
        super().__init__(analysis, func, chain)
        sym = self.prog.symbol_at(func.start)
        self.lo, self.hi = (sym[0], sym[1]) if sym else (func.start, func.start + 2)
        #: addresses inside an IT block (conditional whatever their encoding says)
        self.conditional = set()

    def key(self, addr, state):
        lr = dict(state.regs).get("lr")
        return addr, lr if lr and lr[0] == "ret" else None

    @staticmethod
    def address(key):
        return key[0]

    def decode(self, addr):
        return self.prog.insn(addr)

    @staticmethod
    def join(old, new):
        return tuple(sorted(set(old) & set(new)))

    def mark_it_block(self, insn):
        """The 1-4 instructions an IT governs are conditional (the count: letters after 'i')."""
        addr = insn.address + insn.size
        for _ in range(len(insn.mnemonic) - 1):
            self.conditional.add(addr)
            addr += self.fetch(addr).size

    def step(self, addr, st):
        """Successors of one instruction: [(address, state)]."""
        insn = self.fetch(addr)
        m = "b" if insn.id == _ARM_INS_B else insn.mnemonic.split(".")[0]   # b, beq, bne.w, ...
        regs = dict(st.regs)
        nxt = addr + insn.size
        conditional = addr in self.conditional or insn.cc not in (0, 15)   # 15: AL, 0: none
        if m.startswith("it") and m[2:].strip("te") == "":
            self.mark_it_block(insn)
            return [(nxt, st)]
        writes = self.prog.writes(insn)
        depth, returns = self.sp_effect(insn, m, regs, st.depth, writes)
        if depth < 0:
            raise self.a.error(addr, "pops above the function's entry SP")
        self.peak(depth)
        out = [(nxt, st)] if conditional else []     # not executed: nothing changes
        if m == "bl" and not self.prog.is_entry(insn.operands[0].imm & ~1):
            # a BL to a label, not a function (libgcc's `bleq Lml_s`): code of this function that
            # either returns to the BL with `bx lr` or pops this function's frame and returns
            regs["lr"] = ("ret", nxt)
            return out + [(insn.operands[0].imm & ~1, State(depth, tuple(sorted(regs.items()))))]
        lr = regs.get("lr")
        if lr and lr[0] == "ret" and (m == "bx" or (m == "mov" and _reg(insn, insn.operands[0]) == "pc")) \
                and _reg(insn, insn.operands[-1]) == "lr":
            del regs["lr"]                            # back from a `bl label` to the instruction after it
            return out + [(lr[1], State(depth, tuple(sorted(regs.items()))))]
        call = self.call_effect(insn, m, regs, depth)
        if not call:
            self.registers(insn, m, regs, writes, depth)
        state = State(depth, tuple(sorted(regs.items())))
        if call and self.prog.describe(insn.operands[0].imm & ~1).startswith(_THUMB1_CASE):
            return out + [(t, state) for t in self.thumb1_case(insn)]   # it returns into a case, not to nxt
        if returns:
            if depth != 0:
                raise self.a.error(addr, f"return at SP depth {depth} (expected 0)")
            return out
        if call or ("pc" not in writes and m not in _BRANCHES):   # capstone omits PC for some branches
            return out + [(nxt, state)]
        return out + self.branch(insn, m, state, conditional)

    def sp_effect(self, insn, m, regs, depth, writes):
        """(new depth, whether this returns) of one instruction; an SP write outside the known
        idioms stops the analysis."""
        ops = insn.operands
        on_sp = bool(ops) and ops[0].type == 1 and _reg(insn, ops[0]) == "sp" and insn.writeback
        if m in ("push", "vpush") or (m in ("stmdb", "vstmdb") and on_sp):
            return depth + _list_bytes(insn, ops if m in ("push", "vpush") else ops[1:]), False
        if m in ("pop", "vpop") or (m in ("ldm", "ldmia", "vldmia", "vldm") and on_sp):
            listed = ops if m in ("pop", "vpop") else ops[1:]
            return depth - _list_bytes(insn, listed), any(_reg(insn, o) == "pc" for o in listed)
        if "sp" not in writes:
            returns = (m == "bx" and _reg(insn, ops[0]) == "lr") or (
                m == "mov" and _reg(insn, ops[0]) == "pc" and _reg(insn, ops[1]) == "lr")
            return depth, returns
        mem = [o for o in ops if o.type == 3]       # a load or store with SP writeback
        if mem and insn.writeback and insn.reg_name(mem[0].mem.base) == "sp":
            post = [o for o in ops if o.type == 2]
            moved = (-post[0].imm if post[0].subtracted else post[0].imm) if post else mem[0].mem.disp
            return depth - moved, m.startswith("ldr") and _reg(insn, ops[0]) == "pc"
        if m in ("add", "addw", "sub", "subw", "mov") and _reg(insn, ops[0]) == "sp":
            new = self.sp_arith(m, ops[1:], insn, regs, depth)
            if new is not None:
                return new, False
        raise self.a.error(insn.address, f"SP changed by '{insn.mnemonic} {insn.op_str}', which the analysis "
                           "cannot bound (a variable-size frame: alloca or a variable-length array?)")

    def sp_arith(self, m, srcs, insn, regs, depth):
        """The depth after `add/sub/mov sp, ...`, or None when the operands are not known."""
        values = []
        for o in srcs:
            if o.type == 2:
                values.append(("c", o.imm))
            elif _reg(insn, o) == "sp":
                values.append(("sp", depth))
            else:
                values.append(regs.get(_reg(insn, o)))
        if m == "mov":
            v = values[0] if values else None
            return v[1] if v and v[0] == "sp" else None
        if len(values) == 1:                           # add sp, #imm / add sp, rN: sp is a source
            values.insert(0, ("sp", depth))
        (kind, base), right = values[0], values[1]
        if kind != "sp" or not right or right[0] != "c":
            return None
        k = _signed32(right[1])
        return base - k if m.startswith("add") else base + k

    def call_effect(self, insn, m, regs, depth):
        """Account for a BL/BLX; True when the instruction is a call."""
        if m == "bl":
            self.call(insn.operands[0].imm & ~1, depth)
        elif m == "blx":
            targets = self.a.targets_of(insn.address)
            if insn.operands[0].type == 2:
                targets = [insn.operands[0].imm & ~1]
            if not targets:
                raise self.a.error(insn.address, f"indirect call '{insn.mnemonic} {insn.op_str}': callee unknown "
                                   "(no 'indirect' flow fact)")
            for target in targets:
                self.call(target, depth)
        else:
            return False
        for r in CALL_CLOBBERED:
            regs.pop(r, None)
        return True

    def registers(self, insn, m, regs, writes, depth):
        """Abstract effect of a non-call instruction on the register file."""
        ops = insn.operands
        dest = _reg(insn, ops[0]) if ops and ops[0].type == 1 else None
        value = self.value(insn, m, regs, depth) if dest in writes else None
        for r in writes:
            regs.pop(r, None)
        if value is not None and dest not in ("sp", "pc"):
            regs[dest] = value

    def value(self, insn, m, regs, depth):
        """The value written to the first operand: ("sp", depth) or ("c", int), or None."""
        ops = insn.operands
        base = m.rstrip("s") if m not in ("mvns",) else "mvn"
        srcs = []
        for o in ops[1:]:
            if o.type == 2:
                srcs.append(("c", o.imm & 0xFFFFFFFF))
            elif o.type == 1:
                srcs.append(("sp", depth) if _reg(insn, o) == "sp" else regs.get(_reg(insn, o)))
            elif o.type == 3 and m == "ldr" and insn.reg_name(o.mem.base) == "pc" and not o.mem.index:
                word = self.prog.word(((insn.address + 4) & ~3) + o.mem.disp)
                return ("c", word) if word is not None else None
            else:
                return None
        if base in ("mov", "movw") and len(srcs) == 1:
            return srcs[0]
        if base == "mvn" and srcs and srcs[0] and srcs[0][0] == "c":
            return ("c", ~srcs[0][1] & 0xFFFFFFFF)
        if base == "movt":
            low = regs.get(_reg(insn, ops[0]))
            return ("c", (low[1] & 0xFFFF) | (srcs[0][1] << 16)) if low and low[0] == "c" else None
        if base in ("add", "addw", "sub", "subw", "rsb", "neg", "lsl") and srcs:
            if len(srcs) == 1 and base != "neg":         # two-operand form: the destination is a source
                srcs.insert(0, regs.get(_reg(insn, ops[0])))
            return _arith(base, srcs)
        return None

    def branch(self, insn, m, state, conditional):
        """Successors of an instruction that writes the PC (not a call or return)."""
        addr, nxt = insn.address, insn.address + insn.size
        if m in ("b", "cbz", "cbnz"):
            targets = [insn.operands[-1].imm]
            if conditional or m != "b":
                targets.append(nxt)
        elif m in ("tbb", "tbh"):
            targets = self.switch_targets(insn, m)
        elif m in ("bx", "mov") or self.a.targets_of(addr):
            targets = self.a.targets_of(addr) or (self.jump_table(insn) if m == "mov" else None)
            if not targets:
                raise self.a.error(addr, f"indirect jump '{insn.mnemonic} {insn.op_str}': target unknown "
                                   "(no 'indirect' flow fact)")
        else:
            raise self.a.error(addr, f"PC written by '{insn.mnemonic} {insn.op_str}', which the analysis cannot follow")
        out = []
        for t in targets:
            if self.lo <= t < self.hi or state.depth != 0 or not self.prog.is_entry(t):
                # its own code, or code it shares with another function (libgcc's __aeabi_f2d jumps
                # into __adddf3's normalisation with its registers pushed): followed as its own
                out.append((t, state))
            else:
                self.call(t, 0)                      # a tail call: the callee's bound, memoised
        return out

    def guard_count(self, at, index):
        """K + 1 when, among the four instructions before `at`, `cmp index, #K` is followed by an
        unsigned guard branch (bhi/bls) and nothing after it writes `index`; else None."""
        seen_branch, addr = False, at
        for _ in range(5):
            prev = next((p for p in (self.prog.insn(addr - 4), self.prog.insn(addr - 2))
                         if p is not None and p.address + p.size == addr), None)
            if prev is None:
                return None
            name = prev.mnemonic.split(".")[0]
            if name in ("bhi", "bls"):
                seen_branch = True
            elif name == "cmp" and _reg(prev, prev.operands[0]) == index:
                return prev.operands[1].imm + 1 if seen_branch and prev.operands[1].type == 2 else None
            elif index in {prev.reg_name(r) for r in prev.regs_access()[1]}:
                return None
            addr = prev.address
        return None

    def jump_table(self, insn):
        """The targets of an ARMv6-M switch (gcc): `cmp rI, #K ; bls/bhi ; [b default ;] ldr rT, =table ;
        lsls rI, rI, #2 ; ldr rX, [rT, rI] ; mov pc, rX`: the K + 1 addresses of the table."""
        load = self.prog.insn(insn.address - 2)
        dest = _reg(insn, insn.operands[1])
        if load is None or load.mnemonic != "ldr" or _reg(load, load.operands[0]) != dest:
            return None
        mem = load.operands[1].mem
        base, offset = load.reg_name(mem.base), load.reg_name(mem.index) if mem.index else None
        table = index = None
        for back in (4, 6):
            prev = self.prog.insn(insn.address - back)
            name = prev.mnemonic if prev is not None else ""
            if name == "ldr" and _reg(prev, prev.operands[0]) == base and prev.reg_name(prev.operands[1].mem.base) == "pc":
                table = self.prog.word(((prev.address + 4) & ~3) + prev.operands[1].mem.disp)
            elif (name == "lsls" and _reg(prev, prev.operands[0]) == offset and len(prev.operands) == 3
                  and prev.operands[2].type == 2 and prev.operands[2].imm == 2):
                index = _reg(prev, prev.operands[1])
        count = self.guard_count(insn.address - 6, index) if table is not None and index else None
        if count is None:
            return None
        words = [self.prog.word(table + 4 * i) for i in range(count)]
        return None if None in words else [w & ~1 for w in words]

    def thumb1_case(self, insn):
        """The cases a `bl __gnu_thumb1_case_<kind>` returns into: the table right after the BL, as
        many entries as the `cmp r0, #K ; bhi` guard before it allows, each an offset in halfwords."""
        helper = self.prog.describe(insn.operands[0].imm & ~1)
        kind = helper[len(_THUMB1_CASE):]
        count = self.guard_count(insn.address, "r0")
        if kind not in _THUMB1_TABLES or count is None:
            raise self.a.error(insn.address, f"switch through {helper} the analysis cannot read "
                               "(a table it does not know, or no 'cmp r0, #K ; bhi' guard)")
        width, signed = _THUMB1_TABLES[kind]
        table = insn.address + insn.size
        out = []
        for i in range(count):
            raw = self.prog.read(table + width * i, width)
            if raw is None:
                raise self.a.error(insn.address, "switch table outside the image")
            out.append(table + 2 * int.from_bytes(raw, "little", signed=signed))
        return out

    def switch_targets(self, insn, m):
        """The targets of a TBB/TBH [pc, rN]: the table after it, as many entries as the `cmp rN, #K ;
        bhi` guard in front of it allows (K + 1)."""
        count = self.guard_count(insn.address, insn.reg_name(insn.operands[0].mem.index))
        if count is None:
            raise self.a.error(insn.address, f"switch table '{insn.mnemonic} {insn.op_str}' of unknown size "
                               "(no 'cmp, bhi' guard before it)")
        table, width = insn.address + 4, 1 if m == "tbb" else 2
        out = []
        for i in range(count):
            entry = self.prog.word(table + width * i, width)
            if entry is None:
                raise self.a.error(insn.address, "switch table outside the image")
            out.append(table + 2 * entry)
        return out


def _signed32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _arith(op, srcs):
    """add/sub/rsb/neg/lsl over abstract values: SP-relative plus or minus a constant, or constants."""
    if any(s is None for s in srcs):
        return None
    if op == "neg" or (op == "rsb" and len(srcs) == 2 and srcs[1] == ("c", 0)):
        return ("c", -srcs[0][1] & 0xFFFFFFFF) if srcs[0][0] == "c" else None
    (ka, a), (kb, b) = srcs[0], srcs[1]
    if op == "lsl":
        return ("c", (a << b) & 0xFFFFFFFF) if ka == kb == "c" else None
    if op == "rsb":
        (ka, a), (kb, b) = (kb, b), (ka, a)
        op = "sub"
    if kb != "c" or ka not in ("c", "sp"):
        return None
    if ka == "sp":                                   # address = entry SP - depth (+/-) b
        return ("sp", a - _signed32(b) if op.startswith("add") else a + _signed32(b))
    return ("c", (a + b if op.startswith("add") else a - b) & 0xFFFFFFFF)
