"""A TPG's exp(u + cos(u)) under one |u| < 1024 test (nnbuild/codegen/tpg_lower.py Guard) and the
value fact cos:|x|<1024 it gives the cos call: avr-libc's cos then reduces its argument in at most
10 passes (avr_libloops.json, __fp_rempio2 in that context). Checked here: the generated shape
and its flow fact, and under simavr the tagged cos driven to its bound (arguments just below
1024 whose remainder takes the subtraction on every other pass, as the paths entry allows).
"""

import json

import numpy as np
import pytest

from conftest import needs_avr
from test_wcet_avr import board
from tpg_helpers import SIPS22, avr_libm_driver, dot_file

from nnbuild import codegen
from nnbuild.frontends import gegelati_dot
from nnbuild.ir.tpg import Environment
from nnbuild.numerics.float_facts import TPG_COS_TAGS
from nnbuild.runners import simavr
from nnbuild.wcet import avr_ipet

#: fishing_derby.9's T2: v34 = v32 + cos(v32), v35 = exp(v34)
GUARDED = """            if (fabs(v32) < 1024.0) { /* few range-reduction passes in cos */
                v33 = fd_cos_int_small(v32);
                v34 = v32 + v33;
                v35 = fd_exp_int(v34);
            } else { /* |u +- cos(u)| >= 1024.0 - 1, or NaN: outside exp's domain */
                v33 = fd_cos_int(v32);
                v34 = v32 + v33;
                v35 = (v34 < 0.0) ? 0.0 : v34 * (double)INFINITY;
            }"""


@pytest.mark.skipif(not SIPS22.is_dir(), reason=f"{SIPS22} not present (../shared is not beside this checkout)")
@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_the_guard_and_its_value_fact_are_generated(tmp_path, shape):
    model = gegelati_dot.load(dot_file("fishing_derby.9", "cleaned"), Environment.load("sips22-atari"))
    model.name = "fd"
    codegen.generate(model, tmp_path, shape=shape)
    code = (tmp_path / "fd.c").read_text()

    def flat(text):
        return "\n".join(line.strip() for line in text.splitlines())
    assert flat(GUARDED) in flat(code)
    lines = code.splitlines()
    facts = json.loads((tmp_path / "fd.flowfacts.json").read_text())
    [fact] = [f for f in facts["values"] if f["op"] == "cos"]
    assert fact["tags"] == list(TPG_COS_TAGS)
    assert lines[fact["line"] - 1].strip() == "return cos(x);"
    assert lines[fact["line"] - 9].startswith("FD_LOOKUP double fd_cos_int_small(double x)")
    # the definition, T2's one guarded call and fd_cos_int's table range (|x| <= 255 < 1024)
    assert code.count("fd_cos_int_small(") == 3
    routed = code[code.index("FD_LOOKUP double fd_cos_int(double x)"):]
    assert flat(routed[:routed.index("\n}\n")]).startswith(flat(ROUTED))


#: fishing_derby.9's cos helper: arguments in the table's range go to the `_small` variant (its cos
#: call carries the value fact), the helper's own cos call keeps the others
ROUTED = """FD_LOOKUP double fd_cos_int(double x)
{
    if (x >= -255.0 && x <= 255.0) {
        return fd_cos_int_small(x); /* the table's range is below 1024.0: few range-reduction passes */
    } else if (!(fabs(x) <= DBL_MAX)) {
        return x - x;
    }
    return cos(x);"""


DRIVER = """#include <math.h>
void cg_cos(const float in[1], float out[1]) { out[0] = (float)cos(in[0]); }
"""


def small_arguments(rng):
    """|x| < 1024: every binade 2^0..2^9 with mantissas just below pi/2's (0xC90FDA: the remainder
    stays near the modulus, subtracting on every other pass), extremes, random ones; |x| < 1;
    both signs."""
    m = np.unique(np.concatenate([0xC90FDA - (1 << np.arange(18)), 0xC90FDA - rng.integers(0, 1 << 17, 40),
                                  [0xC90FDA, 0xC90FDB, 0x800000, 0xFFFFFF], rng.integers(0x800000, 1 << 24, 40)]))
    exps = np.arange(127, 137, dtype=np.uint32)
    x = ((exps[:, None] << np.uint32(23)) | (m[None, :].astype(np.uint32) & np.uint32(0x7FFFFF))).ravel()
    x = x.view(np.float32)
    x = np.concatenate([x, np.float32([0.0, 1e-45, 0.5, 0.99999994, 1023.99994]), np.float32(np.nextafter(
        np.float32(1024), np.float32(0)))[None]])
    return np.concatenate([x, -x]).astype(np.float32)


def huge_arguments(rng):
    """The slowest context-free arguments: cos_sweep's mantissas at the largest exponents (128 passes)."""
    m = np.concatenate([0xC90FDA - (1 << np.arange(18)), 0xC90FDA - rng.integers(0, 1 << 17, 40)]).astype(np.uint32)
    x = ((np.uint32(254) << np.uint32(23)) | (m & np.uint32(0x7FFFFF))).view(np.float32)
    return np.concatenate([x, np.float32([2.833547e38, 1.5497031e38, 1.072566e38])])


@pytest.mark.e2e
@needs_avr
def test_tagged_cos_is_driven_to_its_bound(tmp_path):
    """cos behind a cos:|x|<1024 fact, analysed in that context, against simavr on arguments below
    1024: under avr_trace, __fp_rempio2 runs its 10 passes (the loop and paths entries' maxima, never
    more), and the tagged bound covers every case with the context-free bound's own slack (the
    polynomial's, measured on the slowest huge arguments) plus a few cycles: the tag removes
    exactly the passes that cannot run."""
    from test_wcet_avr_context import Probe, build_tracer, check_path_entry, run_trace_sites
    from nnbuild.wcet import avr_decode, avr_loops
    b = board()
    elf = avr_libm_driver(tmp_path, "cos", DRIVER)
    facts = {"loops": [], "layers": [], "values": [{"file": "cg.c", "line": 2, "op": "cos", "tags": list(TPG_COS_TAGS),
                                                     "why": "the cases below keep |x| < 1024"}]}
    bound = avr_ipet.analyze(elf, "cg_cos", facts, b, None).cycles
    free = avr_ipet.analyze(elf, "cg_cos", dict(facts, values=[]), b, None).cycles
    rng = np.random.default_rng(7)
    small, huge = small_arguments(rng), huge_arguments(rng)
    harness = simavr.build_harness(tmp_path / "simavr_run")
    _, cycles = simavr.run_cases(elf, small[:, None], 1, entry_symbol="cg_cos", mcu=b["mcu"], freq=b["clock_hz"],
                                 harness=harness)
    _, free_cycles = simavr.run_cases(elf, huge[:, None], 1, entry_symbol="cg_cos", mcu=b["mcu"],
                                      freq=b["clock_hz"], harness=harness)
    print(f"\n  cos in {TPG_COS_TAGS[0]}: bound {bound}, simavr max {cycles.max()} over {len(small)} arguments; "
          f"context-free bound {free}, simavr max {free_cycles.max()} (huge arguments)")
    assert cycles.max() <= bound <= cycles.max() + (free - free_cycles.max()) + 10
    assert bound < free - 1500
    # the entries themselves, per invocation of __fp_rempio2 (every call of it here is cos's, tagged)
    tracer = build_tracer(tmp_path / "avr_trace")
    if tracer is None:
        pytest.skip("libsimavr not available")
    prog = avr_decode.load(elf)
    [ent] = [e for e in avr_loops.load_paths() if e.get("id") == "passes-cos-small"]
    start = prog.address_of("__fp_rempio2")
    cmp = start + next(e["offset"] for e in avr_loops.load_table()
                       if e["symbol"] == "__fp_rempio2" and e.get("within") == list(TPG_COS_TAGS) and e["header_max"] == 10)
    probe = Probe(start, (), None, "sup", [start + off for off, _ in ent["blocks"].values()] + [cmp])
    run_trace_sites(tracer, elf, [probe], small[:, None], set(), (), tmp_path)
    counts = np.array([v for _, _, v in probe.vectors])
    print(f"  __fp_rempio2: {probe.invocations} calls, max (sub, latch, compare) {counts.max(axis=0).tolist()}")
    assert probe.invocations == len(small)
    assert counts[:, 1].max() == 10 and counts[:, 0].max() <= 10 and counts[:, 2].max() <= 10
    check_path_entry(ent, {}, [(m, c, v[:2]) for m, c, v in probe.vectors])
    # a product of the sine polynomial multiplies two normal numbers (__fp_split3's exponent-0 and
    # inf/NaN paths do not run) or, for an infinite or NaN argument, has an inf/NaN operand and
    # leaves before the product code (the cos-sinus-split-kind entry, K + 6 P <= 6)
    [mul] = [e for e in avr_loops.load_paths() if e.get("id") == "cos-sinus-split-kind"]
    counters = avr_loops.load_counters()
    pcs = [prog.address_of(pt["symbol"]) + pt["offset"] for c in mul["counters"].values() for pt in counters[c]["points"]]
    mprobe = Probe(prog.address_of("__mulsf3x"), mul["within"], None, "sup+", pcs)
    both = np.concatenate([small, huge, np.float32([np.inf, -np.inf, np.nan])])
    run_trace_sites(tracer, elf, [mprobe], both[:, None], set(mul["within"]), (), tmp_path)
    assert mprobe.invocations == 7 * len(both)  # y*y, 5 Horner products, P(t)*y per call
    check_path_entry(mul, counters, mprobe.vectors)
    k_points = len(counters[mul["counters"]["K"]]["points"])
    seen = {(sum(v[:k_points]), sum(v[k_points:])) for _, _, v in mprobe.vectors}
    assert {(0, 1), (6, 0)} <= seen <= {(0, 1), (3, 0), (6, 0)}  # K counts 3 per inf/NaN operand
