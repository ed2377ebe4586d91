"""ARM7TDMI instruction timings (ARM7TDMI TRM, DDI 0210C, chapter 6) with zero-wait-state memory.

One home for the cost model that both sides charge: the qemu-arm runner sums it over every executed
instruction (the measured figure) and the OTAWA adapter hands it, per address, to its block-time
plugin (the bound). With zero-wait memory (LPC2138 at 60 MHz, MAM fully on, SRAM and flash both
single-cycle) S, N and I cycles each take one clock, so an instruction costs its S+N+I count:

| class | TRM cycles | clocks |
|---|---|---|
| data processing | 1S (+1I register-specified shift) (+1S+1N writing the PC) | 1 (+1) (+2) |
| MUL / MLA | 1S+mI / 1S+(m+1)I, m <= 4 (early termination; the worst, m = 4, is charged) | 5 / 6 |
| UMULL, SMULL / UMLAL, SMLAL | 1S+(m+1)I / 1S+(m+2)I, m <= 4 | 6 / 7 |
| LDR, LDRB, LDRH, LDRSB, LDRSH | 1S+1N+1I (+1S+1N loading the PC) | 3 (5) |
| STR, STRB, STRH | 2N | 2 |
| LDM, POP of n registers | nS+1N+1I (+1S+1N with the PC) | n+2 (n+4) |
| STM, PUSH of n registers | (n-1)S+2N | n+1 |
| SWP, SWPB | 1S+2N+1I | 4 |
| B, BL, BX | 2S+1N | 3 |
| SWI (SVC) | 2S+1N | 3 |
| MRS, MSR | 1S | 1 |

Every instruction is charged as if its condition passed and its branch was taken (a failed
condition costs 1S, an untaken branch 1S: never more), and multiplies at m = 4: a per-instruction
worst case, identical on the bound and the measured side. A mnemonic outside these classes has no
cost; the caller refuses it rather than guess.
"""

import re
from typing import Dict, List, Optional, Tuple

CONDS = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
_COND = rf"(?:{CONDS})?"
_DATA_OPS = "and|eor|sub|rsb|add|adc|sbc|rsc|orr|mov|bic|mvn|lsl|lsr|asr|ror|rrx|neg|cpy|adr|nop"
_COMPARE_OPS = "tst|teq|cmp|cmn"
_SHIFT_BY_REGISTER_RE = re.compile(r"\b(?:lsl|lsr|asr|ror)\s+(?:r\d+|fp|ip|sp|lr|sl|sb)$")
_REG_RE = re.compile(r"^(?:r\d+|fp|ip|sp|lr|pc|sl|sb)$")
_CLASSES = [  # (mnemonic pattern, class); s and condition suffixes in either order (UAL or pre-UAL)
    (re.compile(rf"^(?:pop|ldm(?:ia|ib|da|db|fd|fa|ed|ea)?){_COND}(?:ia|ib|da|db|fd|fa|ed|ea)?$"), "ldm"),
    (re.compile(rf"^(?:push|stm(?:ia|ib|da|db|fd|fa|ed|ea)?){_COND}(?:ia|ib|da|db|fd|fa|ed|ea)?$"), "stm"),
    (re.compile(rf"^swpb?{_COND}b?$"), "swp"),
    (re.compile(rf"^ldr(?:b|h|sb|sh|t|bt)?{_COND}(?:b|h|sb|sh|t|bt)?$"), "ldr"),
    (re.compile(rf"^str(?:b|h|t|bt)?{_COND}(?:b|h|t|bt)?$"), "str"),
    (re.compile(rf"^(?:mul|mla){_COND}s?{_COND}$"), "mul"),
    (re.compile(rf"^(?:umull|smull|umlal|smlal){_COND}s?{_COND}$"), "mull"),
    (re.compile(rf"^(?:b|bl|bx){_COND}$"), "branch"),
    (re.compile(rf"^(?:svc|swi){_COND}$"), "swi"),
    (re.compile(rf"^(?:mrs|msr){_COND}$"), "psr"),
    (re.compile(rf"^(?:{_COMPARE_OPS}){_COND}p?$"), "compare"),
    (re.compile(rf"^(?:{_DATA_OPS})s?{_COND}s?$"), "data"),
]


def instruction_class(mnemonic) -> Optional[str]:
    """The TRM timing class of an objdump mnemonic (UAL, `.n`/`.w` width suffixes dropped), or None."""
    mnem = re.sub(r"\.[nw]$", "", mnemonic.lower())
    for pattern, name in _CLASSES:
        if pattern.match(mnem):
            return name
    return None


def register_list(operands) -> List[str]:
    """The registers of an LDM/STM/PUSH/POP list, ranges expanded: `{r4, r5, fp, lr}`, `{r4-r7}`."""
    inside = operands[operands.index("{") + 1:operands.index("}")]
    names = []
    for item in (part.strip() for part in inside.split(",") if part.strip()):
        low, _, high = item.partition("-")
        names += [f"r{k}" for k in range(int(low.strip()[1:]), int(high.strip()[1:]) + 1)] if high else [item]
    return names


def register_count(operands) -> int:
    """Registers in an LDM/STM/PUSH/POP list."""
    return len(register_list(operands))


def cycles(mnemonic, operands) -> Optional[int]:
    """Clocks of one instruction at zero wait states, worst case of its class; None if unknown."""
    kind = instruction_class(mnemonic)
    ops = [o.strip() for o in re.split(r",(?![^{]*\})", operands.split(";")[0]) if o.strip()]
    writes_pc = bool(ops) and ops[0] == "pc"
    if kind == "data":
        shift = 1 if _SHIFT_BY_REGISTER_RE.search(operands.strip()) or shift_alias_by_register(mnemonic, ops) else 0
        return 1 + shift + (2 if writes_pc else 0)
    if kind in ("ldm", "stm"):
        n = register_count(operands)
        if kind == "stm":
            return n + 1
        return n + 2 + (2 if re.search(r"[{,]\s*pc\s*[,}]", operands) else 0)
    fixed = {"compare": 1, "str": 2, "swp": 4, "branch": 3, "swi": 3, "psr": 1,
             "ldr": 5 if writes_pc else 3}
    if kind in fixed:
        return fixed[kind]
    if kind == "mul":
        return 5 if mnemonic.lower().startswith("mul") else 6
    if kind == "mull":
        return 7 if "mlal" in mnemonic.lower() else 6
    return None


def shift_alias_by_register(mnemonic, ops) -> bool:
    """`lsl r0, r1, r2` (UAL alias of `mov r0, r1, lsl r2`): the shift amount is a register."""
    return (re.match(r"^(?:lsl|lsr|asr|ror)", mnemonic.lower()) is not None and len(ops) >= 2
            and _REG_RE.match(ops[-1]) is not None)


_INSN_RE = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")


def cost_table(objdump_text) -> Tuple[Dict[int, int], List[Tuple[int, str]]]:
    """({address: clocks}, [(address, text) of instructions without a class]) from
    `objdump -d --no-show-raw-insn`.

    Data words (`.word`), undefined encodings and unknown classes get no cost: whoever reaches
    them (owcet's block time, an executed block under qemu-arm) stops with that address.
    """
    table, unknown = {}, []
    for line in objdump_text.splitlines():
        m = _INSN_RE.match(line)
        if not m:
            continue
        body = re.split(r"\s[@;]", m.group(2), maxsplit=1)[0].strip()
        if not body or body.startswith(".") or "UNDEFINED" in body:
            continue
        mnemonic, operands = (body.split(None, 1) + [""])[:2]
        cost = cycles(mnemonic, operands.strip())
        if cost is None:
            unknown.append((int(m.group(1), 16), body))
        else:
            table[int(m.group(1), 16)] = cost
    return table, unknown


def render_table(table) -> str:
    """The plugin's input: one `ADDRESS CYCLES` line per instruction (hex address, decimal cycles)."""
    return "".join(f"{addr:x} {table[addr]}\n" for addr in sorted(table))
