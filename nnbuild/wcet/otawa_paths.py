"""Infeasible-path constraints of library routines, added to OTAWA's IPET system before HiGHS solves it.

OTAWA's flow facts (F4/FFX) bound loops per entry and can `ignore` a whole block, but they cannot
say "these two loops of __aeabi_fmul together run at most 23 passes per call, but only for the calls
made on the lines where the generator proved one factor normal": OTAWA 2 keeps one CFG per routine
(no call contexts in this script) and its F4 has no linear relation between block counts. The
IPET system does: every block's execution count is a variable. nnbuild's plugin names them
(otawa::ipet::EXPLICIT: `x<index>_<cfg>`) and writes where each block is (`blocks=` map: "B cfg
index address", "S cfg index call-address callee", "-" for a routine without a label); this module adds, for each `paths` entry of
arm_libloops.json whose routine is in the program with the pinned instructions (sha256, as for
`routines`), one row over the counts of its blocks:

    sum(row[k] * x(block at blocks[k])) + sum over calls c of calls[tag(c)] * x(c) <= at_most

A call's `tag(c)` is a value tag (or "t1+t2": all of them) its source line carries (flow facts "values" of the entry's `op`:
nnbuild.numerics.float_facts) that the entry's `calls` names, or "other" (no such tag: e.g. newlib's
expf, or a build without facts); a call with several named tags takes the largest coefficient
(the smallest allowance: each tag's argument holds for it). The entry's `why` argues the row per
invocation for each tag's coefficient, so the sum over all invocations holds. Without tags the row
is implied by the loop bounds (sound either way). `caller_tags` entries give every call from a
pinned library routine (code and literal pool: newlib's __ieee754_expf) tags argued for any argument,
and their `sites` tags to the calls at given offsets only. An entry with `words` also pins literal
pool words of its routine (a wrapper's thresholds); one with `through` names the only caller of its
routine (newlib's expf wrapper of __ieee754_expf), whose call sites then stand for the routine's.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from nnbuild.errors import NNBuildError


@dataclass(frozen=True)
class CallBlock:
    cfg: str
    index: int
    call_address: int
    callee: str

    @property
    def var(self):
        return count_variable(self.cfg, self.index)


def count_variable(cfg, index):
    """OTAWA's explicit name of a block's count: x<index>_<cfg label> ("-" in the map: no label)."""
    return f"x{int(index)}_{'' if cfg == '-' else cfg}"


@dataclass
class BlockMap:
    """Where the ILP's count variables are: basic blocks by first address, call blocks by caller."""

    #: address of a basic block's first instruction -> [(cfg label, variable)]
    basic: Dict[int, List[Tuple[str, str]]]
    calls: List[CallBlock]


def read_block_map(path) -> BlockMap:
    """The plugin's `blocks=` file."""
    basic: Dict[int, List[Tuple[str, str]]] = {}
    calls = []
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        parts = raw.split()
        if len(parts) == 4 and parts[0] == "B":
            basic.setdefault(int(parts[3], 16), []).append((parts[1], count_variable(parts[1], parts[2])))
        elif len(parts) == 5 and parts[0] == "S":
            calls.append(CallBlock(parts[1], int(parts[2]), int(parts[3], 16), parts[4]))
        else:
            raise NNBuildError(f"OTAWA block map line {number} unreadable: '{raw[:60]}'", path=path)
    return BlockMap(basic, calls)


def tagged_lines(facts, op) -> List[Tuple[str, int, frozenset]]:
    """(file, line, tags) of the flow facts' "values" entries of `op`."""
    return [(v["file"], int(v["line"]), frozenset(v.get("tags", []))) for v in (facts or {}).get("values", [])
            if v.get("op") == op]


@dataclass
class PathRow:
    coefs: Dict[str, float]
    at_most: float
    routine: str
    #: call sites by the tag that set their coefficient ("other": none)
    calls: Dict[str, int]
    why: str

    def record(self):
        return {"routine": self.routine, "row": " + ".join(f"{c:g} {v}" for v, c in sorted(self.coefs.items()))
                + f" <= {self.at_most:g}", "call_sites": dict(sorted(self.calls.items())), "why": self.why}


@dataclass(frozen=True)
class CallerTags:
    """Tags every call from inside [start, end) gets, by op (a `caller_tags` entry: a library
    routine whose arguments to the soft-float calls are proved whatever its own argument), and the
    tags only the calls at some addresses get (`sites`: op -> {call address: tags})."""

    start: int
    end: int
    tags: Dict[str, Tuple[str, ...]]
    sites: Dict[str, Dict[int, Tuple[str, ...]]] = None

    def of_call(self, op, address) -> frozenset:
        """The tags of op `op` a call at `address` (inside the routine) gets."""
        site = ((self.sites or {}).get(op) or {}).get(address, ())
        return frozenset(self.tags.get(op, ())) | frozenset(site)


def caller_tags(functions, entries, digest) -> List[CallerTags]:
    """The table's `caller_tags` entries whose routine is in the program with the pinned code and
    literal data (`digest` with data: the constants are part of the proof). An entry's `sites`
    (op -> [{"offsets": [call offsets], "tags": [...]}]) tag only the calls at those offsets from the
    routine's start; an offset that is not a call of the routine is an error (the table and the
    pinned code disagree), never dropped."""
    found = []
    for entry in entries:
        for name in entry["symbols"]:
            for func in functions.get(name, []):
                if digest(func) == entry["sha256"]:
                    found.append(CallerTags(func.start, func.end,
                                            {op: tuple(tags) for op, tags in entry["tags"].items()},
                                            site_tags(func, entry)))
    return found


def site_tags(func, entry) -> Dict[str, Dict[int, Tuple[str, ...]]]:
    """op -> {call address: tags} of a `caller_tags` entry's `sites` in this copy of its routine."""
    calls = {i.addr for i in func.insns if i.mnemonic == "bl"}
    out: Dict[str, Dict[int, Tuple[str, ...]]] = {}
    for op, groups in (entry.get("sites") or {}).items():
        for group in groups:
            for offset in group["offsets"]:
                address = func.start + int(offset)
                if address not in calls:
                    raise NNBuildError(f"arm_libloops.json caller_tags {func.name}: offset {int(offset)} "
                                       f"(0x{int(offset):x}) is not a call of the routine")
                out.setdefault(op, {})[address] = tuple(out.get(op, {}).get(address, ())) + tuple(group["tags"])
    return out


def path_rows(functions, block_map: BlockMap, facts, entries, digest, same_file, line_of,
              callers: Sequence[CallerTags] = ()) -> List[PathRow]:
    """One row per `paths` entry whose routine (pinned by `digest`) has all its named blocks in the
    ILP in one CFG. `line_of(address)` is the (file, line) of an instruction, `same_file` compares a
    DWARF file name with a flow-fact one; `callers` tag the calls made from pinned library code."""
    rows = []
    for entry in entries:
        for name in entry["symbols"]:
            for func in functions.get(name, []):
                if (digest(func) != entry["sha256"] or not falls_into_pinned(functions, func, entry, digest)
                        or not words_match(func, entry)):
                    continue
                through = None
                if entry.get("through"):
                    through = only_caller(functions, func, entry["through"], block_map, digest)
                    if through is None:
                        continue
                row = routine_row(func, block_map, facts, entry, same_file, line_of, callers, through)
                if row is not None:
                    rows.append(row)
    return rows


def falls_into_pinned(functions, func, entry, digest) -> bool:
    """True unless the entry has `falls_into` (a routine entered by falling through its last
    instruction, as libgcc's __aeabi_fsub into __aeabi_fadd): then the routine starting where
    `func` ends must be one of its symbols with its sha256 (the rest of the code the row names)."""
    then = entry.get("falls_into")
    if not then:
        return True
    return any(nxt.start == func.end and digest(nxt) == then["sha256"]
               for name in then["symbols"] for nxt in functions.get(name, []))


def words_match(func, entry) -> bool:
    """The literal pool words the entry's argument reads (`words`: offset from the routine's start ->
    hex value, e.g. a wrapper's thresholds) are the routine's, besides its instructions (sha256)."""
    return all(func.words.get(func.start + int(offset)) == int(value, 16)
               for offset, value in (entry.get("words") or {}).items())


def only_caller(functions, func, through, block_map: BlockMap, digest):
    """The routine named by an entry's `through` (symbols, sha256, words) when it is the only caller
    of `func` in the ILP, calls it from one site and cannot run that call twice in one invocation (no
    branch inside it goes back to or before the call): its calls then stand for `func`'s. Else None
    (no row: the loop bounds alone stay)."""
    callee = {cfg for cfg, _ in block_map.basic.get(func.start, [])}
    for name in through["symbols"]:
        for wrapper in functions.get(name, []):
            if digest(wrapper) != through["sha256"] or not words_match(wrapper, through):
                continue
            sites = {c.call_address for c in block_map.calls if c.callee in callee}
            if len(sites) != 1 or not all(wrapper.start <= a < wrapper.end for a in sites):
                return None
            (site,) = sites
            for insn in wrapper.insns:
                target = branch_target(insn)
                if target is not None and wrapper.start <= target <= site:
                    return None
            return wrapper
    return None


def branch_target(insn) -> Optional[int]:
    """The target address of a direct branch (b, bl and their conditional forms), else None."""
    if not insn.mnemonic.startswith("b") or insn.mnemonic.startswith(("bic", "bx", "blx")):
        return None
    try:
        return int(insn.operands.split()[0], 16)
    except (ValueError, IndexError):
        return None


def routine_row(func, block_map: BlockMap, facts, entry, same_file, line_of,
                callers: Sequence[CallerTags] = (), through=None) -> Optional[PathRow]:
    """The entry's row for this copy of the routine, or None if OTAWA has no single CFG starting at
    the routine or that CFG does not hold every named block once (then no row: the loop bounds
    alone stay, still sound). Another routine's CFG may hold the same blocks (libgcc's fdiv
    branches into fmul's tail): its counts are not this routine's calls and stay out of the row."""
    own = {cfg for cfg, _ in block_map.basic.get(func.start, [])}
    if len(own) != 1:
        return None
    cfg = own.pop()
    found = {}
    for key, offset in entry["blocks"].items():
        places = [p for p in block_map.basic.get(func.start + int(offset), []) if p[0] == cfg]
        if len(places) != 1:
            return None
        found[key] = places[0]
    coefs: Dict[str, float] = {}
    for key, coef in entry["row"].items():
        var = found[key][1]
        coefs[var] = coefs.get(var, 0.0) + float(coef)
    lines = tagged_lines(facts, entry["op"])
    # a key "t1+t2" names calls whose line carries every one of the tags
    named = {key: float(coef) for key, coef in entry["calls"].items() if key != "other"}
    counts: Dict[str, int] = {}
    # with `through`, the calls of the only caller stand for this routine's (one call each)
    called = cfg
    if through is not None:
        wrappers = {c for c, _ in block_map.basic.get(through.start, [])}
        if len(wrappers) != 1:
            return None
        called = wrappers.pop()
    for call in block_map.calls:
        if call.callee != called:
            continue
        where = line_of(call.call_address)
        tags = set()
        for caller in callers:
            if caller.start <= call.call_address < caller.end:
                line_tags = caller.of_call(entry["op"], call.call_address)
                tags |= {key for key in named if set(key.split("+")) <= line_tags}
        if where:
            for file, line, line_tags in lines:
                if where[1] == line and same_file(where[0], file):
                    tags |= {key for key in named if set(key.split("+")) <= line_tags}
        tag = max(tags, key=lambda t: (named[t], t)) if tags else "other"
        counts[tag] = counts.get(tag, 0) + 1
        coef = named[tag] if tags else float(entry["calls"]["other"])
        if coef:
            coefs[call.var] = coefs.get(call.var, 0.0) + coef
    return PathRow(coefs, float(entry["at_most"]), func.name, counts,
                   f"arm_libloops.json paths {func.name} ({entry['about']}): {entry['why']}")


def add_rows(lp, rows: List[PathRow]):
    """Append the rows (`<=`) to a parsed otawa_ilp.LinearProgram; a row naming a variable the
    system does not have is an error (the block map and the ILP disagree), never dropped."""
    known = set(lp.objective) | {v for coefs, _, _ in lp.rows for v in coefs}
    for row in rows:
        missing = sorted(v for v in row.coefs if v not in known)
        if missing:
            raise NNBuildError(f"OTAWA ILP has no variable {missing[0]} for the {row.routine} path constraint")
        lp.rows.append((dict(row.coefs), "<=", row.at_most))
    return lp
