"""Loop bounds of a Thumb region for builtin-thumb2: the generator's flow facts mapped through the
DWARF line table, and the library loops of thumb2_libloops.json, pinned by code hash.

Loops are the AVR analyzer's (avr_loops.find_loops: Steensgaard's loop-nesting forest over the
same region shapes); a bound is a linear constraint per entry into the loop:
  ("header", N): executions of the header <= N * entries, when every header execution starts one
      pass of the body: the header does not leave the loop (the test is further down, a rotated
      loop), or it is one of its latches (a do-while in one block);
  ("back", N): back-edge traversals <= N * entries otherwise (a top-tested loop runs its header
      once more than its body; this constraint holds for every shape, it is only looser).

Library table entries ({"symbol", "sha256", "offset", "header_max" | "back_max", "justification"},
optionally "entry_regs": {"n": "r2"} with an expression bound) apply only when the function's
code hash (code_hash: the encodings, with direct branch and call targets written as symbol+offset so
that the link layout does not change it) equals the pinned one: other code is other code.
"""

import hashlib
import json
import os

from nnbuild.wcet import cfg
from nnbuild.wcet.thumb2_decode import insns_between, object_at
from nnbuild.wcet.avr_loops import _innermost, _lines, _range_owner, eval_expr, find_loops  # noqa: F401

ANALYZER = "builtin-thumb2"
TABLE_PATH = os.path.join(os.path.dirname(__file__), "thumb2_libloops.json")


def load_table(path=TABLE_PATH):
    with open(path) as f:
        return json.load(f)["loops"]


def load_value_entries(path=TABLE_PATH):
    """The table's value-fact entries: ("paths": rows over a pinned routine's block counts per call
    whose context carries a tag; "caller_tags": tags of every call from a pinned library routine)."""
    with open(path) as f:
        table = json.load(f)
    return table.get("paths", []), table.get("caller_tags", [])


#: literal words below this are addresses (placed per program by the linker), not constants
ADDRESS_WORD_LIMIT = 1 << 24


def data_hash(prog, start):
    """code_hash of the function at `start` extended by the words its pc-relative loads read (the
    constants a proof about its values leans on); a word below ADDRESS_WORD_LIMIT is an address,
    written as the bytes of the sized symbol it points to (a constant table) or left out."""
    lo, hi = prog.interval(start)
    words = []
    for insn in insns_between(prog, lo, hi):
        if insn.base == "ldr" and len(insn.ops) == 2 and insn.ops[1].startswith("[pc"):
            offset = int(insn.ops[1].strip("[]").split("#")[1], 0) if "#" in insn.ops[1] else 0
            word = prog.word(((insn.addr + 4) & ~3) + offset)
            if word is None or word < ADDRESS_WORD_LIMIT:
                table = None if word is None else object_at(prog.elf, word)
                words.append("address" if table is None else f"table {table.hex()}")
            else:
                words.append(f"{word:08x}")
    text = code_hash(prog, start) + "\n" + "\n".join(words)
    return hashlib.sha256(text.encode()).hexdigest()


def code_hash(prog, start):
    """sha256 of the function at `start`: each instruction's encoding, or for a direct branch or
    call its mnemonic and target as symbol+offset (a BL's encoding moves with the callee)."""
    lo, hi = prog.interval(start)
    parts = []
    for insn in insns_between(prog, lo, hi):
        if insn.target is not None:
            where = f"+{insn.target - lo:#x}" if lo <= insn.target < hi else prog.describe(insn.target).split(" ")[0]
            parts.append(f"{insn.mnem} {where}")
        else:
            parts.append(insn.raw)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def bound_kind(region, loop):
    """'header' or 'back' (module docstring)."""
    latches = {region.edges[i].src for i in loop.back_edges}
    return "header" if not loop.header_exits or loop.headers & latches else "back"


def _bound_by_fact(region, loop, fact, how):
    n = int(fact["max_iterations"])
    kind = "header" if fact.get("counts") == "header" else bound_kind(region, loop)
    loop.bounds.append((kind, n))
    loop.sources.append(f"flowfacts {os.path.basename(fact['file'])}:{fact['line']} max_iterations={n} "
                        f"({how}, {kind})")


def apply_flowfacts(region, loops, facts):
    """Loops whose header or latch blocks carry a fact's `for` line (innermost match); then loops
    still unbounded by the facts or the table, by the innermost fact whose line range holds all of
    their own code. Returns the indices of the facts used."""
    used = set()
    for k, fact in enumerate(facts):
        key = (os.path.basename(fact["file"]), int(fact["line"]))
        cands = [l for l in loops
                 if key in _lines(region, list(l.headers) + [region.edges[i].src for i in l.back_edges])]
        for loop in _innermost(cands):
            _bound_by_fact(region, loop, fact, "for line")
            used.add(k)
    return used


def apply_flowfact_ranges(region, loops, facts):
    used = set()
    for loop in loops:
        if not loop.bounds:
            k = _range_owner(region, loop, loops, facts)
            if k is not None:
                _bound_by_fact(region, loop, facts[k], "line range")
                used.add(k)
    return used


def apply_table(region, loops, prog, table, regs=None):
    """Bound the loops a table entry names (symbol + header offset) when the function's code hash
    is the pinned one; an "entry_regs" entry only in a region that starts at the symbol with its
    registers known at the call (`regs`: {register: value})."""
    regs = regs or {}
    for loop in loops:
        if not isinstance(loop.header, int):
            continue
        for ent in table:
            start = loop.header - int(ent["offset"])
            if ent["symbol"] not in prog.names.get(start, []):
                continue
            if code_hash(prog, start) != ent["sha256"]:
                loop.sources.append(f"table {ent['symbol']}+{int(ent['offset']):#x}: code hash differs, not applied")
                continue
            env = {var: regs.get(r) for var, r in ent.get("entry_regs", {}).items()}
            if env and (region.start != start or None in env.values()):
                loop.sources.append(f"table {ent['symbol']}+{int(ent['offset']):#x}: needs "
                                    f"{', '.join(sorted(ent['entry_regs'].values()))} known at the call")
                continue
            kind = "header" if "header_max" in ent else "back"
            value = ent[f"{kind}_max"]
            n = int(value) if not isinstance(value, str) else eval_expr(value, env)
            loop.bounds.append((kind, max(n, 0)))
            known = "".join(f" {ent['entry_regs'][v]}={x}" for v, x in sorted(env.items()))
            loop.sources.append(f"table {ent['symbol']}+{int(ent['offset']):#x}{known} {kind}_max={n}")


def require_bounds(loops, prog):
    """One line naming the function and header address of the first loop with no bound (cfg.require_bounds)."""
    cfg.require_bounds(loops, prog, ANALYZER, "flow fact or table entry")
