"""Cortex-M4 and Cortex-M0+ instruction timings at zero wait states, from the cores' Technical
Reference Manuals: the cost model the qemu-system-arm runner charges every executed instruction
and the builtin-thumb2 WCET analyzer (nnbuild/wcet/thumb2_*.py) charges every instruction of the
program: one home, read by both.

Sources (the TRMs count cycles for a system with zero-wait-state memory):
- Cortex-M4: ARM DDI 0439B, Cortex-M4 Technical Reference Manual r0p1, section 3.3.1
  "Cortex-M4 instruction set summary", Table 3-1 (integer and DSP), and section 7.2.3 "FPU
  instruction set", Table 7-1 (floating point). P is "the number of cycles required for a pipeline
  refill. This ranges from 1 to 3 depending on the alignment and width of the target instruction,
  and whether the processor manages to speculate the address early": charged at its worst, 3.
  N is the number of registers (of 32-bit words for VLDM/VSTM/VPUSH/VPOP).
- Cortex-M0+: ARM DDI 0484C, Cortex-M0+ Technical Reference Manual r0p1, section 3.3
  "Cortex-M0+ instruction summary", Table 3-1; the multiplier is an implementation option (MULS
  1 cycle with the fast multiplier, 32 with the small one): `cortex-m0plus` is the fast one (the
  RP2040's, RP2040 datasheet section 2.4.1), `cortex-m0plus-smallmul` the 32-cycle one.
- `cortex-m4-flash-dcode`: the Cortex-M4 table plus one cycle per 32-bit word a load may read from
  the STM32F4's flash. Code and constants (weights) share the flash at zero wait states; a data read
  through the D-Code bus and an instruction fetch through the I-Code bus in the same cycle are served
  D-Code first (RM0090 section 3.5.2 "Adaptive real-time memory accelerator (ART Accelerator)":
  "accesses through the AHB data bus D-Code have priority over accesses through the AHB instruction
  bus I-Code"), so a load from flash can hold up the next fetch by one cycle. The table cannot tell
  which loads read the flash, so every load word is charged one more cycle unless its base is SP
  (the stack is in SRAM): LDR*/LDREX 1 word, LDRD 2, LDM N, VLDR 1 (.64: 2), VLDM N words; POP,
  VPOP and LDM/VLDM through SP nothing extra.

| class (examples) | Cortex-M4 | Cortex-M0+ |
|---|---|---|
| data processing, compare, move, extend, bit field, saturate, reverse, CLZ, IT, NOP | 1 (1+P writing the PC) | 1 (2 writing the PC) |
| MUL, MLA, MLS, UMULL, SMULL, UMLAL, SMLAL, the DSP multiplies (SMLAD, SMUAD, SMLA<x><y>, ...) | 1 | MULS 1 or 32 |
| SDIV, UDIV | 2-12: 12 | - |
| LDR*, STR* (one register), LDREX, STREX | 2 (LDR to the PC: 2+P) | 2 |
| LDRD, STRD | 3 (1+N, N = 2) | - |
| LDM, POP / STM, PUSH of N registers | 1+N (1+N+P with the PC) | 1+N (POP with the PC: 3+N) |
| B, BL, BX, BLX | 1+P | B, BX, BLX 2; BL 3 |
| B<cond>, CBZ, CBNZ | 1 not taken, 1+P taken | 1 not taken, 2 taken |
| TBB, TBH | 2+P | - |
| MRS, MSR; DMB, DSB, ISB | 1; 1+B, B = 0 (no bus transaction pending): 1 | 3; 3 |
| VADD, VSUB, VMUL, VNMUL, VABS, VNEG, VCMP(E), VCVT*, VMOV (immediate, register, core<->single), VMRS, VMSR | 1 | - |
| VMOV of two core registers | 2 | - |
| VMLA, VMLS, VNMLA, VNMLS, VFMA, VFMS, VFNMA, VFNMS | 3 | - |
| VDIV, VSQRT | 14 | - |
| VLDR, VSTR | 2 (.64: 3) | - |
| VLDM, VSTM, VPUSH, VPOP | 1+N | - |

A conditional branch is charged its taken cost when the next executed address is not the one after
it (the runner sees it in the exec log), its not-taken cost else; any other instruction costs its
count whether or not an IT block skips it (a skipped instruction takes no more than executed: the
worst case of the instruction). Loads are charged unpipelined (the TRM's 2: an adjacent load or
store may take one less), a refill its worst P. Everything else - SVC, BKPT, WFI, UDF, coprocessor
and unknown encodings, literal words - has no cost: whoever charges it stops with its address.
"""

import functools
import re
from typing import Dict, List, Optional, Tuple

CONDS = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
#: the worst pipeline refill of the Cortex-M4 (TRM Table 3-1, P = 1..3)
M4_REFILL = 3
_COND_RE = re.compile(rf"^(?P<base>.+?)(?P<cond>{CONDS})?$")

#: base mnemonics (condition and S suffixes off) by class
_DATA = set("""mov mvn add adc sub sbc rsb and orr orn eor bic lsl lsr asr ror rrx neg cmp cmn tst teq adr
movw movt addw subw cpy nop
sxtb sxth uxtb uxth sxtab sxtah uxtab uxtah sxtb16 uxtb16 sxtab16 uxtab16 rev rev16 revsh rbit clz
bfi bfc ubfx sbfx ssat usat ssat16 usat16 sel pkhbt pkhtb sadd16 sadd8 ssub16 ssub8 sasx ssax uadd16
uadd8 usub16 usub8 uasx usax qadd qsub qdadd qdsub qadd16 qadd8 qsub16 qsub8 qasx qsax uqadd16 uqadd8
uqsub16 uqsub8 uqasx uqsax shadd16 shadd8 shsub16 shsub8 shasx shsax uhadd16 uhadd8 uhsub16 uhsub8
uhasx uhsax usad8 usada8 yield sev cpsid cpsie""".split()) | {
    "it" + tail for tail in ("", "t", "e", "tt", "te", "et", "ee", "ttt", "tte", "tet", "tee", "ett", "ete", "eet",
                             "eee")}
_MUL = set("""mul mla mls umull smull umlal smlal umaal smulbb smulbt smultb smultt smulwb smulwt smlabb
smlabt smlatb smlatt smlawb smlawt smlalbb smlalbt smlaltb smlaltt smlad smladx smlsd smlsdx smuad
smuadx smusd smusdx smlald smlaldx smlsld smlsldx smmul smmulr smmla smmlar smmls smmlsr""".split())
_LOAD = set("ldr ldrb ldrh ldrsb ldrsh ldrt ldrbt ldrht ldrsbt ldrsht ldrex ldrexb ldrexh".split())
_STORE = set("str strb strh strt strbt strht strex strexb strexh".split())
_FP1 = set("""vadd vsub vmul vnmul vabs vneg vcmp vcmpe vcvt vcvtr vcvtb vcvtt vmrs vmsr""".split())
_FP3 = set("vmla vmls vnmla vnmls vfma vfms vfnma vfnms".split())
_FP14 = set("vdiv vsqrt".split())


@functools.lru_cache(maxsize=None)   # a handful of mnemonics, asked for once per instruction
def split_mnemonic(mnemonic) -> Tuple[str, Optional[str]]:
    """(base, condition) of an objdump mnemonic: width (.n/.w) and data-type (.f32, .s32.f32)
    suffixes and the flag-setting `s` dropped, in either UAL order (`addseq`, `addeqs`)."""
    mnem = mnemonic.lower().split(".")[0]
    if mnem in _DATA | _MUL | _LOAD | _STORE | _FP1 | _FP3 | _FP14 or _known_other(mnem):
        return mnem, None
    m = _COND_RE.match(mnem)
    base, cond = m.group("base"), m.group("cond")
    for candidate in (base, base[:-1] if base.endswith("s") else None):
        if candidate and (candidate in _DATA | _MUL | _LOAD | _STORE | _FP1 | _FP3 | _FP14 or _known_other(candidate)):
            return candidate, cond
    if mnem.endswith("s") and (mnem[:-1] in _DATA | _MUL or _known_other(mnem[:-1])):
        return mnem[:-1], None
    return mnem, None


def _known_other(base):
    return base in ("b", "bl", "bx", "blx", "cbz", "cbnz", "tbb", "tbh", "ldrd", "strd", "ldm", "ldmia", "ldmfd",
                    "ldmdb", "ldmea", "stm", "stmia", "stmea", "stmdb", "stmfd", "push", "pop", "sdiv", "udiv",
                    "mrs", "msr", "dmb", "dsb", "isb", "vldr", "vstr", "vldm", "vldmia", "vldmdb", "vstm",
                    "vstmia", "vstmdb", "vpush", "vpop", "vmov")


def register_list(operands) -> List[str]:
    """The registers of an LDM/STM/PUSH/POP/VPUSH/VLDM list, ranges expanded: `{r4, r5, lr}`,
    `{r4-r7}`, `{d8-d9}`, `{s16-s19}`."""
    inside = operands[operands.index("{") + 1:operands.index("}")]
    names = []
    for item in (part.strip() for part in inside.split(",") if part.strip()):
        low, _, high = item.partition("-")
        if high:
            prefix = low.strip()[0]
            names += [f"{prefix}{k}" for k in range(int(low.strip()[1:]), int(high.strip()[1:]) + 1)]
        else:
            names.append(item)
    return names


def _words(registers):
    """32-bit words moved by a register list (a d register is two)."""
    return sum(2 if r.startswith("d") else 1 for r in registers)


def _operands(operands):
    return [o.strip() for o in re.split(r",(?![^{]*\})", operands.split(";")[0]) if o.strip()]


def _writes_pc(ops):
    return bool(ops) and ops[0] == "pc"


def flash_read_words(mnemonic, operands) -> int:
    """32-bit words a load may read from anywhere but the stack: 0 for stores, non-memory
    instructions and loads based on SP (POP, VPOP, LDR rX, [sp, #n], LDM sp!)."""
    base, _cond = split_mnemonic(mnemonic)
    ops = _operands(operands)
    if base in ("pop", "vpop"):
        return 0
    if base in _LOAD or base in ("ldrd", "vldr"):
        address = next((o for o in ops if o.startswith("[")), "")
        if re.match(r"\[\s*sp\b", address):
            return 0
        return 2 if base == "ldrd" or (base == "vldr" and ops and ops[0].startswith("d")) else 1
    if base in ("ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "vldm", "vldmia", "vldmdb"):
        if ops and re.match(r"sp\b", ops[0]):
            return 0
        return _words(register_list(operands))
    return 0


def m4_cycles(mnemonic, operands, flash_read=0) -> Optional[Tuple[int, int]]:
    """Cortex-M4 (not taken, taken) clocks of one instruction; None if the table has no row for it.
    `flash_read`: extra clocks per word a load may read from flash (flash_read_words)."""
    cost = _m4_core_cycles(mnemonic, operands)
    if cost is None or not flash_read:
        return cost
    extra = flash_read * flash_read_words(mnemonic, operands)
    return cost[0] + extra, cost[1] + extra


def _m4_core_cycles(mnemonic, operands) -> Optional[Tuple[int, int]]:
    """The Cortex-M4 TRM's (not taken, taken) clocks at zero wait states."""
    base, cond = split_mnemonic(mnemonic)
    ops = _operands(operands)
    p = M4_REFILL
    if base in _DATA:
        return (1, 1) if not _writes_pc(ops) else (1 + p, 1 + p) if cond is None else (1, 1 + p)
    if base in _MUL:
        return 1, 1
    if base in ("sdiv", "udiv"):
        return 12, 12
    if base in _LOAD:
        return (2, 2) if not _writes_pc(ops) else (2 + p, 2 + p) if cond is None else (2, 2 + p)
    if base in _STORE:
        return 2, 2
    if base in ("ldrd", "strd"):
        return 3, 3
    if base in ("ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "pop"):
        regs = register_list(operands)
        return (1 + len(regs), 1 + len(regs)) if "pc" not in regs else (
            (1 + len(regs) + p,) * 2 if cond is None else (1 + len(regs), 1 + len(regs) + p))
    if base in ("stm", "stmia", "stmea", "stmdb", "stmfd", "push"):
        return 1 + len(register_list(operands)), 1 + len(register_list(operands))
    if base in ("b", "cbz", "cbnz"):
        return (1, 1 + p) if cond is not None or base != "b" else (1 + p, 1 + p)
    if base in ("bl", "bx", "blx"):
        return (1 + p, 1 + p) if cond is None else (1, 1 + p)
    if base in ("tbb", "tbh"):
        return 2 + p, 2 + p
    if base in ("mrs", "msr", "dmb", "dsb", "isb"):
        return 1, 1
    if base in _FP1:
        return 1, 1
    if base in _FP3:
        return 3, 3
    if base in _FP14:
        return 14, 14
    if base == "vmov":
        core = [o for o in ops if re.fullmatch(r"r\d+|fp|ip|sl|sb|lr", o)]
        return (2, 2) if len(core) == 2 else (1, 1)
    if base in ("vldr", "vstr"):
        return (3, 3) if ops and ops[0].startswith("d") else (2, 2)
    if base in ("vldm", "vldmia", "vldmdb", "vstm", "vstmia", "vstmdb", "vpush", "vpop"):
        n = _words(register_list(operands))
        return 1 + n, 1 + n
    return None


def m0plus_cycles(mnemonic, operands, multiply=1) -> Optional[Tuple[int, int]]:
    """Cortex-M0+ (not taken, taken) clocks of one ARMv6-M instruction; None if the table has no row
    for it (every ARMv7-M-only instruction among them)."""
    base, cond = split_mnemonic(mnemonic)
    ops = _operands(operands)
    if base in ("mov", "mvn", "add", "adc", "sub", "sbc", "rsb", "and", "orr", "eor", "bic", "lsl", "lsr",
                "asr", "ror", "neg", "cmp", "cmn", "tst", "adr", "cpy", "nop", "sxtb", "sxth", "uxtb", "uxth",
                "rev", "rev16", "revsh", "yield", "sev", "cpsid", "cpsie"):
        return (2, 2) if _writes_pc(ops) else (1, 1)
    if base == "mul":
        return multiply, multiply
    if base in ("ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "str", "strb", "strh"):
        return 2, 2
    if base in ("ldm", "ldmia", "ldmfd", "stm", "stmia", "stmea", "push"):
        return 1 + len(register_list(operands)), 1 + len(register_list(operands))
    if base == "pop":
        regs = register_list(operands)
        return (3 + len(regs),) * 2 if "pc" in regs else (1 + len(regs),) * 2
    if base == "b":
        return (1, 2) if cond is not None else (2, 2)
    if base == "bl":
        return 3, 3
    if base in ("bx", "blx"):
        return 2, 2
    if base in ("mrs", "msr", "dmb", "dsb", "isb"):
        return 3, 3
    return None


#: the cost models a board can name (`instruction_timing`): (mnemonic, operands) -> (not taken, taken)
MODELS = {
    "cortex-m4": m4_cycles,
    "cortex-m4-flash-dcode": lambda mnemonic, operands: m4_cycles(mnemonic, operands, flash_read=1),
    "cortex-m0plus": m0plus_cycles,
    "cortex-m0plus-smallmul": lambda mnemonic, operands: m0plus_cycles(mnemonic, operands, multiply=32),
}

_INSN_RE = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")


def cost_table(objdump_text, model) -> Tuple[Dict[int, Tuple[int, int, int]], List[Tuple[int, str]]]:
    """({address: (not-taken clocks, taken clocks, address of the next instruction)}, [(address,
    text) of instructions the table has no row for]) from `objdump -d --no-show-raw-insn` of a
    Thumb program, with cost model `model` (a MODELS name).

    Literal words (`.word`), undefined encodings and instructions without a row get no cost:
    whoever reaches them stops with that address."""
    cycles = MODELS[model]
    table, unknown, lines = {}, [], []
    for line in objdump_text.splitlines():
        m = _INSN_RE.match(line)
        if m:
            lines.append((int(m.group(1), 16), re.split(r"\s[@;]", m.group(2), maxsplit=1)[0].strip()))
    for (addr, body), following in zip(lines, lines[1:] + [(None, "")]):
        if not body or body.startswith(".") or "UNDEFINED" in body or body.startswith("<"):
            continue
        mnemonic, operands = (body.split(None, 1) + [""])[:2]
        cost = cycles(mnemonic, operands.strip())
        if cost is None:
            unknown.append((addr, body))
        else:
            table[addr] = (cost[0], cost[1], following[0])
    return table, unknown
