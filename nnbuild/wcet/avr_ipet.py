"""Built-in AVR WCET analyser: whole-program IPET over the linked ELF (board wcet_tool 'builtin-avr').

analyze(elf, entry, flowfacts, board, workdir) -> WcetResult. Regions (functions, call targets and
tail-jump targets) are analysed bottom-up, once per call context (avr_paths: the library functions
active around the call, the call site, and the constant values of registers that "entry_regs"
entries read, e.g. the `ldi r16, N` count of libgcc's 64-bit shifts, as far as a table entry
refers to them): a call costs
the CALL plus the callee's WCET in its context, charged to the calling block. Table loop bounds
and infeasible-path constraints (avr_libloops.json) apply where their context holds. The bound
counts from the entry's first instruction through its RET, excluding the CALL that invokes it.

CLI: python -m nnbuild.wcet.avr_ipet ELF --entry FN --flowfacts F.json [--board B.json] [--json OUT]
"""

import json
import logging
import os
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

from nnbuild.errors import NNBuildError
from nnbuild.wcet import WcetResult, command_line
from nnbuild.wcet import avr_cfg as C
from nnbuild.wcet import avr_decode as D
from nnbuild.wcet import avr_indirect
from nnbuild.wcet import avr_ilp as I
from nnbuild.wcet import avr_loops as L
from nnbuild.wcet import avr_paths as P
from nnbuild.wcet import avr_timing as T

#: timing lines, shown with -v (nnbuild.cli configures the level)
LOG = logging.getLogger(__name__)
from nnbuild.wcet import avr_visits as V
from nnbuild.wcet.tools import load_flowfacts

ANALYZER = "builtin-avr"


@dataclass
class RegionResult:
    start: int
    name: str
    ctx: P.Ctx
    cycles: int
    #: layer name (None = not in any layer: inherits the caller's layer) -> cycles
    breakdown: Counter
    info: dict = field(default_factory=dict)


#: an analysis longer than this (s) reports its phases on stderr (never in any output file)
PROGRESS_SECONDS = 2.0


class Phases:
    """Wall-clock time per analysis phase (decode, CFG, loops, ILP solve; the phases interleave
    region by region, so each is a sum), a progress line about every PROGRESS_SECONDS once the
    analysis has run that long, and one line per phase at the end of a long analysis."""

    NAMES = ("decode", "CFG", "loops", "ILP solve")

    def __init__(self):
        self.start = self.last = time.monotonic()
        self.seconds = dict.fromkeys(self.NAMES, 0.0)
        self.counts = dict.fromkeys(self.NAMES, 0)

    @contextmanager
    def phase(self, name):
        t = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - t
            self.counts[name] += 1

    def tick(self, regions):
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            LOG.info(f"builtin-avr: {regions} regions analysed, {now - self.start:.1f} s")

    def report(self, regions):
        """One timing line per analysis (shown with -v): the total and each phase's share."""
        total = time.monotonic() - self.start
        parts = ", ".join(f"{name} {self.seconds[name]:.2f} s" + (f" x{self.counts[name]}" if name != "decode" else "")
                          for name in self.NAMES)
        LOG.info(f"builtin-avr: {regions} regions in {total:.1f} s ({parts}, other "
                 f"{total - sum(self.seconds.values()):.2f} s)")


def layer_map(facts):
    """(basename, line) -> layer name from the flow facts' layer line ranges."""
    out = {}
    for lay in facts.get("layers", []):
        base = os.path.basename(lay["file"])
        for line in range(int(lay["first_line"]), int(lay["last_line"]) + 1):
            out[(base, line)] = lay["name"]
    return out


def indirect_targets(facts, prog):
    """Optional 'indirect' flow facts: {address, function+offset or file+line, targets: [symbol|address]}
    -> {instruction address: [target addresses]} (nnbuild.wcet.avr_indirect)."""
    return avr_indirect.indirect_targets(facts, prog)


def call_bound(fact, bound):
    """A loop fact under one call's (max_iterations, total_iterations or None) from a `calls` flow
    fact (None: the fact as it is). The call's total replaces the fact's (a sum over every call)."""
    if bound is None:
        return fact
    most, total = bound
    out = dict(fact, max_iterations=most)
    if total is not None:
        out["total_iterations"] = total
    return out


class Analyzer:
    """Memoised bottom-up analysis of every region reachable from the entry."""

    def __init__(self, prog, fam, facts, table, workdir, paths=(), counters=None, phases=None):
        self.phases = phases or Phases()
        self.prog, self.fam, self.facts, self.table, self.paths = prog, fam, facts, table, list(paths)
        self.ctxs = P.Contexts(prog, list(table) + self.paths)
        #: symbols whose table entries depend on the context: other regions share one analysis
        self.ctx_syms = {e["symbol"] for e in list(table) + self.paths if "within" in e or "call_site" in e}
        self.ctx_syms |= {e["symbol"] for e in self.paths if e.get("counters")}
        #: symbols whose table entries read entry registers: only regions reaching one keep Ctx.regs
        self.reg_syms = {e["symbol"] for e in table if e.get("entry_regs")}
        self.regions, self.reach, self.reach_sym, self.params = {}, {}, {}, {}
        self.counters = L.load_counters() if counters is None else counters
        #: call site -> operand tags (avr_paths.operand_tags) found in the analysed regions
        self.site_tags = {}
        self.layers = layer_map(facts)
        self.indirect = indirect_targets(facts, prog)
        self.sequences = avr_indirect.call_sequences(facts, prog)
        #: loop-bound overrides -> (done, params) memos of the analyses under them
        self.memos = {}
        self.memo_tag = ""
        self.values = P.value_facts(facts)
        self.workdir = workdir
        self.done, self.stack = {}, []
        self.matched = set()

    def layer(self, insn):
        return self.layers.get((os.path.basename(insn.file), insn.line)) if insn.file else None

    def _region(self, addr):
        if addr not in self.regions:
            with self.phases.phase("CFG"):
                self.regions[addr] = C.build_region(self.prog, addr, self.fam, self.indirect)
        return self.regions[addr]

    def _sensitive(self, addr):
        """True when a context-dependent table entry may apply in the region or below it."""
        return bool(self._reach_names(addr) & (self.ctx_syms | self.reg_syms))

    def _reach_names(self, addr):
        """Symbols at the starts of the regions reachable from `addr` (calls and tails)."""
        if addr not in self.reach:
            seen, work, names = set(), [addr], set()
            while work:
                a = work.pop()
                if a in seen:
                    continue
                seen.add(a)
                names.update(self.prog.names.get(self.prog.interval(a)[0], []))
                r = self._region(a)
                for b in r.blocks.values():
                    for _, t in b.calls:
                        work.extend(t if isinstance(t, tuple) else (t,))
                work.extend(t.target for t in r.tails.values())
            self.reach[addr] = frozenset(names)
        return self.reach[addr]

    def region(self, addr, ctx=P.EMPTY):
        if ctx != P.EMPTY:
            names = self._reach_names(addr)
            if not names & self.ctx_syms:
                ctx = ctx.without_names()
            if not names & self.reg_syms:
                ctx = ctx.without_regs()
        key = (addr, ctx)
        if key in self.done:
            return self.done[key]
        if addr in self.stack:
            chain = " -> ".join(self.prog.describe(a) for a in self.stack[self.stack.index(addr):] + [addr])
            raise NNBuildError(f"builtin-avr: recursion in {self.prog.function_of(addr)} at "
                               f"{self.prog.describe(addr)} ({chain}): no bound")
        self.stack.append(addr)
        try:
            res = self._analyse(addr, ctx)
        finally:
            self.stack.pop()
        self.done[key] = res
        self.phases.tick(len(self.done))
        return res

    def _operand_tags(self, region):
        """{call address: operand tags} for calls to float operators with constant operands."""
        # only calls from compiled C (line info): there the ABI holds (r1 = 0 at entry, callee-
        # saved registers survive calls); hand-written library code may use registers freely
        ops = [(i.addr, self.prog.names.get(t, [])) for b in region.blocks.values() for i, t in b.calls
               if i.file and not isinstance(t, tuple) and set(self.prog.names.get(t, [])) & P.OPERATORS]
        if not ops or not any(n.split(":")[0] in P.OPERATORS for n in self.ctxs.names):
            return {}
        consts = P.call_constants(region)
        tags = {a: P.operand_tags(names, *consts.get(a, (None, None))) & self.ctxs.names for a, names in ops}
        self.site_tags.update((a, t) for a, t in tags.items() if t)
        return tags

    def _value_tags(self, region):
        """{call address: tags} of calls from compiled C whose line carries a value fact about
        the called routine (avr_paths.value_facts), restricted to tags some table entry names."""
        found = {}
        if not self.values:
            return found
        consts = None
        for b in region.blocks.values():
            for insn, t in b.calls:
                facts = self.values.get((os.path.basename(insn.file), insn.line)) if insn.file else None
                if facts and not isinstance(t, tuple):
                    operand_b = None
                    if any(adds is not None for _, _, adds in facts):  # constant operands (ABI: C code)
                        consts = P.call_constants(region) if consts is None else consts
                        operand_b = consts.get(insn.addr, (None, None))[1]
                    tags = P.value_fact_tags(facts, self.prog.names.get(t, []), operand_b) & self.ctxs.names
                    if tags:
                        found[insn.addr] = tags
        return found

    def _callee(self, target, ctx):
        """Worst of the callee regions (several only for indirect calls)."""
        targets = target if isinstance(target, tuple) else (target,)
        if not targets:  # an indirect site a `calls` fact says does not run in this call
            return RegionResult(0, "no call", ctx, 0, Counter())
        return max((self.region(t, ctx) for t in targets), key=lambda r: r.cycles)

    def _model(self, addr, ctx, counters=()):
        """Everything the region's ILP needs. Calls and tails that can reach a counter in
        `counters` or in the region's own paths entries become parametric choices (the callee's
        cycles per counter value, self.param); the others cost their WCET in context."""
        prog, fam = self.prog, self.fam
        region = self._region(addr)
        own = self.ctxs.own(ctx, addr)
        tags = self._operand_tags(region)
        for a, extra in self._value_tags(region).items():
            tags[a] = frozenset(tags.get(a, ())) | extra
            self.site_tags[a] = tags[a]
        paths = P.path_rows(region, prog, self.paths, own, ctx.site, self.counters)
        wanted = set(counters) | paths.counters
        for name in wanted:
            if name not in self.counters:
                raise NNBuildError(f"builtin-avr: table paths entry uses unknown counter '{name}'")
            paths.counter_nodes[name] = P.counter_nodes(region, prog, self.counters[name])
        at_call, at_tail = {}, {}
        if self._reach_names(addr) & self.reg_syms:
            at_call, at_tail = P.register_constants(region, dict(ctx.regs), self.ctxs.regs)
        callee, tail, cost, choices = {}, {}, {}, []

        def param_of(target, sub_ctx, node, site):
            hit = [k for k in wanted
                   if self._reaches(target, P.counter_points(prog, self.counters[k]))]
            if len(hit) > 1:
                raise NNBuildError(f"builtin-avr: {prog.describe(target)} reaches counters {hit}: "
                                   f"one per call is supported")
            if hit:
                choices.append({"node": node, "values": self.param(target, sub_ctx, hit[0]),
                                "counter": hit[0], "site": site.addr})
                return True
            return False

        for n, b in region.blocks.items():
            subs = []
            cost[n] = C.block_base_cycles(b, fam, prog)
            for insn, t in b.calls:
                sub_ctx = self.ctxs.call(own, insn.addr, tags.get(insn.addr, ()), at_call.get(insn.addr))
                if insn.addr in self.sequences:
                    sub = self._sequence(insn.addr, sub_ctx)
                    subs.append((insn, sub))
                    cost[n] += sub.cycles
                    continue
                sub = self._callee(t, sub_ctx)
                if isinstance(t, tuple) or not param_of(t, sub.ctx, n, insn):
                    subs.append((insn, sub))
                    cost[n] += sub.cycles
            callee[n] = subs
        for k, t in region.tails.items():
            tail[k] = self.region(t.target, self.ctxs.tail(own, ctx, at_tail.get(k)))
            cost[k] = 0 if param_of(t.target, tail[k].ctx, k, t.insn) else tail[k].cycles
        with self.phases.phase("loops"):
            loops = L.find_loops(region, prog)
            facts = self.facts.get("loops", [])
            self.matched.update(k for k, _ in L.apply_flowfacts(region, loops, facts))
            L.apply_table(region, loops, prog, self.table, own, ctx.site, dict(ctx.regs))
            L.apply_auto(region, loops)
            self.matched.update(k for k, _ in L.apply_flowfact_ranges(region, loops, facts))
            L.require_bounds(region, loops, prog)
        visits = [f for name in prog.names.get(region.start, []) for f in V.facts_for(self.facts, name)]
        if visits:
            rows, notes, binaries = V.visit_rows(region, loops, visits, first_aux=paths.binaries)
            paths.rows.extend(rows)
            paths.binaries += binaries
            paths.sources.extend(notes)
        return region, loops, cost, callee, tail, paths, choices

    def _sequence(self, site, ctx):
        """The call site of a `calls` flow fact, per execution: the sum of its calls' bounds (each
        target analysed under its own loop bounds) divided by their number, rounded up. The site
        runs once per call, so its count times this is at least that sum."""
        calls = self.sequences[site]
        total, bd = 0, Counter()
        for target, bounds, targets, values in calls:
            sub = self._with_loop_bounds(bounds, lambda: self.region(target, ctx), targets, values)
            total += sub.cycles
            bd.update(sub.breakdown)
        each = -(-total // len(calls))
        share = Counter({lay: cyc // len(calls) for lay, cyc in bd.items()})
        share[None] += each - sum(share.values())
        return RegionResult(site, f"calls@{site:x}", ctx, each, share,
                            {"calls": len(calls), "sum_cycles": total})

    def _with_loop_bounds(self, bounds, analyse, targets=None, values=()):
        """analyse() with the flow facts' loops on the lines of `bounds` bounded by it, the
        indirect sites of `targets` ({address: targets}) reaching only those and the value facts
        `values` (JSON texts of "values" entries) added to their lines, in a memo of its own (the
        same regions get other bounds, call targets and value facts there)."""
        targets = targets or {}
        key = (tuple(sorted(bounds.items())), tuple(sorted(targets.items())), tuple(sorted(values)))
        saved = (self.facts, self.done, self.params, self.memo_tag, self.indirect, self.regions, self.reach,
                 self.reach_sym, self.values)
        if key not in self.memos:
            regions = ({}, {}, {}) if targets else (self.regions, self.reach, self.reach_sym)
            self.memos[key] = ({}, {}) + regions
        self.memo_tag = f"_calls{list(self.memos).index(key)}"
        loops = [call_bound(f, bounds.get((os.path.basename(f["file"]), int(f["line"]))))
                 for f in self.facts.get("loops", [])]
        self.facts = dict(self.facts, loops=loops)
        self.indirect = {**self.indirect, **{a: list(t) for a, t in targets.items()}} if targets else self.indirect
        if values:
            extra = P.value_facts({"values": [json.loads(v) for v in values]})
            self.values = {k: self.values.get(k, []) + extra.get(k, []) for k in set(self.values) | set(extra)}
        self.done, self.params, self.regions, self.reach, self.reach_sym = self.memos[key]
        try:
            return analyse()
        finally:
            (self.facts, self.done, self.params, self.memo_tag, self.indirect, self.regions, self.reach,
             self.reach_sym, self.values) = saved

    def _reaches(self, addr, points):
        """True when one of the instructions at `points` (addresses) can run in a call of the region
        at `addr` (calls, tails). By address, not by symbol: a library module's code after another
        symbol (error stubs placed after modf) would otherwise look like that symbol's."""
        key = (addr, points)
        if key not in self.reach_sym:
            seen, work, found = set(), [addr], False
            while work and not found:
                a = work.pop()
                if a in seen:
                    continue
                seen.add(a)
                r = self._region(a)
                found = any(i.addr in points for b in r.blocks.values() for i in b.insns)
                for b in r.blocks.values():
                    for _, t in b.calls:
                        work.extend(t if isinstance(t, tuple) else (t,))
                work.extend(t.target for t in r.tails.values())
            self.reach_sym[key] = found
        return self.reach_sym[key]

    def param(self, addr, ctx, counter):
        """WCET of the region per value n = 0..N of `counter` in one invocation (a list; None
        where the counter cannot be that low, e.g. a region whose entry block holds the point).

        From the top down: the worst solution under `counter <= v` has some counter value c <= v,
        and it is also the worst under every cap from c to v (their feasible sets nest), so one
        solve fills values[c..v] and the next cap is c - 1."""
        key = (addr, ctx, counter)
        if key not in self.params:
            region, loops, cost, _, _, paths, choices = self._model(addr, ctx, (counter,))
            obj = I.counter_objective(region, paths, choices, counter)
            with self.phases.phase("ILP solve"):
                top, _, _ = I.solve(region, loops, cost, None, "", paths, choices, objective=obj)
            values = [None] * (int(top) + 1)
            v = int(top)
            while v >= 0:
                with self.phases.phase("ILP solve"):
                    got = I.solve(region, loops, cost, None, "", paths, choices, cap=(counter, v),
                                  none_if_infeasible=True)
                if got is None:  # no execution keeps the counter this low
                    break
                reached = sum(w * x for w, x in zip(obj, got[2]["solution"]))
                values[reached:v + 1] = [got[0]] * (v + 1 - reached)
                v = reached - 1
            self.params[key] = values
        return self.params[key]

    def _analyse(self, addr, ctx):
        prog = self.prog
        region, loops, cost, callee, tail, paths, choices = self._model(addr, ctx)
        label = f"{prog.function_of(addr)}_{addr:x}".replace(".", "_")
        if ctx != P.EMPTY:
            label += f"_ctx{len(self.done)}"
        if self.memo_tag:
            label += self.memo_tag  # the same region under a table entry's loop bounds
        with self.phases.phase("ILP solve"):
            cycles, counts, info = I.solve(region, loops, cost, self.workdir, label, paths, choices)
        info["blocks"] = len(region.blocks)
        info["loops"] = [{"header": prog.describe(l.header), "sources": l.sources, "bounds": l.bounds}
                         for l in loops]
        info["paths"] = paths.sources
        bd = self._breakdown(region, counts, callee, tail, info.pop("choice_cycles"))
        if sum(bd.values()) != cycles:
            raise NNBuildError(f"builtin-avr: internal error: per-layer split of {region.name} "
                               f"({sum(bd.values())}) != WCET ({cycles})")
        return RegionResult(addr, region.name, ctx, cycles, bd, info)

    def _breakdown(self, region, counts, callee, tail, chosen):
        """Cycles of the worst-case solution by layer: own instructions by their source line,
        callees' unattributed cycles by the line of the call (or tail jump); parametric callees
        (library code) by the line of their call or tail jump."""
        fam, bd = self.fam, Counter()
        into = Counter()
        for e, c in zip(region.edges, counts):
            into[e.dst] += c
            if e.extra and c:
                bd[self.layer(region.blocks[e.src].last)] += c * e.extra
        for n, b in region.blocks.items():
            c = into[n]
            if not c:
                continue
            for insn in b.insns:
                bd[self.layer(insn)] += c * T.cycles(fam, insn.mnem)
            for insn, sub in callee[n]:
                self._add_callee(bd, sub, c, self.layer(insn))
        chosen_nodes = {node for node, _ in chosen}  # parametric tails are charged below, by their choice
        tails = [k for k in region.tails if into[k] and k not in chosen_nodes]
        for k in tails:
            self._add_callee(bd, tail[k], into[k], self.layer(region.tails[k].insn))
        for (node, site), cyc in chosen.items():
            bd[self.layer(self.prog.insns[site])] += cyc
        return bd

    @staticmethod
    def _add_callee(bd, sub, count, site_layer):
        for lay, cyc in sub.breakdown.items():
            bd[lay if lay is not None else site_layer] += count * cyc


#: board keys this analyzer reads (Board.check refuses a board without them)
BOARD_NEEDS = ("clock_hz",)


def analyze(elf, entry, flowfacts, board, workdir):
    """A sound WCET bound (cycles) for one call of `entry` in the linked AVR `elf`."""
    phases = Phases()
    facts = load_flowfacts(flowfacts)
    fam = T.family(board)
    with phases.phase("decode"):
        prog = D.load(str(elf), board)
    try:
        start = prog.address_of(entry)
    except NNBuildError:
        raise NNBuildError(f"builtin-avr: entry function '{entry}' not in the ELF", path=elf)
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    an = Analyzer(prog, fam, facts, L.load_table(), workdir, L.load_paths(), phases=phases)
    top = an.region(start)
    phases.report(len(an.done))
    per_layer = {k: v for k, v in top.breakdown.items() if k is not None}
    for lay in facts.get("layers", []):
        per_layer.setdefault(lay["name"], 0)
    functions = {r.name + r.ctx.label(prog): r.cycles
                 for (a, _), r in sorted(an.done.items(),
                                         key=lambda kv: (kv[0][0], sorted(kv[0][1].names), sorted(kv[0][1].regs)))
                 if (a, r.ctx) != (start, P.EMPTY)}
    import scipy  # here, not at the top: loading a board's analyzer (every scons run) needs no scipy
    details = {
        "timing_model": (board or {}).get("timing_model", "avre-16bit-pc"),
        "core_family": fam,
        "clock_hz": (board or {}).get("clock_hz"),
        "solver": f"scipy.optimize.milp (HiGHS), scipy {scipy.__version__}",
        "ilp": {k: top.info[k] for k in ("variables", "constraints", "status", "blocks")},
        "regions": len(an.done),
        "callee_wcet": functions,
        "loops": {r.name + r.ctx.label(prog): r.info["loops"] for r in an.done.values() if r.info["loops"]},
        "paths": {r.name + r.ctx.label(prog): r.info["paths"] for r in an.done.values() if r.info["paths"]},
        "unattributed_cycles": top.breakdown.get(None, 0),
        "unmatched_flowfact_loops": [f for k, f in enumerate(facts.get("loops", [])) if k not in an.matched],
        "convention": "first instruction of the entry through its RET, excluding the CALL",
    }
    if (board or {}).get("clock_hz"):
        details["seconds"] = top.cycles / board["clock_hz"]
    return WcetResult(ANALYZER, entry, int(top.cycles), per_layer, details, _version(board))


def _version(board):
    return f"nnbuild builtin-avr IPET ({T.family(board)})"


def main(argv=None):
    return command_line(analyze, "avr_ipet", __doc__, "avr", argv)


if __name__ == "__main__":
    sys.exit(main())
