"""Built-in Thumb-2 WCET analyzer for the Cortex-M4 and Cortex-M0+ boards (wcet_tool 'builtin-thumb2').

analyze(elf, entry, flowfacts, board, workdir) -> WcetResult. The linked ELF is decoded with the
board's objdump and every instruction costed by the board's `instruction_timing` table, the one
the qemu-system-arm runner charges (nnbuild/runners/cortexm_timing.py). Regions (the entry, every
callee and every tail-jump target) are analysed bottom-up, each once per call context (the
constant registers a library-loop table entry reads at that call, e.g. memset's size in r2): a BL
costs its own clocks plus the callee's bound in that context, a tail jump the target's bound.
Loops are bounded by the generator's flow facts (through the DWARF line table) and by the pinned
library table (thumb2_loops); indirect calls and jumps take their targets from the flow facts' "indirect"
entries (by address, function + offset, or file + line; their "calls" lists are not read: such a
site costs its worst target each time), switch jump tables from the image; each region's worst case is an IPET integer program solved by
HiGHS (avr_ilp), written to `workdir` in CPLEX LP format. The bound counts from the entry's first
instruction through its return, not the BL that calls it: what the runner counts.

CLI: python -m nnbuild.wcet.thumb2_ipet ELF --entry FN --flowfacts F.json [--board BOARD.json]
"""

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing as timing
from nnbuild.wcet import WcetResult, command_line
from nnbuild.wcet import avr_ilp as I
from nnbuild.wcet import avr_indirect
from nnbuild.wcet import thumb2_cfg as C
from nnbuild.wcet import thumb2_decode as D
from nnbuild.wcet import thumb2_loops as L
from nnbuild.wcet.avr_ipet import layer_map, load_flowfacts

ANALYZER = "builtin-thumb2"
#: board keys this analyzer reads (Board.check refuses a board without them)
BOARD_NEEDS = ("clock_hz", "instruction_timing", "objdump")
#: registers a BL leaves unknown (AAPCS caller-saved, and the link register)
_CLOBBERED = ("r0", "r1", "r2", "r3", "ip", "r12", "lr")
_REG = re.compile(r"\b(r\d+|sl|fp|ip|sp|lr|sb)\b")


@dataclass
class RegionResult:
    start: int
    name: str
    regs: tuple
    cycles: int
    #: layer name (None: in no layer, the caller's layer takes it) -> cycles
    breakdown: Counter
    info: dict = field(default_factory=dict)
    #: value tags of the calls this context stands for (ValueFacts)
    tags: tuple = ()


class ValueFacts:
    """Value tags of soft-float calls and the path rows they allow (thumb2_libloops.json `paths`
    and `caller_tags`, the Thumb-1 counterpart of arm_libloops.json's): a call to a routine some
    `paths` entry names gets, as part of its context, the tags of that entry's op that its source
    line carries (the generator's flow facts "values"), that its pinned caller gives every call
    (`caller_tags`) or the call at its offset (`caller_tags` `sites`), or, for an entry with
    `through`, that the pinned routine making the call has in its own context (it hands its
    argument on); the callee's region is then solved with the entry's rows over its block counts
    (one invocation per region: each row is argued per call). An entry's `words` (offset -> hex
    word) pins literal words of its routine that its argument reads."""

    def __init__(self, prog, facts, paths, callers):
        self.prog, self.paths = prog, paths
        self.lines = {}
        for v in (facts or {}).get("values", []):
            key = (os.path.basename(v["file"]), int(v["line"]), v["op"])
            self.lines.setdefault(key, set()).update(v.get("tags", []))
        #: symbol -> (op, tags some entry needs)
        self.named = {}
        for ent in paths:
            op, tags = self.named.get(ent["symbol"], (ent["op"], set()))
            self.named[ent["symbol"]] = (op, tags | set(ent["when"].split("+")))
        #: (lo, hi, {op: tags}, {call address: {op: tags}}) of each pinned caller in the program
        self.callers = []
        for ent in callers:
            start = self._pinned(ent["symbol"], ent["sha256"], data=True)
            if start is None:
                continue
            lo, hi = prog.interval(start)
            self.callers.append((lo, hi, ent["tags"], self._sites(ent, start, lo, hi)))

    def _pinned(self, symbol, sha256, data=False, words=None):
        """The start of `symbol` when its code (with data=True: and literal words, data_hash) has
        the pinned sha256 and its `words` match, else None."""
        try:
            start = self.prog.address_of(symbol)
        except NNBuildError:
            return None
        digest = L.data_hash(self.prog, start) if data else L.code_hash(self.prog, start)
        if digest != sha256 or not self._words_match(start, words):
            return None
        return start

    def _words_match(self, start, words):
        return all(self.prog.word(start + int(off, 0)) == int(word, 16) for off, word in (words or {}).items())

    def _sites(self, ent, start, lo, hi):
        """{call address: {op: tags}} of a caller entry's `sites`; an offset that is not a call of the
        routine is refused (the entry's proof names calls)."""
        out = {}
        for op, groups in ent.get("sites", {}).items():
            for group in groups:
                for off in group["offsets"]:
                    insn = self.prog.insns.get(start + off)
                    if insn is None or C.control(insn, self.prog) != C.CALL or not lo <= insn.addr < hi:
                        raise NNBuildError(f"thumb2_libloops.json caller_tags {ent['symbol']}: offset {off} "
                                           f"({off:#x}) is not a call of the routine")
                    out.setdefault(insn.addr, {}).setdefault(op, set()).update(group["tags"])
        return out

    def call_tags(self, insn, target, caller_tags=()):
        """Sorted tags of the call `insn` to `target` that some `paths` entry of the target needs;
        `caller_tags`: the tags of the context the calling region is analysed in."""
        found = set()
        for name in self.prog.names.get(target, []):
            if name not in self.named:
                continue
            op, wanted = self.named[name]
            tags = set(self.lines.get((os.path.basename(insn.file), insn.line, op), ())) if insn.file else set()
            for lo, hi, by_op, sites in self.callers:
                if lo <= insn.addr < hi:
                    tags |= set(by_op.get(op, ())) | sites.get(insn.addr, {}).get(op, set())
            tags |= self._through(name, insn, set(caller_tags))
            found |= tags & wanted
        return tuple(sorted(found))

    def _through(self, name, insn, caller_tags):
        """The caller's context tags an entry for `name` with `through` takes at this call: those of
        its `when` when the call is made by the pinned routine `through` names."""
        out = set()
        for ent in self.paths:
            via = ent.get("through")
            if ent["symbol"] != name or via is None or not caller_tags:
                continue
            start = self._pinned(via["symbol"], via["sha256"], words=via.get("words"))
            if start is not None and self.prog.interval(start)[0] <= insn.addr < self.prog.interval(start)[1]:
                out |= caller_tags & set(ent["when"].split("+"))
        return out

    def rows(self, region, addr, tags):
        """(avr_ilp.PathRows or None, descriptions) of the entries for the region at `addr` whose tag
        the context carries and whose routine has the pinned code (and `words`); an entry naming a
        block the region does not have is not applied (the bound stays without it)."""
        if not tags:
            return None, []
        from nnbuild.wcet.avr_paths import PathRows
        out, applied = PathRows(), []
        for ent in self.paths:
            if not set(ent["when"].split("+")) <= set(tags) or ent["symbol"] not in self.prog.names.get(addr, []):
                continue
            if L.code_hash(self.prog, addr) != ent["sha256"] or not self._words_match(addr, ent.get("words")):
                continue
            rows = []
            for row in ent["rows"]:
                blocks = {addr + int(off, 0): coef for off, coef in row["blocks"].items()}
                if not all(b in region.blocks for b in blocks):
                    rows = None
                    break
                rows.append(({("node", b): c for b, c in blocks.items()}, row["at_most"]))
            if rows is None:
                continue
            out.rows += rows
            applied.append(f"thumb2_libloops.json paths {ent['symbol']} ({ent['when']}): "
                           + "; ".join(" + ".join(f"{c} x(+{o})" for o, c in r["blocks"].items()) + f" <= {r['at_most']}"
                                       for r in ent["rows"]))
        return (out if out.rows else None), applied


def _imm(text):
    return int(text.lstrip("#"), 0) & 0xFFFFFFFF


def call_constants(prog, block, call):
    """{register: value} known right before the call instruction `call` in `block`, from the
    block's own instructions (moves of immediates and literals, copies, shifts and adds of known
    values); any other write of a register forgets it."""
    known = {}
    for insn in block.insns:
        if insn is call:
            return known
        ops, b = insn.ops, insn.base
        dest = ops[0] if ops and _REG.fullmatch(ops[0]) else None
        value = None
        try:
            if b in ("mov", "movw") and len(ops) == 2 and ops[1].startswith("#") and insn.cond is None:
                value = _imm(ops[1])
            elif b == "movt" and len(ops) == 2 and dest in known and insn.cond is None:
                value = (known[dest] & 0xFFFF) | (_imm(ops[1]) << 16)
            elif b == "mov" and len(ops) == 2 and ops[1] in known and insn.cond is None:
                value = known[ops[1]]
            elif b == "ldr" and len(ops) == 2 and ops[1].startswith("[pc") and insn.cond is None:
                offset = int(ops[1].strip("[]").split("#")[1], 0) if "#" in ops[1] else 0
                value = prog.word(((insn.addr + 4) & ~3) + offset)
            elif b == "lsl" and len(ops) == 3 and ops[1] in known and ops[2].startswith("#") and insn.cond is None:
                value = (known[ops[1]] << _imm(ops[2])) & 0xFFFFFFFF
            elif b in ("add", "sub") and insn.cond is None and len(ops) in (2, 3) and ops[-1].startswith("#"):
                src = ops[0] if len(ops) == 2 else ops[1]
                if src in known:
                    step = _imm(ops[-1])
                    value = (known[src] + (step if b == "add" else -step)) & 0xFFFFFFFF
        except (ValueError, IndexError):
            value = None
        if C.control(insn, prog) in (C.CALL, C.INDIRECT_CALL):
            for r in _CLOBBERED:
                known.pop(r, None)
            continue
        if b.startswith("str") or b.startswith("stm") or b in ("cmp", "cmn", "tst", "teq", "push") or b.startswith("it"):
            # they write no register but a written-back base: [rX, #n]!, [rX], #n, rX!
            for written in re.findall(r"\[(\w+)[^\]]*\]!|\[(\w+)\],|(\w+)!", insn.operands):
                for r in written:
                    known.pop(r, None)
            continue
        for r in _named_registers(insn.operands):   # anything else: every register it names may change
            known.pop(r, None)
        if dest is not None and value is not None:
            known[dest] = value
    return known


def _named_registers(operands):
    """Every core register an operand text names, register-list ranges ({r4-r7}) expanded."""
    names = set(_REG.findall(operands))
    if "{" in operands:
        names |= set(timing.register_list(operands))
    return names


class Analyzer:
    """Memoised bottom-up analysis of every region reachable from the entry."""

    def __init__(self, prog, facts, table, workdir):
        self.prog, self.facts, self.table, self.workdir = prog, facts, table, workdir
        self.layers = layer_map(facts)
        #: the flow facts' "indirect" entries: {BLX/BX/MOV PC instruction: [targets]}
        self.indirect = avr_indirect.indirect_targets(facts, prog, C.INDIRECT_MNEMONICS)
        self.done, self.stack, self.used = {}, [], set()
        self.regions = {}
        #: symbol -> registers its table entries read at the call
        self.entry_regs = {}
        for ent in table:
            self.entry_regs.setdefault(ent["symbol"], set()).update(ent.get("entry_regs", {}).values())
        self.values = ValueFacts(prog, facts, *L.load_value_entries())

    def layer(self, insn):
        return self.layers.get((os.path.basename(insn.file), insn.line)) if insn.file else None

    def _context(self, target, known):
        wanted = set()
        for name in self.prog.names.get(target, []):
            wanted |= self.entry_regs.get(name, set())
        return tuple(sorted((r, known[r]) for r in wanted if r in known))

    def region(self, addr, regs=(), tags=()):
        key = (addr, regs, tags)
        if key in self.done:
            return self.done[key]
        if addr in self.stack:
            chain = " -> ".join(self.prog.describe(a) for a in self.stack[self.stack.index(addr):] + [addr])
            raise NNBuildError(f"{ANALYZER}: recursion in {self.prog.function_of(addr)} at "
                               f"{self.prog.describe(addr)} ({chain}): no bound")
        self.stack.append(addr)
        try:
            result = self._analyse(addr, regs, tags)
        finally:
            self.stack.pop()
        self.done[key] = result
        return result

    def _analyse(self, addr, regs, tags=()):
        prog = self.prog
        if addr not in self.regions:
            self.regions[addr] = C.build_region(prog, addr, self.indirect)
        region = self.regions[addr]
        cost, callees, tails = {}, {}, {}
        for n, block in region.blocks.items():
            cost[n] = C.block_cycles(prog, block)
            callees[n] = []
            for insn, target in block.calls:
                targets = target if isinstance(target, tuple) else (target,)
                known = call_constants(prog, block, insn) if not isinstance(target, tuple) else {}
                sub = max((self.region(t, self._context(t, known), self.values.call_tags(insn, t, tags))
                           for t in targets),
                          key=lambda r: r.cycles)
                callees[n].append((insn, sub))
                cost[n] += sub.cycles
        for k, tail in region.tails.items():   # a tail jump (b.w memset) passes its registers on as a call does
            known = call_constants(prog, region.blocks[k[1]], tail.insn) if k[1] in region.blocks else {}
            tails[k] = self.region(tail.target, self._context(tail.target, known))
            cost[k] = tails[k].cycles
        loops = L.find_loops(region)
        facts = self.facts.get("loops", [])
        self.used |= L.apply_flowfacts(region, loops, facts)
        L.apply_table(region, loops, prog, self.table, dict(regs))
        self.used |= L.apply_flowfact_ranges(region, loops, facts)
        L.require_bounds(loops, prog)
        label = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{prog.function_of(addr)}_{addr:x}"
                       + "".join(f"_{r}={v}" for r, v in regs) + "".join(f"_{t}" for t in tags))
        paths, applied = self.values.rows(region, addr, tags)
        cycles, counts, info = I.solve(region, loops, cost, self.workdir, label, paths=paths, analyzer=ANALYZER)
        info.pop("choice_cycles", None)
        if applied:
            info["value_facts"] = applied
        info["blocks"] = len(region.blocks)
        info["loops"] = [{"header": prog.describe(l.header), "sources": l.sources, "bounds": l.bounds}
                         for l in loops]
        breakdown = self._breakdown(region, counts, callees, tails)
        if sum(breakdown.values()) != cycles:
            raise NNBuildError(f"{ANALYZER}: internal error: per-layer split of {region.name} "
                               f"({sum(breakdown.values())}) != WCET ({cycles})")
        return RegionResult(addr, region.name, regs, int(cycles), breakdown, info, tags)

    def _breakdown(self, region, counts, callees, tails):
        """Cycles of the worst-case solution by layer: own instructions by their source line,
        callees and tail targets' unattributed cycles by the line of the call or jump."""
        into, out = Counter(), Counter()
        for e, c in zip(region.edges, counts):
            into[e.dst] += c
            if e.extra and c:
                out[self.layer(region.blocks[e.src].last)] += c * e.extra
        bd = Counter(out)
        for n, block in region.blocks.items():
            c = into[n]
            if not c:
                continue
            for insn in block.insns[:-1]:
                bd[self.layer(insn)] += c * max(C.cost_of(self.prog, insn))
            bd[self.layer(block.last)] += c * C.cost_of(self.prog, block.last)[0]
            for insn, sub in callees[n]:
                _add(bd, sub, c, self.layer(insn))
        for k, sub in tails.items():
            if into[k]:
                _add(bd, sub, into[k], self.layer(region.tails[k].insn))
        return bd


def _add(bd, sub, count, site_layer):
    for lay, cyc in sub.breakdown.items():
        bd[lay if lay is not None else site_layer] += count * cyc


def analyze(elf, entry, flowfacts, board, workdir):
    """A sound bound (clocks of the board's table) on one call of `entry` in the linked `elf`."""
    facts = load_flowfacts(flowfacts)
    prog = D.load(str(elf), board)
    try:
        start = prog.address_of(entry)
    except NNBuildError:
        raise NNBuildError(f"{ANALYZER}: entry function '{entry}' not in the ELF", path=elf) from None
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    an = Analyzer(prog, facts, L.load_table(), workdir)
    top = an.region(start)
    per_layer = {k: v for k, v in top.breakdown.items() if k is not None}
    for lay in facts.get("layers", []):
        per_layer.setdefault(lay["name"], 0)
    label = {key: r.name + "".join(f" {reg}={val}" for reg, val in r.regs) + "".join(f" [{t}]" for t in r.tags)
             for key, r in an.done.items()}
    import scipy
    details = {
        "timing_model": board.get("timing_model"),
        "instruction_timing": board.get("instruction_timing"),
        "clock_hz": board.get("clock_hz"),
        "solver": f"scipy.optimize.milp (HiGHS), scipy {scipy.__version__}",
        "ilp": {k: top.info[k] for k in ("variables", "constraints", "status", "blocks")},
        "regions": len(an.done),
        "callee_wcet": {label[key]: r.cycles for key, r in sorted(an.done.items()) if key != (start, (), ())},
        "value_facts": {label[key]: r.info["value_facts"] for key, r in sorted(an.done.items())
                        if r.info.get("value_facts")},
        "loops": {label[key]: r.info["loops"] for key, r in sorted(an.done.items()) if r.info["loops"]},
        "unattributed_cycles": top.breakdown.get(None, 0),
        "unmatched_flowfact_loops": [f for k, f in enumerate(facts.get("loops", [])) if k not in an.used],
        "convention": "first instruction of the entry through its return, excluding the BL that calls it",
    }
    if board.get("clock_hz"):
        details["seconds"] = top.cycles / board["clock_hz"]
    return WcetResult(ANALYZER, entry, int(top.cycles), per_layer, details,
                      f"nnbuild builtin-thumb2 IPET ({board.get('instruction_timing')})")


def main(argv=None):
    return command_line(analyze, "thumb2_ipet", __doc__, "stm32f407", argv)


if __name__ == "__main__":
    sys.exit(main())
