"""OTAWA backend (`owcet`): generator flow facts -> F4 `.ff` loop bounds -> owcet -> WcetResult.

The generator knows every loop's trip count by source line; OTAWA wants bounds by loop-header
address. We map one to the other with the ELF's DWARF line table (pyelftools) and our own CFG
of the function (dominators, natural loops), then run owcet under a timeout and accept only a
clean `WCET[entry] = N cycles` line: a negative value, a non-zero exit, an `ERROR:` line or a
timeout is an NNBuildError, never a number.

With nnbuild's own script and `otawa_ilp_solver: highs`, the IPET system OTAWA writes gets the
`paths` rows of arm_libloops.json before HiGHS solves it (otawa_paths: soft-float paths that the
generator's value facts rule out; `details.ilp.path_constraints` lists them).

Timing (board key `otawa_script`): `arm7tdmi` is nnbuild's ARM7TDMI model (otawa_timing.py: the
TRM's clocks per instruction, zero-wait memory, summed per block by an OTAWA plugin); OTAWA's own
`trivial` (5 cycles/instruction) and `generic` scripts model no ARM core.
"""

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from nnbuild.compilers import elf as elf_file
from nnbuild.errors import NNBuildError
from nnbuild.runners import arm7tdmi_timing
from nnbuild.wcet import WcetResult, otawa_ilp, otawa_paths, otawa_timing, tools
from nnbuild.wcet.cfg import sccs
from nnbuild.wcet.thumb2_decode import object_at

TOOL = "owcet"
INSTALL_HINT = ("run `bash scripts/setup.sh --with-otawa` (builds OTAWA 2 with its ARM loader from "
                "../shared/third_party/otawa into nnbuild's cache), or put an OTAWA 2 bin/ on PATH")


def locate(tool=TOOL):
    """`tool` (owcet, otawa-config) on PATH, else in the OTAWA build set-up cached; None if absent."""
    return shutil.which(tool, path=tools.search_path("otawa"))
DEFAULT_SCRIPT = "trivial"

WCET_RE = re.compile(r"^WCET\[(?P<fn>[^\]]+)\] = (?P<cycles>-?\d+) cycles$", re.M)
NO_LIMIT_RE = re.compile(r"no limit for the loop at (?P<where>[^\n]*?)\.?$", re.M)


# ---------------------------------------------------------------- disassembly with line info


@dataclass
class Insn:
    addr: int
    mnemonic: str
    operands: str
    file: Optional[str] = None
    line: Optional[int] = None


@dataclass
class Function:
    name: str
    start: int
    insns: List[Insn] = field(default_factory=list)
    #: data words inside the function (`.word`: literal pools, jump tables) by address
    words: Dict[int, int] = field(default_factory=dict)

    @property
    def end(self):
        """One past the last instruction (ARM/Thumb: at most 4 bytes)."""
        return self.insns[-1].addr + 4 if self.insns else self.start


FUNC_RE = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSN_RE = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")
LINE_RE = re.compile(r"^(?P<file>\S.*?):(?P<line>\d+)(?: \(discriminator \d+\))?$")


def parse_objdump(text) -> Dict[str, List[Function]]:
    """`objdump -dl --no-show-raw-insn` text -> functions with per-instruction file:line.

    Data in code (`.word` literal pools) is skipped: it is not an instruction of the CFG.
    """
    functions: Dict[str, List[Function]] = {}
    current, file, line = None, None, None
    for raw in text.splitlines():
        m = FUNC_RE.match(raw)
        if m:
            current = Function(m.group(2), int(m.group(1), 16))
            functions.setdefault(current.name, []).append(current)
            file, line = None, None
            continue
        m = INSN_RE.match(raw)
        if m and current is not None:
            add_insn(current, int(m.group(1), 16), m.group(2), file, line)
            continue
        m = LINE_RE.match(raw)
        if m and not raw.endswith("():"):
            file, line = m.group("file"), int(m.group("line"))
    return functions


def add_insn(func, addr, body, file, line):
    """Append one decoded instruction; `.word` data is kept apart (jump tables are read from it),
    other directives and undefined words are dropped."""
    body = re.split(r"\s[@;]", body, maxsplit=1)[0].strip()
    word = re.match(r"^\.word\s+0x([0-9a-f]+)$", body)
    if word:
        func.words[addr] = int(word.group(1), 16)
    if not body or body.startswith(".") or "UNDEFINED" in body:
        return
    parts = body.split(None, 1)
    func.insns.append(Insn(addr, parts[0].lower(), parts[1].strip() if len(parts) > 1 else "",
                           file, line))


def disassemble(elf, board) -> Dict[str, List[Function]]:
    """The board's objdump decodes `elf`; each instruction gets its file:line from the DWARF line
    table (pyelftools)."""
    return with_lines(parse_objdump(disassembly(elf, board)), elf)


def with_lines(functions, elf):
    """`functions` with each instruction's file and line set from the ELF's DWARF line table."""
    lines = elf_file.line_table(elf)
    for parts in functions.values():
        for func in parts:
            for insn in func.insns:
                insn.file, insn.line = lines.at(insn.addr)
    return functions


def disassembly(elf, board) -> str:
    """The board's `objdump -d --no-show-raw-insn` text of `elf` (the decoder; lines come from DWARF)."""
    objdump = tools.which(board.get("objdump", "objdump"), target=board.get("name"),
                          hint=board.get("install_hint", "install the board's binutils"))
    done = tools.run([objdump, "-d", "--no-show-raw-insn", str(elf)],
                     timeout=tools.timeout_of(board), what=Path(objdump).name)
    if done.returncode != 0:
        raise NNBuildError(f"{Path(objdump).name} failed: {tools.one_line(done.stderr)}", path=elf)
    return done.stdout


# ---------------------------------------------------------------- ARM/Thumb control flow

CONDS = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
BRANCH_RE = re.compile(rf"^b({CONDS})?$")
CALL_RE = re.compile(rf"^blx?({CONDS})?$")
BX_RE = re.compile(rf"^bx({CONDS})?$")
COND_SUFFIX_RE = re.compile(rf"({CONDS})$")
TARGET_RE = re.compile(r"(?:^|,\s*)([0-9a-f]+) <")


@dataclass
class Flow:
    """How one instruction leaves: kind in plain/branch/call/exit, its target, conditional or not."""

    kind: str
    target: Optional[int] = None
    conditional: bool = False


def classify(insn: Insn) -> Flow:
    """Control-flow class of an ARM/Thumb instruction as objdump prints it (UAL syntax)."""
    mnem = re.sub(r"\.[nw]$", "", insn.mnemonic)
    target = TARGET_RE.search(insn.operands)
    target = int(target.group(1), 16) if target else None
    if mnem in ("cbz", "cbnz"):
        return Flow("branch", target, True)
    m = BRANCH_RE.match(mnem)
    if m:
        return Flow("branch", target, m.group(1) not in (None, "al"))
    m = CALL_RE.match(mnem)
    if m:
        return Flow("call", target, m.group(1) not in (None, "al"))
    m = BX_RE.match(mnem)
    if m:
        return Flow("exit", None, m.group(1) not in (None, "al"))
    if mnem in ("tbb", "tbh") or writes_pc(mnem, insn.operands):
        # A conditional pc write may fall through; an unknown suffix counts as a condition, so
        # the worst case is one extra fall-through edge, never a lost one.
        return Flow("exit", None, bool(COND_SUFFIX_RE.search(mnem[3:])))
    return Flow("plain")


def writes_pc(mnem, operands):
    """True for returns and indirect jumps: pop/ldm with pc in the list, or pc as destination."""
    ops = operands.replace(" ", "")
    if mnem.startswith(("pop", "ldm")):
        return re.search(r"[{,]pc[,}]", ops) is not None
    return ops.startswith("pc,") and not mnem.startswith(("str", "cmp", "cmn", "tst", "teq", "push"))


@dataclass
class Block:
    start: int
    insns: List[Insn]
    succs: List[int] = field(default_factory=list)
    #: its last instruction may leave the function (return, indirect jump, tail call)
    leaves: bool = False

    @property
    def last(self):
        return self.insns[-1]


def build_cfg(func: Function) -> Dict[int, Block]:
    """Basic blocks of `func` keyed by start address, with intra-function successor edges.

    Calls fall through (callees return); branches out of the function are tail calls and end
    the path, as do returns and indirect jumps.
    """
    insns = func.insns
    inside = {i.addr for i in insns}
    flows = [Flow("call") if k and register_call(insns[k - 1], i) else classify(i) for k, i in enumerate(insns)]
    tables = jump_tables(func)
    leaders = {insns[0].addr} if insns else set()
    for k, flow in enumerate(flows):
        if flow.kind != "plain" and k + 1 < len(insns):
            leaders.add(insns[k + 1].addr)
        if flow.kind == "branch" and flow.target in inside:
            leaders.add(flow.target)
        leaders.update(tables.get(insns[k].addr, ()))
    blocks: Dict[int, Block] = {}
    last_flow: Dict[int, Flow] = {}
    current = None
    for insn, flow in zip(insns, flows):
        if insn.addr in leaders:
            current = blocks[insn.addr] = Block(insn.addr, [])
        current.insns.append(insn)
        last_flow[current.start] = flow
    starts = sorted(blocks)
    for k, start in enumerate(starts):
        block, flow = blocks[start], last_flow[start]
        nxt = starts[k + 1] if k + 1 < len(starts) else None
        if flow.kind == "branch" and flow.target in blocks:
            block.succs.append(flow.target)
        block.leaves = flow.kind == "exit" or (flow.kind == "branch" and flow.target not in blocks)
        block.succs.extend(t for t in tables.get(block.last.addr, ()) if t not in block.succs)
        falls = flow.kind in ("plain", "call") or flow.conditional
        if falls and nxt is not None and nxt not in block.succs:
            block.succs.append(nxt)
    return blocks


def predecessors(blocks: Dict[int, Block]) -> Dict[int, List[int]]:
    """block -> the blocks with an edge to it."""
    preds: Dict[int, List[int]] = {}
    for b in blocks.values():
        for succ in b.succs:
            preds.setdefault(succ, []).append(b.start)
    return preds


def dominators(blocks: Dict[int, Block], entry: int) -> Dict[int, set]:
    """Dominator sets of the blocks reachable from `entry` (iterative data-flow, small CFGs)."""
    reach, stack = set(), [entry]
    while stack:
        b = stack.pop()
        if b not in reach:
            reach.add(b)
            stack.extend(blocks[b].succs)
    preds = predecessors(blocks)
    dom = {b: set(reach) for b in reach}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for b in sorted(reach):
            if b == entry:
                continue
            live = [p for p in preds.get(b, ()) if p in reach]
            new = set.intersection(*(dom[p] for p in live)) | {b} if live else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


@dataclass
class Loop:
    """A natural loop: its header block address and, per back edge, the address of the latch
    block's last instruction (the one that goes back to the header); `rotated` as in
    `bottom_tested` (or, for a fact's single-block loop, `runs_the_body`)."""

    function: str
    header: int
    latches: List[int]
    rotated: bool = False
    #: the loop is its header block alone, left only by its back branch falling through
    single_block: bool = False


def natural_loops(func: Function) -> List[Loop]:
    """Loops of `func` by back edge u -> h with h dominating u, grouped by header."""
    if not func.insns:
        return []
    blocks = build_cfg(func)
    dom = dominators(blocks, func.insns[0].addr)
    latch_blocks: Dict[int, List[int]] = {}
    for u in sorted(dom):
        for h in blocks[u].succs:
            if h in dom[u]:
                latch_blocks.setdefault(h, []).append(u)
    return [Loop(func.name, h, [blocks[u].last.addr for u in us], bottom_tested(blocks, h, us),
                 us == [h] and not blocks[h].leaves)
            for h, us in sorted(latch_blocks.items())]


def loop_body(blocks: Dict[int, Block], header: int, latches: Sequence[int]) -> set:
    """Blocks of the natural loop: the header and every block reaching a latch without it."""
    preds = predecessors(blocks)
    body, stack = {header}, list(latches)
    while stack:
        b = stack.pop()
        if b not in body:
            body.add(b)
            stack.extend(preds.get(b, ()))
    return body


def bottom_tested(blocks: Dict[int, Block], header: int, latches: Sequence[int]) -> bool:
    """True when the loop can only be left from a latch and never from its header.

    Then the header starts a pass and every pass ends at a latch, which either goes back or
    leaves: the header runs once per pass, so N passes per entry are N - 1 back edges (gcc's
    rotated loops, -O1 and up, the guard before the loop). A header that can leave holds the
    test (top-tested, -O0: N passes are N + 1 header runs and N back edges), and so does a loop
    left from a block that is not a latch (the test may follow the header in the same pass).
    A single-block loop (header = latch, left from it) is decided per fact by `runs_the_body`.
    """
    body = loop_body(blocks, header, latches)

    def exits(b):
        return blocks[b].leaves or any(s not in body for s in blocks[b].succs)

    return not exits(header) and all(b in latches for b in body if exits(b))


def runs_the_body(func: Function, loop: Loop, fact) -> bool:
    """A single-block loop is rotated when it holds code of the loop's body.

    The block is left only by its last instruction, the back branch, so each run executes all of
    it: with an instruction from a line other than the fact's `for` line (test and increment),
    each run is a body pass and N passes are N runs (N - 1 back edges). A block of the `for` line
    alone could be a test that runs once more than the body (`while (*p++);`), so it keeps N.
    """
    if not loop.single_block:
        return False
    end = loop.latches[0]
    return any(loop.header <= i.addr <= end and i.line is not None
               and not (i.line == fact["line"] and same_file(i.file, fact["file"])) for i in func.insns)


# ---------------------------------------------------------------- flow fact -> header address


@dataclass
class LoopBound:
    address: int
    max: int
    function: str
    source: str
    layer: Optional[str] = None
    #: body executions over one call of the entry (the fact's `total_iterations`), when known
    total: Optional[int] = None
    #: the loop is bottom-tested (`bottom_tested`): a pass is a header run, not a back edge
    rotated: bool = False

    @property
    def max_back_edges(self) -> int:
        """OTAWA's `max`: back edges per entry. N passes of a rotated loop are N - 1 of them."""
        return max(self.max - 1, 0) if self.rotated else self.max

    @property
    def total_back_edges(self) -> Optional[int]:
        """OTAWA's `total`: back edges over one call. A rotated loop's P passes over E entries
        take P - E back edges, with E >= P / N (at most N passes each), so at most
        P * (N - 1) / N; that grows with P, hence floor(T * (N - 1) / N) for P <= T."""
        if self.total is None or not self.rotated:
            return self.total
        return self.total * (self.max - 1) // self.max if self.max > 0 else 0


def same_file(dwarf_path, fact_file):
    """DWARF names the file as compiled (absolute or relative); the fact names it as generated."""
    if dwarf_path is None:
        return False
    dwarf_path, fact_file = dwarf_path.replace("\\", "/"), fact_file.replace("\\", "/")
    if "/" in fact_file:
        return dwarf_path == fact_file or dwarf_path.endswith("/" + fact_file)
    return dwarf_path.rsplit("/", 1)[-1] == fact_file


def loops_for_fact(functions, fact) -> List[Loop]:
    """Loops of the fact's function whose back-edge instruction is on the fact's `for` line.

    A `for` line holds the condition and the increment, so the latch's last instruction (the
    increment at -O0, the compare-and-branch of a rotated loop at -O2) is on that line in both
    shapes, whereas the header of a rotated outer loop can start with the inner loop's init.
    If the function is gone (inlined), every function is searched; each copy gets the bound.
    """
    candidates = functions.get(fact["function"])
    if not candidates:
        candidates = [f for fs in functions.values() for f in fs]
    found = []
    for func in candidates:
        by_addr = {i.addr: i for i in func.insns}
        for loop in natural_loops(func):
            if any(by_addr[a].line == fact["line"] and same_file(by_addr[a].file, fact["file"])
                   for a in loop.latches):
                found.append(replace(loop, rotated=True) if runs_the_body(func, loop, fact) else loop)
    return found


def on_line(insn: Insn, fact, line=None) -> bool:
    return insn.line == (fact["line"] if line is None else line) and same_file(insn.file, fact["file"])


def in_body_of(insn: Insn, fact, facts) -> bool:
    """`insn` is on a line of the fact's loop body, (line, last_line], and of no `for` nested in it."""
    lo, hi = fact["line"], fact.get("last_line")
    if hi is None or insn.line is None or not same_file(insn.file, fact["file"]) or not lo < insn.line <= hi:
        return False
    nested = [g for g in facts if g is not fact and g.get("last_line") is not None and g["file"] == fact["file"]
              and lo < g["line"] and g["last_line"] <= hi]
    return not any(g["line"] <= insn.line <= g["last_line"] for g in nested)


def irreducible_regions(blocks: Dict[int, Block], entry: int) -> List[Tuple[set, set]]:
    """(blocks, entry blocks) of every cycle region control can enter at more than one block.

    The loop nesting by strongly connected components: a component with a cycle is a loop, its
    entries are its blocks with a predecessor outside it (or the function's entry); the edges back
    to the entries are removed and the inside is decomposed again (the nested loops). A loop with
    one entry is a natural loop and gets a bound per header; one with two or more (gcc -O2's jump
    threading can test a loop's first pass before the loop and jump into the body or to the
    increment) has no header every pass goes through, and OTAWA's `loop` fact on the header its
    own search picks would not bound the passes that enter elsewhere."""
    preds = predecessors(blocks)
    succ = {b: [(s, (b, s)) for s in blocks[b].succs if s in blocks] for b in blocks}
    found, todo, removed = [], [set(blocks)], set()
    while todo:
        for component in sccs(todo.pop(), succ, removed):
            if len(component) == 1 and not any(s == b and e not in removed for b in component for s, e in succ[b]):
                continue
            entries = {b for b in component if b == entry or any(p not in component for p in preds.get(b, ()))}
            if len(entries) > 1:
                found.append((component, entries))
            removed.update(e for b in component for s, e in succ[b] if s in (entries or {min(component)}))
            todo.append(component)
    return found


def require_reducible(functions, facts, entry):
    """Refuse a loop of the generated code that control can enter at two blocks (irreducible_regions),
    before owcet stops on it or, worse, takes a bound that OTAWA's per-header constraint does not make
    sound for the passes entered elsewhere."""
    for name in sorted({f["function"] for f in facts}):
        for func in functions.get(name, []):
            if not func.insns:
                continue
            for region, entries in irreducible_regions(build_cfg(func), func.insns[0].addr):
                raise NNBuildError(irreducible_message(func, region, entries), item=entry)


def irreducible_message(func: Function, region: set, entries: set) -> str:
    """The one line that names a loop entered mid-body and says what to do (-fthread-jumps is on
    from -O1 up)."""
    blocks = build_cfg(func)
    lines = sorted({i.line for b in region for i in blocks[b].insns if i.line is not None})
    where = ", ".join(f"{func.name}+0x{e - func.start:x}" for e in sorted(entries))
    source = f" (C lines {lines[0]}-{lines[-1]})" if lines else ""
    return (f"owcet: unbounded: the loop at {where}{source} is entered at {len(entries)} blocks (gcc's jump "
            "threading made it irreducible) and no loop bound describes it; compile with -fno-thread-jumps "
            "(the arm board's cflags have it) or at -O0")


def loops_by_exit_test(func: Function, facts, bound: set) -> List[Tuple[Loop, dict]]:
    """Loops of `func` that no `for` line latches, each with the one fact whose `for` test leaves it.

    gcc -O2 may thread the test at the top of a `for` body into the loop's back edge: the latch is
    then `if (iy >= 0 && iy < H)` of the next pass (taken only while that pass does work) and the
    `for` test and increment sit in an earlier block that leaves the loop. Such a loop is the
    fact's when every latch is on a line of the fact's body outside any nested `for`, and a
    conditional branch on the fact's `for` line leaves it from its own blocks (not from a loop
    nested in it); a loop two facts fit gets neither, nor does a loop on a cycle entered mid-body
    (irreducible_regions: its natural loop is not the whole cycle). Its exits are not all latches, so it
    counts as top-tested (max = N back edges per entry), the looser reading.
    """
    loops = [l for l in natural_loops(func) if l.header not in bound]
    if not loops:
        return []
    blocks = build_cfg(func)
    by_addr = {i.addr: i for i in func.insns}
    block_of_last = {b.last.addr: s for s, b in blocks.items()}
    bodies = {l.header: loop_body(blocks, l.header, [block_of_last[a] for a in l.latches])
              for l in natural_loops(func)}
    mine = [f for f in facts if f["function"] == func.name]
    tangled = set().union(*(region for region, _ in irreducible_regions(blocks, func.insns[0].addr))) \
        if mine else set()
    found = []
    for loop in loops:
        body = bodies[loop.header]
        if body & tangled:
            continue
        own = body - set().union(*(b for h, b in bodies.items() if h != loop.header and b < body))
        latches = [by_addr[a] for a in loop.latches]
        if any(on_line(i, f) for i in latches for f in mine):
            continue
        fits = [f for f in mine if all(in_body_of(i, f, mine) for i in latches)
                and any(classify(blocks[s].last).conditional and on_line(blocks[s].last, f)
                        and any(t not in body for t in blocks[s].succs) for s in own)]
        if len(fits) == 1:
            found.append((replace(loop, rotated=False), fits[0]))
    return found


def map_loops(functions, facts) -> Tuple[List[LoopBound], List[dict]]:
    """(bounds by header address, facts that matched no loop).

    A fact is matched by the latch line (`loops_for_fact`); a loop left without a bound is then
    matched by the `for` test that leaves it (`loops_by_exit_test`). An unmatched fact is not an
    error here: if the loop still exists, owcet itself stops with "no limit for the loop", so no
    unbounded loop can slip through; if the compiler unrolled it, there is nothing to bound. Two
    different bounds on one header are an error.
    """
    require_line_info(functions, facts)
    bounds: Dict[int, LoopBound] = {}
    matches = [(fact, loops_for_fact(functions, fact)) for fact in facts]
    taken = {loop.header for _, loops in matches for loop in loops}
    for fs in functions.values():
        for func in fs:
            for loop, fact in loops_by_exit_test(func, facts, taken):
                matches.append((fact, [loop]))
    unmapped = [fact for fact in facts if not any(loops for f, loops in matches if f is fact)]
    for fact, loops in matches:
        for loop in loops:
            total = fact.get("total_iterations")
            bound = LoopBound(loop.header, int(fact["max_iterations"]), loop.function,
                              f"{fact['file']}:{fact['line']}", fact.get("layer"),
                              None if total is None else int(total), loop.rotated)
            old = bounds.get(loop.header)
            if old and old.max != bound.max:
                raise NNBuildError(f"loop at {loop.function} 0x{loop.header:x} matches {old.source} "
                                   f"(max {old.max}) and {bound.source} (max {bound.max})")
            if old and old.total != bound.total:
                old.total = None if old.total is None or bound.total is None else max(old.total, bound.total)
            if old:
                old.rotated = old.rotated and bound.rotated   # two readings of one loop: the safer
            bounds[loop.header] = old or bound
    return [bounds[a] for a in sorted(bounds)], unmapped


def require_line_info(functions, facts):
    """A fact's function without any DWARF line is a build without -g: say so, not 'unbounded'."""
    for name in sorted({f["function"] for f in facts}):
        for func in functions.get(name, []):
            if func.insns and all(i.line is None for i in func.insns):
                raise NNBuildError("no DWARF line info: compile with -g to map loop bounds",
                                   item=name)


# ---------------------------------------------------------------- computed jumps

_RETURN_RE = re.compile(r"^(pop|ldm\w*)$")


def computed_jump(insn: Insn) -> bool:
    """Whether `insn` moves the PC to a computed address that is not a return (a switch's jump table
    `ldrls pc, [pc, r3, lsl #2]`, `add pc, ...`, `bx r3`, an indirect call `blx r3`): OTAWA's CFG does
    not follow those, so its bound would leave the paths behind them out."""
    mnem = re.sub(r"\.[nw]$", "", insn.mnemonic)
    ops = insn.operands.replace(" ", "")
    if _RETURN_RE.match(mnem):
        return False
    if re.match(rf"^(bx|blx)({CONDS})?$", mnem):
        return ops != "lr" and "<" not in ops
    if re.match(rf"^(mov|ldr|add|sub)({CONDS})?s?$", mnem) and ops.startswith("pc,"):
        return ops != "pc,lr"
    return False


def register_call(prev: Optional[Insn], insn: Insn) -> bool:
    """A call through a register: ARMv4T's `mov lr, pc` then `bx rN` / `mov pc, rN` (the PC reads 8
    ahead, so lr is the instruction after the jump), or `blx rN`. It returns like any call."""
    mnem, ops = re.sub(r"\.[nw]$", "", insn.mnemonic), insn.operands.replace(" ", "")
    if mnem == "blx":
        return "<" not in ops
    linked = prev is not None and prev.mnemonic == "mov" and prev.operands.replace(" ", "") == "lr,pc"
    return linked and ((mnem == "bx" and ops != "lr") or (mnem == "mov" and ops.startswith("pc,") and ops != "pc,lr"))


def indirect_calls(functions, facts) -> Dict[int, List[int]]:
    """{address of a register call on an `indirect` flow fact's source line: its targets' addresses}.

    The generator names the functions one C call through a pointer may reach (v1's kernel and
    activation calls); every register call compiled from that line gets them (OTAWA `multicall`).
    A target that is not a function of the ELF is an error; a line without a register call is not
    (the compiler resolved or removed it), and a register call without a fact stays refused.
    """
    starts = {name: fs[0].start for name, fs in functions.items() if fs}
    found: Dict[int, List[int]] = {}
    for ent in facts.get("indirect", []):
        missing = [t for t in ent.get("targets", []) if t not in starts]
        if missing:
            raise NNBuildError(f"indirect flow fact {ent['file']}:{ent['line']}: target '{missing[0]}' is not "
                               "a function of the ELF")
        targets = [starts[t] for t in ent.get("targets", [])]
        for func in (f for fs in functions.values() for f in fs):
            for prev, insn in zip([None] + func.insns, func.insns):
                if insn.line == ent["line"] and same_file(insn.file, ent["file"]) and register_call(prev, insn):
                    known = found.setdefault(insn.addr, [])
                    known.extend(t for t in targets if t not in known)
    return found


_TABLE_JUMP_RE = re.compile(r"^pc,\[pc,(r\d+|ip|fp|lr|sl|sb),lsl#2\]$")


def jump_tables(func: Function) -> Dict[int, List[int]]:
    """{address of a switch's `ldrls pc, [pc, rI, lsl #2]`: its case targets, in table order}.

    Only gcc's bounded ARM form is resolved: the instruction right before is `cmp rI, #N`, so the
    `ls` load runs for rI in 0..N (unsigned) and reads the N+1 words at address+8 (the PC reads 8
    ahead); every word must be a `.word` of this function that is an instruction address of it.
    Anything else stays a computed jump (refused by require_no_computed_jumps).
    """
    inside = {i.addr for i in func.insns}
    found = {}
    for prev, insn in zip(func.insns, func.insns[1:]):
        m = _TABLE_JUMP_RE.match(insn.operands.replace(" ", ""))
        bound = re.match(r"^(r\d+|ip|fp|lr|sl|sb),#(\d+)$", prev.operands.replace(" ", ""))
        if not (m and insn.mnemonic == "ldrls" and prev.mnemonic == "cmp" and bound
                and bound.group(1) == m.group(1)):
            continue
        slots = [insn.addr + 8 + 4 * k for k in range(int(bound.group(2)) + 1)]
        targets = [func.words.get(a) for a in slots]
        if all(t in inside for t in targets):
            found[insn.addr] = list(dict.fromkeys(targets))
    return found


def reachable(functions, entry, calls: Optional[Dict[int, List[int]]] = None) -> List[Function]:
    """`entry` and every function it calls, transitively: `bl` targets, tail calls (`b` to a function's
    start) and the resolved register calls' targets (`calls`, from indirect_calls)."""
    by_start = {f.start: f for fs in functions.values() for f in fs}
    calls = calls or {}
    todo, seen = list(functions.get(entry, [])), {}
    while todo:
        func = todo.pop()
        if func.start in seen:
            continue
        seen[func.start] = func
        for insn in func.insns:
            flow = classify(insn)
            if flow.kind in ("call", "branch") and flow.target in by_start:
                todo.append(by_start[flow.target])   # a `b` to another function's start is a tail call
            todo.extend(by_start[t] for t in calls.get(insn.addr, ()) if t in by_start)
    return list(seen.values())


def require_no_computed_jumps(functions, entry, calls: Optional[Dict[int, List[int]]] = None):
    """Refuse any computed jump reachable from `entry` that is neither a bounded jump table nor a
    register call resolved by an `indirect` flow fact (`calls`)."""
    calls = calls or {}
    for func in reachable(functions, entry, calls):
        resolved = set(jump_tables(func)) | set(calls)
        for insn in func.insns:
            if computed_jump(insn) and insn.addr not in resolved:
                raise NNBuildError(f"owcet cannot follow the computed jump `{insn.mnemonic} {insn.operands}` at "
                                   f"{func.name}+0x{insn.addr - func.start:x} (0x{insn.addr:x}): its bound would "
                                   "miss the paths behind it, so none is taken", item=entry)


# ---------------------------------------------------------------- library loops

LIBLOOPS_PATH = Path(__file__).with_name("arm_libloops.json")
_TARGET_ADDR_RE = re.compile(r"\b[0-9a-f]+ (<[^>]+>)")


def loop_text(insn: Insn) -> str:
    """An instruction as the table writes it: mnemonic and operands, branch targets by symbol only."""
    operands = _TARGET_ADDR_RE.sub(r"\1", insn.operands)
    return f"{insn.mnemonic} {' '.join(operands.split())}".strip()


def library_bounds(functions, entry=None, calls=None, table_path=LIBLOOPS_PATH) -> List[LoopBound]:
    """Bounds of the library loops in arm_libloops.json whose routine is in the program and whose
    instructions match the entry's pattern exactly (else no bound: owcet then names the loop).
    Routines bounded by a size argument get bounds only from the call sites reachable from `entry`
    (`calls`: its resolved register calls), none without an entry."""
    with open(table_path) as f:
        table = json.load(f)
    return (loop_pattern_bounds(functions, table["loops"])
            + routine_bounds(functions, table.get("routines", []), entry, calls))


def loop_pattern_bounds(functions, entries) -> List[LoopBound]:
    """The `loops` entries: one loop each, pinned by its own instructions."""
    found = []
    for entry in entries:
        for name in entry["symbols"]:
            for func in functions.get(name, []):
                start = func.start + entry["offset"]
                body = [i for i in func.insns if i.addr >= start][:len(entry["pattern"])]
                if body and body[0].addr == start and [loop_text(i) for i in body] == entry["pattern"]:
                    found.append(LoopBound(start, int(entry["max"]), name,
                                           f"arm_libloops.json {name}+{entry['offset']:#x}: {entry['why']}"))
    return found


def library_paths(functions, block_map, facts, table_path=LIBLOOPS_PATH, elf=None) -> List[otawa_paths.PathRow]:
    """The table's `paths` rows for the routines in the ILP (otawa_paths), each call site's line
    read from the DWARF line table to match the generator's value facts; `elf` gives the bytes of
    the tables a `caller_tags` routine's literal pool points to (routine_data_digest)."""
    with open(table_path) as f:
        table = json.load(f)
    entries = table.get("paths", [])
    if not entries:
        return []
    lines = {i.addr: (i.file, i.line) for parts in functions.values() for func in parts for i in func.insns}
    callers = otawa_paths.caller_tags(functions, table.get("caller_tags", []),
                                      lambda func: routine_data_digest(func, elf))
    return otawa_paths.path_rows(functions, otawa_paths.read_block_map(block_map), facts, entries,
                                 routine_digest, same_file, lambda addr: lines.get(addr), callers)


#: literal pool words below this are addresses (of data the linker places per program), not constants
ADDRESS_WORD_LIMIT = 1 << 24


def routine_data_digest(func: Function, elf=None) -> str:
    """sha256 of a routine's instructions and of its literal pool words (the float constants it
    loads); a word below ADDRESS_WORD_LIMIT is an address: `.table <bytes>` of the sized symbol of
    `elf` it points to (newlib's halF, ln2HI, ln2LO: constants as much as the literal words), else
    `.word address`."""
    words = [f".word 0x{func.words[a]:08x}" if func.words[a] >= ADDRESS_WORD_LIMIT else pointed_table(func.words[a], elf)
             for a in sorted(func.words)]
    text = "\n".join(loop_text(i) for i in func.insns) + "\n" + "\n".join(words)
    return hashlib.sha256(text.encode()).hexdigest()


def pointed_table(address, elf) -> str:
    """A literal pool address in routine_data_digest's text: the bytes of the table it points to."""
    table = object_at(elf, address) if elf is not None else None
    return ".word address" if table is None else f".table {table.hex()}"


def routine_digest(func: Function) -> str:
    """sha256 of a routine's instructions as loop_text writes them (addresses left out, so the
    digest pins the code, not where the linker put it)."""
    return hashlib.sha256("\n".join(loop_text(i) for i in func.insns).encode()).hexdigest()


def routine_bounds(functions, entries, program_entry=None, calls=None) -> List[LoopBound]:
    """The `routines` entries: every loop of a routine whose whole code has the entry's digest and
    that only the entry's `callers` call (their arguments are part of the bounds' proof). An entry
    with a `size_register` bounds its loops from the largest constant size of its call sites."""
    found = []
    for entry in entries:
        for name in entry["symbols"]:
            for func in functions.get(name, []):
                if routine_digest(func) != entry["sha256"] or not only_called_by(functions, func, entry):
                    continue
                if "size_register" in entry:
                    found += sized_routine_bounds(functions, func, entry, program_entry, calls)
                    continue
                found += [LoopBound(func.start + loop["offset"], int(loop["max"]), name,
                                    f"arm_libloops.json {name}+{loop['offset']:#x}: {loop['why']}")
                          for loop in entry["loops"]]
    return found


def sized_routine_bounds(functions, func: Function, entry, program_entry, calls) -> List[LoopBound]:
    """Bounds of a routine whose passes follow from a size argument (memset's r2): each loop's
    `max_from_size` applied to the largest constant size over the call sites reachable from the
    program's entry. A call whose size is not a constant at the call is an NNBuildError."""
    if program_entry is None:
        return []
    register, loops = entry["size_register"], entry["loops"]
    where = f"{func.name}+{loops[0]['offset']:#x}" + (f" and {len(loops) - 1} more" if len(loops) > 1 else "")
    sizes = []
    for caller, call in call_sites(functions, func, program_entry, calls):
        size = constant_argument(caller, call, register)
        if size is None:
            raise NNBuildError(f"no bound for the loops of {func.name} ({where}): its call at "
                               f"{caller.name}+0x{call.addr - caller.start:x} (0x{call.addr:x}) passes a size "
                               f"({register}) that is not a constant", item=program_entry)
        sizes.append(size)
    if not sizes:
        return []
    size = max(sizes)
    return [LoopBound(func.start + loop["offset"], passes_for_size(loop["max_from_size"], size), func.name,
                      f"arm_libloops.json {func.name}+{loop['offset']:#x}: {loop['why']} (size {size}, the "
                      f"largest of {len(sizes)} call site{'s' if len(sizes) > 1 else ''})")
            for loop in loops]


def passes_for_size(rule, size) -> int:
    """floor(size / divisor), capped by `at_most` when the rule has one."""
    passes = size // int(rule["divisor"])
    return min(passes, int(rule["at_most"])) if "at_most" in rule else passes


def call_sites(functions, callee: Function, entry, calls=None) -> List[Tuple[Function, Insn]]:
    """(caller, instruction) of every `bl`/`b` to `callee` in the functions reachable from `entry`;
    a register call that may reach `callee` is an NNBuildError (its arguments cannot be read)."""
    for addr, targets in (calls or {}).items():
        if callee.start in targets:
            raise NNBuildError(f"{callee.name} is called through a register at 0x{addr:x}: its size "
                               "argument cannot be read, so its loops get no bound", item=entry)
    return [(func, insn) for func in reachable(functions, entry, calls) if func.start != callee.start
            for insn in func.insns
            if classify(insn).kind in ("call", "branch") and classify(insn).target == callee.start]


CALL_CLOBBERED = ("r0", "r1", "r2", "r3", "ip", "lr")
_IMMEDIATE_RE = r"#(-?(?:0x[0-9a-f]+|\d+))"


def constant_argument(func: Function, call: Insn, register) -> Optional[int]:
    """The constant `register` holds when `call` runs: its last write before the call in the call's
    basic block must be an unconditional `mov`/`mvn` of an immediate or a `ldr` from the literal
    pool; anything else (another write, no write in the block) is None, never a guess."""
    block = next(b for b in build_cfg(func).values() if call in b.insns)
    for insn in reversed(block.insns[:block.insns.index(call)]):
        if may_write(insn, register):
            return constant_written(func, insn, register)
    return None


def constant_written(func: Function, insn: Insn, register) -> Optional[int]:
    """The unsigned 32-bit constant an unconditional `mov`/`mvn rX, #imm` or `ldr rX, [pc, #off]`
    writes, else None."""
    ops = insn.operands.replace(" ", "")
    imm = re.fullmatch(rf"{register},{_IMMEDIATE_RE}", ops)
    if imm and insn.mnemonic in ("mov", "movs"):
        return int(imm.group(1), 0) & 0xFFFFFFFF
    if imm and insn.mnemonic in ("mvn", "mvns"):
        return ~int(imm.group(1), 0) & 0xFFFFFFFF
    pool = re.fullmatch(rf"{register},\[pc(?:,{_IMMEDIATE_RE})?\]", ops)
    if pool and insn.mnemonic == "ldr":
        return func.words.get(insn.addr + 8 + int(pool.group(1) or "0", 0))
    return None


def may_write(insn: Insn, register) -> bool:
    """Whether `insn` may change `register` (ARM state, objdump's UAL; classes from the ARM7TDMI
    timing table): a call's or SWI's clobbers, a written-back base, a loaded register list, else the
    destination (the first two operands of long multiplies). Compares and stores write none; an
    instruction of no known class that names the register counts as a write. Conditional writes
    count as writes."""
    mnem, ops = insn.mnemonic, insn.operands.replace(" ", "")
    kind = arm7tdmi_timing.instruction_class(mnem)
    if CALL_RE.match(mnem) or kind == "swi":
        return register in CALL_CLOBBERED
    if register in written_back_bases(ops):
        return True
    if kind == "ldm":
        return "{" not in ops or register in arm7tdmi_timing.register_list(ops)
    if kind in ("compare", "str", "stm") or not re.search(rf"(?<!\w){register}(?!\w)", ops):
        return False
    if kind is None:
        return True
    return register in ops.split(",")[:2 if kind == "mull" else 1]


def written_back_bases(ops) -> List[str]:
    """Base registers an addressing mode writes back: `[rB], ...` (post-indexed), `[rB, ...]!`
    (pre-indexed) and `rB!, {...}` (load/store multiple)."""
    return (re.findall(r"\[(\w+)\],", ops) + re.findall(r"\[(\w+)(?:,[^\]]*)?\]!", ops)
            + re.findall(r"^(\w+)!", ops))


def only_called_by(functions, func: Function, entry) -> bool:
    """True when the entry names no `callers`, or every `bl` to `func` is in one of them and each
    of them has its own table entry's code (pinned by digest)."""
    callers = entry.get("callers")
    if callers is None:
        return True
    for other in (f for fs in functions.values() for f in fs):
        calls = any(classify(i).kind == "call" and classify(i).target == func.start for i in other.insns)
        if calls and other.name not in callers:
            return False
    return all(any(routine_digest(f) == digest for f in functions.get(name, []))
               for name, digest in callers.items())


# ---------------------------------------------------------------- rendering


def render_ff(bounds: Sequence[LoopBound], entry=None, branches: Optional[Dict[int, List[int]]] = None,
              calls: Optional[Dict[int, List[int]]] = None) -> str:
    """F4 text: one `loop 0xADDR max M [total T];` per header.

    OTAWA's constraints for header h (ipet::FlowFactConstraintBuilder) are
    sum x(back edges into h) <= max * sum x(entry edges into h)  and  sum x(back edges into h) <= total,
    so both count back-edge traversals, not header runs. Our N (`max_iterations`) and T
    (`total_iterations`) count body passes. A top-tested loop (gcc -O0: the header is the test,
    each pass ends in a back edge) takes N back edges per entry: M = N, T as is. A bottom-tested
    one (gcc's rotated loops, `bottom_tested`) takes one back edge fewer than passes per entry:
    M = N - 1 and T * (N - 1) / N (`LoopBound.total_back_edges`). Library bounds are already
    back edges and are not rotated.
    """
    lines = ["// generated by nnbuild from the generator's flow facts: max and total = back-edge",
             "// traversals (passes of a top-tested loop, passes minus entries of a rotated one)"]
    if entry:
        lines.append(f"// entry: {entry}")
    for b in bounds:
        where = f"{b.function}, {b.source}" + (f", layer {b.layer}" if b.layer else "")
        where += f", rotated, N = {b.max}" if b.rotated else ""
        total = f" total {b.total_back_edges}" if b.total is not None else ""
        lines.append(f"loop 0x{b.address:x} max {b.max_back_edges}{total}; // {where}")
    for addr, targets in sorted((branches or {}).items()):
        lines.append(f"multibranch 0x{addr:x} to {', '.join(f'0x{t:x}' for t in targets)}; // jump table")
    for addr, targets in sorted((calls or {}).items()):
        lines.append(f"multicall 0x{addr:x} to {', '.join(f'0x{t:x}' for t in targets)}; // indirect flow fact")
    return "\n".join(lines) + "\n"


def render_ffx(bounds: Sequence[LoopBound]) -> str:
    """The same bounds as FFX (`address=` form), for tools and humans that prefer XML."""
    rows = [f'  <loop address="0x{b.address:x}" maxcount="{b.max_back_edges}"/>' for b in bounds]
    return "<flowfacts>\n" + "".join(r + "\n" for r in rows) + "</flowfacts>\n"


# ---------------------------------------------------------------- command and output


def build_command(owcet, elf, entry, ff, board, script=None, params=()) -> List[str]:
    """`owcet -s SCRIPT [-p ID=VAL ...] -f prog.ff prog.elf ENTRY`; `script` (a prepared .osx path)
    and `params` override the board's `otawa_script` and add to its `otawa_params`."""
    cmd = [str(owcet), "-s", str(script or board.get("otawa_script") or DEFAULT_SCRIPT)]
    for param in [*board.get("otawa_params", []), *params]:
        cmd += ["-p", str(param)]
    return cmd + ["-f", str(ff), str(elf), entry]


def parse_output(stdout, stderr, returncode, entry) -> int:
    """The WCET of `entry` in cycles, or NNBuildError: unbounded or failed, never a guess."""
    require_clean_run(stdout, stderr, returncode, entry)
    return wcet_value(stdout.replace("\r", ""), entry)


def require_clean_run(stdout, stderr, returncode, entry):
    """NNBuildError for an unbounded loop, an ERROR line or a non-zero exit of owcet."""
    text = (stdout + "\n" + stderr).replace("\r", "")
    errors = [l.strip() for l in text.splitlines() if l.strip().startswith("ERROR")]
    no_limit = NO_LIMIT_RE.findall(text)
    if no_limit:
        more = f" (and {len(no_limit) - 1} more)" if len(no_limit) > 1 else ""
        raise NNBuildError(f"owcet: unbounded: no limit for the loop at {no_limit[0].strip()}{more}; "
                           f"no flow fact reached it (exit {returncode})", item=entry)
    if any("UNBOUNDED" in e for e in errors):
        raise NNBuildError(f"owcet: unbounded: {tools.one_line(errors[0])} (exit {returncode})", item=entry)
    if returncode != 0 or errors:
        why = errors[0] if errors else (stderr.strip().splitlines() or ["no message"])[-1]
        raise NNBuildError(f"owcet failed (exit {returncode}): {tools.one_line(why)}", item=entry)


def wcet_value(stdout, entry) -> int:
    """The single positive `WCET[entry] = N cycles` value of a clean run."""
    found = [(m.group("fn"), int(m.group("cycles"))) for m in WCET_RE.finditer(stdout)]
    values = {c for fn, c in found if fn == entry}
    if not found:
        raise NNBuildError("owcet printed no 'WCET[...] = N cycles' line", item=entry)
    if not values:
        raise NNBuildError(f"owcet reported {', '.join(f'WCET[{fn}]' for fn, _ in found)}, not the entry",
                           item=entry)
    if len(values) > 1:
        raise NNBuildError(f"owcet printed several WCETs: {sorted(values)}", item=entry)
    cycles = values.pop()
    if cycles < 0:
        raise NNBuildError(f"owcet: unbounded: WCET[{entry}] = {cycles} cycles", item=entry)
    if cycles == 0:
        raise NNBuildError(f"owcet: WCET[{entry}] = 0 cycles is not a bound", item=entry)
    return cycles


# ---------------------------------------------------------------- the analyzer


def analysis_elf(elf, board, workdir) -> Path:
    """The ELF owcet reads: a debug-stripped copy (same addresses, same symbols).

    OTAWA's old gel hangs in dwarf_new_line_map on newlib debug info (rdimon.specs); we already
    took the line table ourselves, so owcet does not need DWARF. `otawa_strip_debug: false` in
    the board passes the ELF unchanged.
    """
    if not board.get("otawa_strip_debug", True):
        return Path(elf)
    objcopy = tools.which(board.get("objcopy", "objcopy"), target=board.get("name"),
                          hint=board.get("install_hint", "install the board's binutils"))
    out = Path(workdir) / (Path(elf).stem + ".otawa.elf")
    done = tools.run([objcopy, "--strip-debug", str(elf), str(out)], timeout=tools.timeout_of(board),
                     what=Path(objcopy).name)
    if done.returncode != 0:
        raise NNBuildError(f"{Path(objcopy).name} --strip-debug failed: {tools.one_line(done.stderr)}",
                           path=elf)
    return out


def timing_script(board, objdump_text, workdir, entry):
    """(script path or None, extra -p values): for nnbuild's own scripts, the built plugin's .osx and
    the per-instruction cost table of this ELF; OTAWA's scripts go by name."""
    name = board.get("otawa_script") or DEFAULT_SCRIPT
    if not otawa_timing.is_ours(name):
        return None, []
    if board.get("simulator") and board.get("instruction_timing") != name:
        # the soundness gate compares the bound with the measured run: both must charge one model
        raise NNBuildError(f"otawa_script '{name}' needs instruction_timing '{name}' so that the measured "
                           "runs charge the same clocks", item=board.get("name"))
    costs = otawa_timing.cost_file(name, objdump_text, workdir, entry)
    config = tools.which("otawa-config", target=board.get("name"), hint=INSTALL_HINT,
                         path=tools.search_path("otawa"))
    return otawa_timing.prepared_script(name, config, board), otawa_timing.script_params(name, costs)


def ilp_file(board, workdir, entry) -> Optional[Path]:
    """Where owcet writes its IPET system for HiGHS (board `otawa_ilp_solver: highs`), or None
    (OTAWA's lp_solve solves it). Only nnbuild's own scripts write it: OTAWA's keep lp_solve."""
    solver = board.get("otawa_ilp_solver", "lp_solve")
    if solver not in ("lp_solve", "highs"):
        raise NNBuildError(f"otawa_ilp_solver must be 'lp_solve' or 'highs', not {solver!r}", item=board.get("name"))
    if solver == "lp_solve" or not otawa_timing.is_ours(board.get("otawa_script") or DEFAULT_SCRIPT):
        return None
    return Path(workdir) / f"{entry}.lp"


#: board keys this analyzer reads (Board.check refuses a board without them)
BOARD_NEEDS = ("clock_hz",)


def analyze(elf, entry, flowfacts, board, workdir) -> WcetResult:
    """WCET of `entry` in `elf` by owcet, with the generator's loop bounds as a `.ff` file."""
    owcet = tools.which(TOOL, target=board.get("name"), hint=INSTALL_HINT, path=tools.search_path("otawa"))
    facts = tools.load_flowfacts(flowfacts)
    workdir = Path(workdir).resolve()   # owcet runs in workdir: every path it gets is absolute
    workdir.mkdir(parents=True, exist_ok=True)
    elf = Path(elf).resolve()
    text = disassembly(elf, board)
    functions = with_lines(parse_objdump(text), elf)
    calls = indirect_calls(functions, facts)
    require_no_computed_jumps(functions, entry, calls)
    require_reducible(functions, facts.get("loops", []), entry)
    bounds, unmapped = map_loops(functions, facts.get("loops", []))
    known = {b.address for b in bounds}
    bounds += [b for b in library_bounds(functions, entry, calls) if b.address not in known]
    stem = Path(elf).stem
    ff = workdir / f"{stem}.ff"
    branches = {a: t for func in reachable(functions, entry, calls) for a, t in jump_tables(func).items()}
    ff.write_text(render_ff(bounds, entry, branches, calls))
    (workdir / f"{stem}.ffx").write_text(render_ffx(bounds))
    script, params = timing_script(board, text, workdir, entry)
    ilp = ilp_file(board, workdir, entry)
    block_map = workdir / f"{entry}.blocks"
    if ilp:
        params = [*params, f"ilp={ilp}", f"blocks={block_map}"]
    cmd = build_command(owcet, analysis_elf(elf, board, workdir), entry, ff, board, script, params)
    done = tools.run(cmd, timeout=tools.timeout_of(board), cwd=workdir, what=TOOL)
    (workdir / "owcet.stdout").write_text(done.stdout)
    (workdir / "owcet.stderr").write_text(done.stderr)
    solved = None
    if ilp:
        require_clean_run(done.stdout, done.stderr, done.returncode, entry)
        rows = library_paths(functions, block_map, facts, elf=elf)
        lp = otawa_paths.add_rows(otawa_ilp.parse_lp(ilp.read_text()), rows)
        solved = otawa_ilp.maximise(lp, tools.timeout_of(board))
        solved["path_constraints"] = [r.record() for r in rows]
        cycles = solved["bound"]
    else:
        cycles = parse_output(done.stdout, done.stderr, done.returncode, entry)
    return WcetResult(
        analyzer="otawa", entry=entry, cycles=cycles,
        details={"command": cmd, "script": board.get("otawa_script") or DEFAULT_SCRIPT,
                 "timing_model": board.get("timing_model"), "flowfacts_file": str(ff),
                 "loop_bounds": [{"address": f"0x{b.address:x}", "max": b.max, "total": b.total,
                                  "rotated": b.rotated, "max_back_edges": b.max_back_edges,
                                  "total_back_edges": b.total_back_edges,
                                  "source": b.source, "layer": b.layer} for b in bounds],
                 "unmapped_loops": unmapped,
                 "jump_tables": {f"0x{a:x}": [f"0x{t:x}" for t in ts] for a, ts in sorted(branches.items())},
                 "indirect_calls": {f"0x{a:x}": [f"0x{t:x}" for t in ts] for a, ts in sorted(calls.items())},
                 "ilp_solver": "highs" if ilp else "lp_solve (OTAWA)", "ilp": solved,
                 "per_layer_note": "owcet reports one bound per entry; no per-layer split"},
        tool_version=tools.version([locate("otawa-config") or "otawa-config", "--version"]))
