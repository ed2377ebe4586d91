"""exp's paths entries (avr_libloops.json). `fraction-or-small-argument` (symbol exp) ties the parts of
one exp call to the integer part of z = |x|*log2(e): z < 1 takes modf's fast path (f = z, any float
in [0, 1)); z >= 1 takes modf's split (f a multiple of 2^-23), whose first shift loop runs
150 - e(z) passes while exp's own byte conversion runs e(z) - 126; ldexp denormalises (and 1/r then
pre-normalises a subnormal divisor) only when trunc(z) >= 125, i.e. z >= 64, where f is a multiple of
2^-17. The weighted alignment steps of the 7 Horner additions (2 per byte step, 1 per bit step of
__addsf3x) are bounded for each case from the coefficient table in the linked image (interval
arithmetic over every binade of f, every f = m*2^-g below 2^-(g-11) one by one). Also here:
`exp-powser-opposite-signs` (the additions subtract: the partial sums keep their coefficients'
alternating signs), `modf-fraction-exact` (modf's z - trunc(z) aligns nothing), `shift-back-as-often`
(modf's two shift loops) and `exp-powser-split-kind` (__mulsf3x: K <= 1). Every row is checked on
every call of a simavr sweep of exp (avr_trace) that reaches the bounds, and the lone expf's bound
covers the sweep's slowest run.
"""

import numpy as np
import pytest

from conftest import needs_avr
from test_wcet_avr import board
from tpg_helpers import avr_libm_driver, powser_table, trace_calls

from nnbuild.runners import simavr
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops

ENTRY = "fraction-or-small-argument"
DRIVER = """#include <math.h>
void cg_exp(const float in[1], float out[1]) { out[0] = expf(in[0]); }
"""
LOG2E = float(np.log2(np.e))
#: per-step relative error the interval evaluation allows (the soft-float steps truncate to >= 24 bits)
EPS = 2.0 ** -18


def paths_entry(ident):
    [ent] = [e for e in avr_loops.load_paths() if e.get("id") == ident]
    return ent


def counter_weights():
    """(byte step, bit step, modf split, modf shift pass) weights of counter exp-align-or-fraction."""
    points = avr_loops.load_counters()[paths_entry(ENTRY)["counters"]["W"]]["points"]
    w = {(p["symbol"], p["offset"]): p.get("weight", 1) for p in points}
    return w[("__addsf3x", 66)], w[("__addsf3x", 82)], w[("modf", 30)], w[("modf", 34)]


def steps(d, weights):
    """__addsf3x's weighted alignment steps for exponent difference d: floor(d/8) byte and d mod 8
    bit steps (d > 32 leaves before any step)."""
    byte, bit = weights
    return np.where(d > 32, 0, byte * (d // 8) + bit * (d % 8))


def horner(coef, flo, fhi, weights=(1, 1)):
    """Interval evaluation of the Horner additions acc_k*f + c_(k+1) (acc_0 = c_0) for f in
    [flo, fhi] (f > 0), every product and sum widened by EPS: (an upper bound of the weighted
    alignment steps per interval, the lowest and highest P). Asserts what the entries use: each
    acc_k has a known sign, that of c_k, opposite to c_(k+1)'s (the additions subtract), and
    2^-17 <= |acc_k| < 2 (a normal factor: the split-kind entry of __mulsf3x)."""
    lo, hi = np.full_like(flo, coef[0]), np.full_like(flo, coef[0])
    total = np.zeros(flo.shape, np.int64)
    for k, c in enumerate(coef[1:]):
        sign = np.sign(coef[k])
        assert np.all(lo * sign > 0) and np.all(hi * sign > 0), f"acc_{k} changes sign"
        assert np.sign(c) == -sign, f"c_{k + 1} has acc_{k}'s sign: that addition would not subtract"
        assert np.all(np.maximum(np.abs(lo), np.abs(hi)) < 2.0) and np.minimum(np.abs(lo), np.abs(hi)).min() >= 2.0 ** -17
        cand = np.stack([lo * flo, lo * fhi, hi * flo, hi * fhi])
        plo, phi = cand.min(axis=0), cand.max(axis=0)
        plo, phi = plo - np.abs(plo) * EPS, phi + np.abs(phi) * EPS
        mlo, mhi = np.minimum(np.abs(plo), np.abs(phi)), np.maximum(np.abs(plo), np.abs(phi))
        elo, ehi = np.floor(np.log2(mlo)).astype(np.int64), np.floor(np.log2(mhi)).astype(np.int64)
        assert np.all(ehi - elo <= 1)
        ec = int(np.floor(np.log2(abs(c))))
        total += np.maximum(steps(np.abs(elo - ec), weights), steps(np.abs(ehi - ec), weights))
        lo, hi = plo + c, phi + c
        lo, hi = lo - np.abs(lo) * EPS, hi + np.abs(hi) * EPS
    return total, lo.min(), hi.max()


def alignment_bound(coef, flo, fhi, weights=(1, 1)):
    return horner(coef, flo, fhi, weights)[0]


def binade_intervals(j, parts=2048):
    """[2^-j, 2^(1-j)) in `parts` equal intervals."""
    edges = 2.0 ** -j * (1 + np.arange(parts + 1) / parts)
    return edges[:-1], edges[1:]


def grid_bound(coef, g, weights):
    """Bound for f = m*2^-g (0 <= m < 2^g): the binades 2^-(g-11)..2^0 by intervals, every m < 2^11
    on its own (f = 0: zero products, no step)."""
    coarse = max(int(alignment_bound(coef, *binade_intervals(j), weights).max()) for j in range(1, g - 10))
    f = np.arange(1, 1 << 11) * 2.0 ** -g
    return max(coarse, int(alignment_bound(coef, f, f, weights).max()))


def polynomial_alignment_bounds(coef, weights=(1, 1)):
    """(any f in [0, 1), f = m*2^-23, f = m*2^-17) bounds of the weighted alignment steps. Below
    2^-60, |acc_k*f| < 2^-59 (|acc_k| < 2) against |c_k| >= 2^-17 gives d > 32, no step."""
    assert min(abs(c) for c in coef) >= 2.0 ** -17
    anyf = max(int(alignment_bound(coef, *binade_intervals(j), weights).max()) for j in range(1, 61))
    return anyf, grid_bound(coef, 23, weights), grid_bound(coef, 17, weights)


def polynomial_range(coef):
    """(lowest, highest) value of P over f in [0, 1) (P(0) = c_7 exactly)."""
    ranges = [horner(coef, *binade_intervals(j))[1:] for j in range(1, 61)]
    return min(min(r[0] for r in ranges), coef[-1]), max(max(r[1] for r in ranges), coef[-1])


def entry_numbers():
    """(M, B0, B1, B1s) as the rows of fraction-or-small-argument state them."""
    rows = paths_entry(ENTRY)["rows"]
    (r1, b0), (r2, zero) = rows[0], rows[1]
    m = r2["n"]
    assert zero == 0 and r2["W"] == -1 and r1["W"] == 1 == r1["L"]
    b1 = -r1["n"] - m - 24 + b0
    return m, b0, b1, b1 - rows[4][0]["slow"]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("expdrv")
    elf = avr_libm_driver(d, "exp", DRIVER)
    return elf, avr_decode.load(elf), d


@needs_avr
def test_alignment_bounds_follow_from_the_linked_table(driver):
    """The entry's numbers from the table in the image: the weighted step bounds (any f, z >= 1,
    z >= 64), the rows built from them, the powser entry's cap, the split weight above every cap
    (so the ILP cannot swap modf's paths), and P in [0.49, 1.0001] (ldexp's exponent eP >= 125)."""
    elf, prog, _ = driver
    count, coef = powser_table(elf, prog, "exp")
    assert count == 7
    byte, bit, split, shift = counter_weights()
    assert (byte, bit, shift) == (2, 1, 1)
    m, b0, b1, b1s = entry_numbers()
    assert m == split
    assert polynomial_alignment_bounds(coef, (byte, bit)) == (b0, b1, b1s) == (84, 68, 56)
    c1 = m + 24 + b1 - b0
    assert paths_entry(ENTRY)["rows"] == [[{"W": 1, "L": 1, "n": -c1}, b0], [{"W": -1, "n": m}, 0],
                                          [{"S": 1, "slow": -71}, 1], [{"slow": 7, "L": -1}, 0],
                                          [{"W": 1, "L": 1, "n": -c1, "slow": b1 - b1s}, b0]]
    assert paths_entry("exp-underflow-or-alignment")["rows"][1] == [{"A": 1, "tiny": b0}, b0]
    assert m > 7 * (3 * byte + 7 * bit) > b0  # 7 additions of <= 3 byte + 7 bit steps (d <= 31)
    low, high = polynomial_range(coef)
    assert 0.49 < low and high <= 1.0001
    # the unweighted bounds of the earlier entry still follow (63 any f, 54 for z >= 1)
    assert polynomial_alignment_bounds(coef)[:2] == (63, 54)


def sweep():
    """x whose f = frac(|x| log2 e) spans every binade down to 2^-40 (z < 1: x = f / log2 e); z = n +
    m*2^-23 for every m < 2^11 (n = 1) and random m (n = 1, 2, 3); z = n + m*2^-17 / 2^-16 for n in
    64..149 with small and random m (ldexp's denormalisation, 1/subnormal); a few ulps around each."""
    rng = np.random.default_rng(5)
    xs = [2.0 ** -j * (1 + rng.random(60)) / LOG2E for j in range(1, 41)]
    m = np.concatenate([np.arange(1, 1 << 11), rng.integers(1 << 11, 1 << 23, 300)])
    for n in (1, 2, 3):
        z = n + (m if n == 1 else m[::8] & ~((1 << n) - 1)) * 2.0 ** -23
        xs.append(z / LOG2E)
    for n in (64, 100, 124, 125, 126, 127, 128, 140, 147, 148, 149, 150):
        g = 17 if n < 128 else 16
        small = np.concatenate([np.arange(0, 1 << 9), rng.integers(0, 1 << g, 200)])
        xs.append((n + small * 2.0 ** -g) / LOG2E)
    xs.append(np.arange(1, 40) / LOG2E)  # z near integers: f = 0 or tiny
    xs.append(np.float32([1e-40, 3e-39, 1e-45]))  # z subnormal: f = z subnormal
    x = np.concatenate(xs).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(1)), np.nextafter(x, np.float32(0))])
    return np.concatenate([x, -x]).astype(np.float32)


def summed(ent, counters, vectors):
    """Per count vector of a probe over `ent`'s blocks and counters: {name: value} (counter
    points weighed)."""
    names = list(ent["blocks"])
    out = []
    for _, _, v in vectors:
        row, k = dict(zip(names, v[:len(names)])), len(names)
        for name, ctr in ent.get("counters", {}).items():
            ws = [pt.get("weight", 1) for pt in counters[ctr]["points"]]
            row[name] = sum(a * b for a, b in zip(ws, v[k:k + len(ws)]))
            k += len(ws)
        out.append(row)
    return out


def probe_for(prog, counters, ent, names=None):
    from test_wcet_avr_context import Probe
    pcs = [prog.address_of(ent["symbol"]) + off for off, _ in ent["blocks"].values()]
    for ctr in ent.get("counters", {}).values():
        pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in counters[ctr]["points"]]
    return Probe(prog.address_of(ent["symbol"]), ent.get("within", []) if names is None else names, None, "sup+", pcs)


@pytest.mark.e2e
@needs_avr
def test_entries_hold_and_are_reached_under_simavr(driver, tmp_path):
    """Every exp call of the sweep satisfies the rows (for some binary); the weighted steps reach
    their bounds (z < 1, z >= 1, z >= 64), modf's passes and exp's conversion loop add up to 24,
    ldexp's denormalisation and 1/subnormal occur only with L >= 7 and S reaches 72; the Horner
    additions never take the same-sign block and a zero product aligns nothing; modf's subtraction
    aligns nothing; modf's loops run equally often; __mulsf3x's K <= 1 is reached; the lone expf's
    bound covers every run."""
    from test_wcet_avr_context import check_path_entry
    elf, prog, d = driver
    counters = avr_loops.load_counters()
    x = sweep()
    ent = paths_entry(ENTRY)
    m, b0, b1, b1s = entry_numbers()
    ents = [ent, paths_entry("exp-powser-opposite-signs"), paths_entry("modf-fraction-exact"),
            paths_entry("shift-back-as-often"), paths_entry("exp-powser-split-kind"),
            paths_entry("exp-powser-zero-product-aligns-nothing"), paths_entry("modf-fraction-normal")]
    probes = [probe_for(prog, counters, e, () if e is ent else None) for e in ents]
    for k, p in enumerate(probes):
        p.group = k
    within = {n for e in ents for n in e.get("within", [])}
    trace_calls(elf, probes, x, tmp_path, within)
    assert probes[0].invocations == len(x)
    for e, p in zip(ents, probes):
        check_path_entry(e, counters, p.vectors)
    rows = summed(ent, counters, probes[0].vectors)
    small = [r["W"] for r in rows if r["n"] == 0]
    big = [r["W"] + r["L"] - m - 24 for r in rows if r["n"] == 1]
    slow = [r["W"] + r["L"] - m - 24 for r in rows if r["S"] >= 2]
    assert max(small) == b0 and max(big) == b1 and max(slow) == b1s
    assert all(r["L"] >= 7 for r in rows if r["S"] >= 2) and max(r["S"] for r in rows) == 72
    assert all(r["S"] <= 1 for r in rows if r["L"] < 7)
    assert max(r["same"] for r in summed(ents[1], counters, probes[1].vectors)) == 0
    adds = summed(ents[5], counters, probes[5].vectors)
    assert any(r["K"] == 1 for r in adds) and all(r["byte"] == r["bit"] == 0 for r in adds if r["K"] >= 1)
    assert max(8 * r["byte"] + r["bit"] for r in adds) == 32  # d = 32 reached with K = 0
    sub = summed(ents[2], counters, probes[2].vectors)
    assert sub and all(r["same"] == r["byte"] == r["bit"] == 0 for r in sub)
    assert all(r["K"] == 0 for r in summed(ents[6], counters, probes[6].vectors))
    loops = summed(ents[3], counters, probes[3].vectors)
    assert max(r["l2"] for r in loops) == 23 and all(r["l2"] in (0, r["l1"]) for r in loops)
    muls = summed(ents[4], counters, probes[4].vectors)
    assert max(r["K"] for r in muls) == 1
    b = board()
    bound = avr_ipet.analyze(elf, "cg_exp", {"loops": [], "layers": []}, b, None).cycles
    _, cycles = simavr.run_cases(elf, x[:, None], 1, entry_symbol="cg_exp", mcu=b["mcu"], freq=b["clock_hz"],
                                 harness=simavr.build_harness(d / "simavr_run"))
    print(f"\n  expf: bound {bound}, simavr max {cycles.max()} over {len(x)} arguments "
          f"(bound/max {bound / cycles.max():.3f})")
    assert cycles.max() <= bound
