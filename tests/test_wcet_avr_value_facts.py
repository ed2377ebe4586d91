"""Generator value facts (flow facts "values") on the float32 F1/10 controller, checked on simavr.

The MLP shape on AVR sums each neuron's products by sign and flushes tiny inputs, and says so in
the flow facts; the analyser gives the tagged calls contexts in which avr_libloops.json drops soft-
float loops (__mulsf3's normalisation and underflow loops, __addsf3's normalisation after a
subtraction, nn_tanh's division underflow). tests/wcet_fixtures/avr_trace.c follows every call on
adversarial inputs (subnormal, tiny, huge, mixed signs, infinite, NaN) and checks, per invocation in each tagged
context: the table's loop bound holds and the analyser's bound of the region covers the cycles.
A small driver (one addition, one product on lines carrying the facts) shows the tagged routines'
bounds are reached: operands that take their slowest paths come within a few cycles of them.
"""

import functools
import os
import shutil
import subprocess

import numpy as np
import pytest

from nnbuild.numerics import float_facts
from nnbuild.runners import CHECK_MAIN, simavr
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops
from nnbuild.wcet import avr_timing as T

from test_wcet_avr import board
from test_wcet_avr_context import (Probe, build_tracer, called_targets, check_path_entry, entry_site,
                                   fact_code, frames_reaching, loop_headers, run_trace_sites,
                                   value_fact_entry)
from test_wcet_avr_generated import ARCH, generate_and_build, n_inputs

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not (shutil.which("avr-gcc") and os.path.exists(ARCH)),
                                reason="avr-gcc or the f1tenth example missing")]

#: the generated code of the F1/10 controller (float32 MLP shape, tanh layers) that writes value facts
#: (avr_libloops.json "emitted_by"); entries other code writes are traced where that code is built
#: (nn_sigmoid's in test_wcet_avr_adversarial.py, a TPG's cos in test_tpg_cos_guard.py and its
#: integer-test tags in test_tpg_int_facts.py, Gravity's update subtraction in test_gravity_update.py)
F1_CODE = {"mlp", "nn_tanh"}


def f1_entry(ent):
    """A value-fact entry whose fact F1/10's code writes (fails naming an entry without "emitted_by")."""
    return value_fact_entry(ent) and bool(fact_code(ent) & F1_CODE)


@functools.lru_cache(maxsize=None)
def value_tags():
    """The value tags F1/10's code gives: those of the table entries it writes the facts of, and
    __divsf3:A.normal (nn_tanh's, which constant operands also give)."""
    table = avr_loops.load_table() + avr_loops.load_paths()
    entries = [ent for ent in table if f1_entry(ent)]
    return frozenset({t for e in entries for t in e["within"] if t in float_facts.VALUE_ONLY_TAGS}
                     | {"__divsf3:A.normal"})


def cases(n_in):
    rng = np.random.default_rng(13)
    rows = [rng.uniform(-1, 1, n_in), np.full(n_in, 1e-45), np.full(n_in, -1e-39), np.full(n_in, 3e-36),
            np.where(np.arange(n_in) % 2 == 0, 1e4, -1e4), np.full(n_in, 1e30),
            rng.choice([-1e-38, -1e-20, 0.0, 1e-30, 1.0, -0.5], size=n_in),
            np.full(n_in, np.inf), np.where(np.arange(n_in) % 2 == 0, np.inf, -np.inf), np.full(n_in, np.nan),
            np.where(np.arange(n_in) == 3, np.inf, 0.25), np.where(np.arange(n_in) == 5, np.nan, -0.25)]
    return np.array(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    out = tmp_path_factory.mktemp("f1vf")
    elf, facts_path = generate_and_build(out, ARCH, "f1tenth")
    tracer = build_tracer(out / "avr_trace")
    if tracer is None:
        pytest.skip("libsimavr not available")
    facts = avr_ipet.load_flowfacts(facts_path)
    prog = avr_decode.load(elf)
    an = avr_ipet.Analyzer(prog, T.family(board()), facts, avr_loops.load_table(), None, avr_loops.load_paths())
    an.region(prog.address_of("f1tenth_infer"))
    probes = {}
    targets = called_targets(prog)
    for (addr, ctx), res in an.done.items():
        if addr in targets and ctx.names & value_tags():
            probes[("region", addr, ctx)] = Probe(addr, ctx.names, ctx.site if ctx.site is not None else "!", "eq")
    for k, ent in enumerate(avr_loops.load_table()):
        if not set(ent.get("within", [])) & value_tags():
            continue
        header = prog.address_of(ent["symbol"]) + ent["offset"]
        group = 1 + len({key[1] for key in probes if key[0] == "loop"})
        for start in sorted({a for a, _ in an.done}):
            heads = loop_headers(an, prog, start, header)
            for t in frames_reaching(an, prog, start) if heads else ():
                probes[("loop", k, t)] = Probe(t, ent["within"], None, "sup", sorted(heads), group)
    counters = avr_loops.load_counters()
    for k, ent in enumerate(avr_loops.load_paths()):  # infeasible-path entries under value facts
        if not f1_entry(ent):
            continue
        start = prog.address_of(ent["symbol"])
        pcs = [start + off for off, _ in ent["blocks"].values()]
        for ctr in ent.get("counters", {}).values():
            pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in counters[ctr]["points"]]
        group = 1 + len({key[1] for key in probes if key[0] in ("loop", "paths")})
        for t in frames_reaching(an, prog, start):
            probes[("paths", k, t)] = Probe(t, ent["within"], entry_site(prog, ent), "sup+", pcs, group)
    keys = list(probes)
    run_trace_sites(tracer, elf, [probes[k] for k in keys], cases(n_inputs(out, "f1tenth")), an.ctxs.names,
                    an.ctxs.sites, out, an.site_tags)
    return facts, an, dict(zip(keys, (probes[k] for k in keys)))


def test_every_value_tag_reaches_a_call(traced):
    """The generated code's facts land on calls: every value tag is in some analysed context."""
    facts, an, _ = traced
    assert {v["op"] for v in facts["values"]} == {"mul", "add", "div", "exp"}
    seen = set().union(*(ctx.names for _, ctx in an.done)) & value_tags()
    assert seen == value_tags()


def test_tagged_regions_cover_every_invocation(traced):
    _, an, probes = traced
    print()
    observed = 0
    for key, p in probes.items():
        if key[0] != "region":
            continue
        res = an.done[(key[1], key[2])]
        name = res.name + res.ctx.label(an.prog)
        if p.invocations:
            observed += 1
            print(f"  {name:80s} bound {res.cycles:5d} simavr max {p.maxcycles:5d} ({p.invocations} calls)")
        assert p.maxcycles <= res.cycles, f"UNSOUND: {name}: {p.maxcycles} > {res.cycles}"
    assert observed >= 3


def test_value_fact_loop_entries_hold(traced):
    """Each table entry conditioned on a value tag: loop header passes per invocation in context."""
    _, an, probes = traced
    table = avr_loops.load_table()
    checked = set()
    print()
    for key, p in probes.items():
        if key[0] != "loop":
            continue
        ent = table[key[1]]
        worst = max((sum(v) for _, _, v in p.vectors), default=0)
        print(f"  {ent['symbol']}+{ent['offset']:#x} in {', '.join(ent['within'])}: header_max "
              f"{ent['header_max']}, simavr max {worst} over {p.invocations} calls of {an.prog.describe(p.target)}")
        assert worst <= ent["header_max"]
        if p.invocations:
            checked.add(key[1])
    wanted = {k for k, e in enumerate(table) if set(e.get("within", [])) & value_tags()}
    assert wanted <= checked, [f"{table[k]['symbol']}+{table[k]['offset']:#x}" for k in wanted - checked]


def test_value_fact_path_entries_hold(traced):
    """Each "paths" entry conditioned on a value tag: every observed count vector of an invocation
    in its context satisfies its rows (inf/NaN or zero operands skip the product, one normalisation
    shift, no round-up after an overflow or a far alignment, no carry after a far alignment)."""
    _, _, probes = traced
    counters = avr_loops.load_counters()
    wanted = [k for k, e in enumerate(avr_loops.load_paths()) if f1_entry(e)]
    assert wanted
    print()
    for k in wanted:
        check_path_entry(avr_loops.load_paths()[k], counters,
                         [v for key, p in probes.items() if key[0] == "paths" and key[1] == k for v in p.vectors])


DRIVER = """#include "vf.h"
void vf_add(const float in[2], float out[1]) { out[0] = in[0] + in[1]; }
void vf_mul(const float in[2], float out[1]) { out[0] = in[0] * in[1]; }
"""


def f32(exponent, mantissa):
    return np.array([(exponent << 23) | mantissa], np.uint32).view(np.float32)[0]


def driver_cases(op, rng):
    """add: pairs of one sign (zero, subnormal and normal, every exponent difference 0..40, mantissas
    that carry and round up); mul: zero or normal factors whose exponents sum to >= 127."""
    mants = [0, 0x7FFFFF, 0x7FFF80, 0x400000, 0x000001]
    rows = []
    if op == "add":
        for eb in range(0, 45):
            for mb in mants:
                rows += [(0.0, f32(eb, mb)), (f32(eb, mb), 0.0)]
        for d in range(0, 41):
            for _ in range(6):
                ea = int(rng.integers(d + 1, 255))
                a, b = f32(ea, int(rng.choice(mants + [int(rng.integers(0, 1 << 23))]))), \
                    f32(ea - d, int(rng.choice(mants + [int(rng.integers(0, 1 << 23))])))
                rows += [(a, b), (b, a), (-a, -b)]
    else:
        for ea in (1, 2, 60, 126, 127, 128, 200, 254):
            for eb in {127 - ea + k for k in (0, 1, 2, 60, 127)}:
                if 1 <= eb <= 254:
                    rows += [(f32(ea, ma), f32(eb, mb)) for ma in mants for mb in mants]
        rows += [(0.0, 1.5), (-2.0, 0.0), (np.inf, 2.0), (np.nan, 1.0)]
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("op, tags, slack", [("add", float_facts.ADD_TAGS, 5), ("mul", float_facts.MUL_TAGS, 2)])
def test_tagged_routines_are_driven_to_their_bound(tmp_path, op, tags, slack):
    """The soft-float routine behind a value-fact line, analysed in the fact's context, against
    simavr on operands that drive its slowest paths (0 + 2^-96 aligns by 31 bits after a swap; a
    product of mantissas below 2 takes the normalisation shift and a round-up): the bound covers
    every case and exceeds the slowest by at most `slack` cycles."""
    (tmp_path / "vf.h").write_text("void vf_add(const float in[2], float out[1]);\n"
                                   "void vf_mul(const float in[2], float out[1]);\n")
    (tmp_path / "vf.c").write_text(DRIVER)
    b = board()
    elf = str(tmp_path / f"vf_{op}.elf")
    subprocess.run([b["cc"], *b["cflags"], "-Os", f"-I{tmp_path}", '-DNN_HEADER="vf.h"', f"-DNN_INFER=vf_{op}",
                    "-DNN_IN=2", "-DNN_OUT=1", str(tmp_path / "vf.c"),
                    str(CHECK_MAIN),
                    *b["ldflags"], "-lm", "-o", elf], check=True, capture_output=True)
    line = 2 if op == "add" else 3
    facts = {"loops": [], "layers": [], "values": [{"file": "vf.c", "line": line, "op": op, "tags": list(tags),
                                                     "why": "the cases below keep the fact"}]}
    bound = avr_ipet.analyze(elf, f"vf_{op}", facts, b, None).cycles
    x = driver_cases(op, np.random.default_rng(5))
    _, cycles = simavr.run_cases(elf, x, 1, entry_symbol=f"vf_{op}", mcu=b["mcu"], freq=b["clock_hz"],
                                 harness=simavr.build_harness(tmp_path / "simavr_run"))
    print(f"\n  {op} in {', '.join(tags)}: bound {bound}, simavr max {cycles.max()} over {len(x)} operand pairs")
    assert cycles.max() <= bound <= cycles.max() + slack
