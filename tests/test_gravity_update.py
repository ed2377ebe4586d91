"""The Gravity SGD update's subtraction on AVR (float32 value-fact shape, codegen/gravity.py
emit_fact_subtract), on simavr: w - p done exactly in integers when the operands can cancel (same
signs, both normal, exponents at most 1 apart) and by __subsf3 under the "__addsf3x:no-cancel"
fact otherwise. Checked here: the shape gives __subsf3's bits on every operand pair the update can
see (p = rate * g is zero, inf, NaN or normal of biased exponent >= 25), and the tagged __subsf3
is driven to its bound (avr_libloops.json's no-cancel entry: at most one normalisation pass)."""

import subprocess

import numpy as np
import pytest

from conftest import needs_avr
from nnbuild import pipeline
from nnbuild.codegen import common, gravity
from nnbuild.runners import CHECK_MAIN, simavr
from nnbuild.numerics import float_facts
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops
from nnbuild.wcet import avr_timing as T

from test_wcet_avr_context import (Probe, build_tracer, check_path_entry, entry_site, frames_reaching, loop_headers,
                                   run_trace_sites)

pytestmark = [pytest.mark.e2e, needs_avr]

HEADER = "void upd_shape(const float in[2], float out[1]);\nvoid upd_ref(const float in[2], float out[1]);\n" \
         "void upd_sub(const float in[2], float out[1]);\n"


def driver():
    """(C text, flow facts): upd_shape runs the generated subtraction on (w, p), upd_ref is the
    plain w - p, upd_sub a plain w - p carrying the no-cancel fact."""
    ff = common.FlowFacts("upd")
    e = gravity.Emitter(ff)
    gravity.emit_fact_subtract(e, gravity.NEAR_RATE_EXP)
    sub = ff.value("add", gravity.NO_CANCEL_TAGS, "the cases keep the fact")
    text = "\n".join([
        "#include <stdint.h>", '#include "upd.h"', "typedef float gv_t;",
        "typedef union { float f; uint32_t u; } gv_bits;",
        "void upd_ref(const float in[2], float out[1]) { out[0] = in[0] - in[1]; }",
        f"void upd_sub(const float in[2], float out[1]) {{ out[0] = in[0] - in[1]; {sub}}}",
        "void upd_shape(const float in[2], float out[1]) {", "    gv_bits wv, pv;",
        "    wv.f = in[0];", "    pv.f = in[1];", *e.lines, "    out[0] = wv.f;", "}", ""])
    code, facts, _ = ff.resolve(text)
    return code, facts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gravity_update")
    code, facts = driver()
    (tmp / "upd.h").write_text(HEADER)
    (tmp / "upd.c").write_text(code)
    b = pipeline.load_board("avr")
    elfs = {}
    for entry in ("upd_shape", "upd_ref", "upd_sub"):  # the check main calls one NN_INFER
        elfs[entry] = str(tmp / f"{entry}.elf")
        subprocess.run([b["cc"], *b["cflags"], "-Os", f"-I{tmp}", '-DNN_HEADER="upd.h"', f"-DNN_INFER={entry}",
                        "-DNN_IN=2", "-DNN_OUT=1", str(tmp / "upd.c"), str(CHECK_MAIN), *b["ldflags"], "-lm",
                        "-o", elfs[entry]], check=True, capture_output=True)
    return b, elfs, facts, simavr.build_harness(tmp / "simavr_run")


def run(built, entry, pairs):
    b, elfs, _, harness = built
    out, cycles = simavr.run_cases(elfs[entry], pairs, 1, entry_symbol=entry, mcu=b["mcu"], freq=b["clock_hz"],
                                   harness=harness)
    return out[:, 0].view(np.uint32), cycles


def f32(exponent, mantissa, sign=0):
    return np.uint32((sign << 31) | (exponent << 23) | mantissa).view(np.float32)


MANTISSAS = (0, 1, 2, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFE, 0x7FFFFF, 0x555555, 0x2AAAAA)


def update_pairs(rng):
    """(w, p) pairs the update can see: p zero, inf, NaN or normal of exponent >= 25; w anything.
    Near pairs (same signs, exponents 0 or 1 apart) with edge and random mantissas, ties of the
    r >= 2^24 rounding, equal magnitudes; far pairs; zeros, subnormals, inf and NaN."""
    rows = []
    for _ in range(400):
        ep = int(rng.integers(25, 255))
        ew = int(np.clip(ep + rng.integers(-1, 2), 1, 254))
        mw, mp = (int(rng.choice(MANTISSAS)) if rng.random() < 0.4 else int(rng.integers(0, 1 << 23))
                  for _ in range(2))
        s = int(rng.integers(0, 2))
        rows.append((f32(ew, mw, s), f32(ep, mp, s if rng.random() < 0.8 else 1 - s)))
    for e in (25, 26, 60, 126, 127, 200, 254):
        for mw in MANTISSAS:
            for mp in MANTISSAS:
                for d in (-1, 0, 1):
                    if 1 <= e + d <= 254:
                        rows += [(f32(e + d, mw), f32(e, mp)), (f32(e, mp, 1), f32(e + d, mw, 1))]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 1e-38, 1.5, -3.0, 3e38]
    ps = [0.0, -0.0, np.inf, -np.inf, np.nan, f32(25, 0), f32(25, 0x7FFFFF, 1), 1.5, -1e-5, 3e38]
    rows += [(w, p) for w in specials for p in ps]
    for d in range(2, 40):
        for _ in range(4):
            ep = int(rng.integers(25, 255 - d))
            rows += [(f32(ep + d, int(rng.integers(0, 1 << 23))), f32(ep, int(rng.integers(0, 1 << 23)))),
                     (f32(ep, int(rng.integers(0, 1 << 23)), 1), f32(ep + d, int(rng.integers(0, 1 << 23)), 1))]
    return np.array(rows, dtype=np.float32)


def test_update_subtraction_keeps_subsf3s_bits(built):
    """upd_shape and __subsf3 give the same bits on every pair (NaN: both NaN); the shape's bound
    covers each pair's cycles."""
    pairs = update_pairs(np.random.default_rng(3))
    got, cycles = run(built, "upd_shape", pairs)
    want, _ = run(built, "upd_ref", pairs)
    nan = np.isnan(want.view(np.float32))
    assert np.array_equal(np.isnan(got.view(np.float32)), nan)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, [(pairs[i].view(np.uint32).tolist(), hex(got[i]), hex(want[i])) for i in bad[:5]]
    b, elfs, facts, _ = built
    bound = avr_ipet.analyze(elfs["upd_shape"], "upd_shape", facts, b, None).cycles
    print(f"\n  update subtraction: bound {bound}, simavr max {cycles.max()} over {len(pairs)} pairs")
    assert cycles.max() <= bound


def no_cancel_pairs(rng):
    """Pairs that keep the no-cancel fact, driving __subsf3's slow paths: different signs (an
    addition of magnitudes, every exponent difference 0..40), same signs with exponents >= 2
    apart (2..40), a zero, a subnormal less zero, inf and NaN; mantissas that carry and round."""
    mants = [0, 0x7FFFFF, 0x7FFF80, 0x400000, 0x000001]
    rows = []
    for d in range(0, 41):
        for _ in range(6):
            ea = int(rng.integers(d + 1, 255))
            a = f32(ea, int(rng.choice(mants + [int(rng.integers(0, 1 << 23))])))
            b = f32(ea - d, int(rng.choice(mants + [int(rng.integers(0, 1 << 23))])))
            rows += [(a, -b), (-b, a), (-a, b)]
            if d >= 2:
                rows += [(a, b), (b, a), (-a, -b), (-b, -a)]
    rows += [(w, p) for w in (0.0, -0.0, 1e-45, -1e-40, 1.5, np.inf, np.nan) for p in (0.0, -0.0, np.inf, np.nan)]
    rows += [(0.0, 1.5), (-0.0, -2.5), (np.inf, np.inf), (-1e-40, 0.0)]
    return np.array(rows, dtype=np.float32)


def test_no_cancel_subtraction_is_driven_to_its_bound(built):
    """__subsf3 in the no-cancel context (one normalisation pass at most) on pairs that keep the
    fact: the bound covers every pair and exceeds the slowest by at most 8 cycles (3%)."""
    b, elfs, facts, _ = built
    bound = avr_ipet.analyze(elfs["upd_sub"], "upd_sub", facts, b, None).cycles
    _, cycles = run(built, "upd_sub", no_cancel_pairs(np.random.default_rng(5)))
    print(f"\n  __subsf3 in __addsf3x:no-cancel: bound {bound}, simavr max {cycles.max()}")
    assert cycles.max() <= bound <= cycles.max() + 8


def test_no_cancel_table_entries_hold_per_call(built, tmp_path):
    """Each avr_libloops.json entry under the no-cancel tag, per __subsf3 call on simavr (the F1/10
    tracer of test_wcet_avr_context.py): the normalisation loop's header runs at most header_max
    times and reaches it; the carry block's path rows hold for every count vector."""
    b, elfs, facts, _ = built
    tracer = build_tracer(tmp_path / "avr_trace")
    if tracer is None:
        pytest.skip("libsimavr not available")
    elf = elfs["upd_sub"]
    prog = avr_decode.load(elf)
    an = avr_ipet.Analyzer(prog, T.family(b), facts, avr_loops.load_table(), None, avr_loops.load_paths())
    an.region(prog.address_of("upd_sub"))
    tags = set(float_facts.NO_CANCEL_TAGS)
    probes, table, paths = {}, avr_loops.load_table(), avr_loops.load_paths()
    for k, ent in enumerate(table):
        if set(ent.get("within", [])) & tags:
            header = prog.address_of(ent["symbol"]) + ent["offset"]
            for start in sorted({a for a, _ in an.done}):
                heads = loop_headers(an, prog, start, header)
                for t in frames_reaching(an, prog, start) if heads else ():
                    probes[("loop", k, t)] = Probe(t, ent["within"], None, "sup", sorted(heads), 1)
    counters = avr_loops.load_counters()
    for k, ent in enumerate(paths):
        if set(ent.get("within", [])) & tags:
            start = prog.address_of(ent["symbol"])
            pcs = [start + off for off, _ in ent["blocks"].values()]
            pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for ctr in ent.get("counters", {}).values()
                    for pt in counters[ctr]["points"]]
            for t in frames_reaching(an, prog, start):
                probes[("paths", k, t)] = Probe(t, ent["within"], entry_site(prog, ent), "sup+", pcs, 2)
    assert {key[0] for key in probes} == {"loop", "paths"}
    keys = list(probes)
    run_trace_sites(tracer, elf, [probes[k] for k in keys], no_cancel_pairs(np.random.default_rng(5)),
                    an.ctxs.names, an.ctxs.sites, tmp_path, an.site_tags)
    print()
    for key, p in probes.items():
        ent = (table if key[0] == "loop" else paths)[key[1]]
        if key[0] == "loop":
            worst = max((sum(v) for _, _, v in p.vectors), default=0)
            print(f"  {ent['symbol']}+{ent['offset']:#x} in {', '.join(ent['within'])}: header_max "
                  f"{ent['header_max']}, simavr max {worst} over {p.invocations} calls")
            assert p.invocations and worst == ent["header_max"]
        else:
            check_path_entry(ent, counters, p.vectors)
