"""AVR register and table-entry helpers shared by the loop-bound (avr_loops), path (avr_paths) and
stack (avr_stack) analyses: which registers an instruction writes, instruction patterns, and the
context of a library-loop table entry (its call site, its entry registers)."""

from nnbuild.errors import NNBuildError


def reg(op):
    """The register number of an operand 'rN', else None."""
    return int(op[1:]) if op and op[0] == "r" and op[1:].isdigit() else None


def pattern(prog, addr, n):
    """The mnemonics of the n instructions from `addr` (fewer where the code ends)."""
    out = []
    for _ in range(n):
        insn = prog.insns.get(addr)
        if insn is None:
            break
        out.append(insn.mnem)
        addr = insn.end
    return out


_NO_WRITE = frozenset("""cp cpc cpi tst st std sts push out sbi cbi nop rjmp jmp ret reti sbrc sbrs sbic
sbis cpse bset bclr sec clc sen cln sez clz sei cli ses cls sev clv set clt seh clh bst sleep wdr break
ijmp eijmp""".split())
_POINTERS = {"X": (26, 27), "Y": (28, 29), "Z": (30, 31)}


def defs(insn):
    """Registers an instruction writes, or None when unknown (calls)."""
    m, ops = insn.mnem, insn.ops
    if m in ("call", "rcall", "icall", "eicall"):
        return None
    if m.startswith("br") and m != "break" or m in _NO_WRITE:
        out = set()
        if m == "st" and ops and ops[0].strip("+-") in _POINTERS and ops[0] not in _POINTERS:
            out.update(_POINTERS[ops[0].strip("+-")])  # st X+, st -X (std Z+q leaves Z alone)
        return out
    if m in ("mul", "muls", "mulsu", "fmul", "fmuls", "fmulsu"):
        return {0, 1}
    if m in ("lpm", "elpm") and not ops:
        return {0}
    out = set()
    r = reg(ops[0]) if ops else None
    if r is not None:
        out.add(r)
        if m in ("movw", "adiw", "sbiw"):
            out.add(r + 1)
    if m in ("ld", "lpm", "elpm") and len(ops) > 1 and ops[1].strip("+-") in _POINTERS \
            and ops[1] not in _POINTERS:
        out.update(_POINTERS[ops[1].strip("+-")])  # ld r, X+ / -X, lpm r, Z+ (ldd r, Z+q does not)
    return out


def resolve_site(prog, text):
    """Byte address of 'sym+0xoff' (None when the symbol is not in this program)."""
    sym, _, off = text.partition("+")
    try:
        return prog.address_of(sym) + (int(off, 0) if off else 0)
    except NNBuildError:
        return None


def entry_reg_numbers(ent):
    """{variable: register number} of a table entry's "entry_regs" ({} when it has none)."""
    out = {}
    for var, operand in ent.get("entry_regs", {}).items():
        r = reg(operand)
        if r is None or not 0 <= r <= 31:
            raise NNBuildError(f"builtin-avr: table entry {ent['symbol']}: bad entry register '{operand}'")
        out[var] = r
    return out


def applies(ent, prog, own, site):
    """True when a table entry's context holds for a region with active names `own` and frame
    call site `site`."""
    if not set(ent.get("within", [])) <= own:
        return False
    if "call_site" in ent:
        addr = resolve_site(prog, ent["call_site"])
        return addr is not None and addr == site
    return True
