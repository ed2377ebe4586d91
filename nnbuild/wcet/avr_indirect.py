"""Indirect call/jump targets from the flow facts, shared by the AVR WCET and stack analyzers.

Flow facts entries under "indirect" name the site in one of two ways:

  {"address": 0x1234 | "0x1234", "targets": [...]}                by address
  {"function": "f", "offset": 18, "targets": [...]}                 by function + byte offset
  {"file": "m.c", "line": 355, "targets": [...]}                    by source line (v1 code shape)

A source-line entry covers every ICALL/EICALL/IJMP/EIJMP whose DWARF line (avr-objdump -l, the
innermost inlined location) is that line of a file with the same base name: one C call through a
pointer may compile to several instructions (inlined or duplicated code), all with the same
targets. A line without such an instruction is not an error (the optimiser may have removed or
resolved the call); an indirect instruction without a fact still is (in the analyzers).
Targets are symbol names or addresses. Entries for the same site are merged (union of targets).

An entry may also carry `calls`: the site runs exactly once per element of that list per call of
its function (v1's network loop: one call per table entry; where the optimiser resolved the
pointer and left no indirect instruction on the line, its direct calls to the targets count when
there is one per element), element i calling its `target` with
the loop bounds of its `loops` ([{"file", "line", "max_iterations"}] replacing the generic ones:
that table entry's sizes). The analyzer then charges the site the sum of those calls' bounds
(spread evenly over its executions) instead of its count times the worst target's bound. A call
may also carry `indirect` ([{"file", "line", "targets"}]): inside that call (its target and
everything it calls), the indirect sites of that line reach only those targets, a subset of the
site's own entry (v1: the table entry's activation pointer); an empty list says the site does
not run in that call (a NULL activation). And `values` (entries like the flow facts' own "values"):
value facts that hold inside that call only, added to those of their lines (v1: the tags the
table entry's own weights prove on the kernel's multiply-accumulate line).
"""

import json
import os

from nnbuild.errors import NNBuildError
from nnbuild.wcet import tools

INDIRECT = ("icall", "eicall", "ijmp", "eijmp")


def load_flowfacts(flowfacts):
    """The flow-facts dict from a dict, a JSON path, or None (no facts: the stack analyzers)."""
    return {} if flowfacts is None else tools.load_flowfacts(flowfacts)


def _target(prog, t):
    if isinstance(t, int):
        return t
    if isinstance(t, str) and t.strip().lower().startswith("0x"):
        return int(t, 16)
    try:
        return prog.address_of(t)
    except NNBuildError:
        raise NNBuildError(f"indirect flow fact: target '{t}' is not a symbol of the ELF", path=prog.elf)


def _sites(prog, ent, mnemonics=INDIRECT):
    """Addresses of the instructions one 'indirect' entry is about (`mnemonics`: the indirect
    call and jump instructions of the instruction set; builtin-thumb2 passes its own)."""
    if "file" in ent and "line" in ent and "address" not in ent and "offset" not in ent:
        base, line = os.path.basename(ent["file"]), int(ent["line"])
        return [a for a, i in prog.insns.items()
                if i.mnem in mnemonics and i.line == line and i.file and os.path.basename(i.file) == base]
    addr = ent.get("address")
    addr = int(addr, 0) if isinstance(addr, str) else addr
    if addr is None:
        addr = prog.address_of(ent["function"]) + int(ent.get("offset", 0))
    return [addr]


def indirect_targets(facts, prog, mnemonics=INDIRECT):
    """{instruction address: [target addresses]} for the facts' 'indirect' entries."""
    out = {}
    for ent in (facts or {}).get("indirect", []):
        targets = [_target(prog, t) for t in ent.get("targets", [])]
        if not targets:
            continue
        for addr in _sites(prog, ent, mnemonics):
            known = out.setdefault(addr, [])
            known.extend(t for t in targets if t not in known)
    return out


def call_sequences(facts, prog):
    """{instruction address: [(target address, {(file base name, line): (max_iterations, total_iterations
    or None: the body's executions in this call)},
    {site address: (target addresses)})]} for the 'indirect' entries with `calls`; every call's
    target must be one of the entry's targets, and every per-call site target one of that site's."""
    out = {}
    known = indirect_targets(facts, prog)
    for ent in (facts or {}).get("indirect", []):
        if "calls" not in ent:
            continue
        allowed = {_target(prog, t) for t in ent.get("targets", [])}
        calls = []
        for call in ent["calls"]:
            target = _target(prog, call["target"])
            if target not in allowed:
                raise NNBuildError(f"indirect flow fact: call target '{call['target']}' is not among the site's "
                                   "targets", path=prog.elf)
            bounds = {(os.path.basename(l["file"]), int(l["line"])):
                      (int(l["max_iterations"]), int(l["total_iterations"]) if "total_iterations" in l else None)
                      for l in call["loops"]}
            values = tuple(json.dumps(v, sort_keys=True) for v in call.get("values", []))
            calls.append((target, bounds, _call_targets(call.get("indirect", []), prog, known), values))
        if not calls:
            raise NNBuildError("indirect flow fact: an empty 'calls' list", path=prog.elf)
        sites = _sites(prog, ent)
        if not sites and "file" in ent and "address" not in ent and "offset" not in ent:
            sites = _resolved_calls(prog, ent, allowed, len(calls))
        for addr in sites:
            if addr in out:
                raise NNBuildError(f"indirect flow fact: two 'calls' lists for the site at {addr:#x}", path=prog.elf)
            out[addr] = calls
    return out


def _resolved_calls(prog, ent, allowed, count):
    """The optimiser may resolve the pointer (a const table, an unrolled loop): the direct calls to
    the site's targets on its line, taken as the site only when there are exactly `count` of them
    (one per table entry, each running once: no entry inlined, none in a loop left); else none
    (each direct call then costs its target under the generic bounds)."""
    direct = [a for a in _sites(prog, ent, ("call", "rcall")) if prog.insns[a].target in allowed]
    return direct if len(direct) == count else []


def _call_targets(entries, prog, known):
    """{site address: (target addresses)} of one call's `indirect` list: the call's targets must be
    among the site's own 'indirect' entry's (a site without one is left out: unresolved)."""
    out = {}
    for ent in entries:
        targets = [_target(prog, t) for t in ent.get("targets", [])]
        for addr in _sites(prog, ent):
            if addr not in known:
                continue  # no entry of its own: the analyzers refuse the instruction, as without `calls`
            extra = [t for t in targets if t not in known[addr]]
            if extra:
                raise NNBuildError(f"indirect flow fact: a call's target {extra[0]:#x} at {addr:#x} is not among the "
                                   "site's targets", path=prog.elf)
            out[addr] = tuple(sorted(set(out.get(addr, ())) | set(targets)))
    return out
