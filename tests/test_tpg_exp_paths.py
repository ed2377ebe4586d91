"""exp's paths entry `fraction-or-small-argument` (avr_libloops.json, symbol exp): the alignment
steps of exp's polynomial are tied to the size of z = |x|*log2(e). z < 1: modf returns z itself as
the fraction f (its fast path), and the 7 Horner additions of __fp_powser take <= 63 alignment steps
in all (byte + bit steps of __addsf3x). z >= 1: modf splits z (its slow path, with the subtraction
z - trunc(z)), f is 0 or a multiple of 2^-23, and the additions take <= 54 steps. Checked here: the
two numbers recomputed from the coefficient table in the linked image (interval arithmetic over
every binade of f, every f = m*2^-23 below 2^-12 one by one), the entry's rows on every exp call of
a sweep under simavr (avr_trace), both maxima reached, the split-kind entry of exp's products
(__mulsf3x: K <= 1) likewise, and the bound of a lone expf covering the
sweep's slowest run.
"""


import numpy as np
import pytest

from conftest import needs_avr
from test_wcet_avr import board
from tpg_helpers import avr_libm_driver, powser_table

from nnbuild.runners import simavr
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops

ENTRY = "fraction-or-small-argument"
DRIVER = """#include <math.h>
void cg_exp(const float in[1], float out[1]) { out[0] = expf(in[0]); }
"""
LOG2E = float(np.log2(np.e))
#: per-step relative error the interval evaluation allows (the soft-float steps truncate to >= 24 bits)
EPS = 2.0 ** -18


def steps(d):
    """__addsf3x's alignment steps for exponent difference d: floor(d/8) byte + d mod 8 bit steps
    (d > 32 leaves before any step)."""
    return np.where(d > 32, 0, d // 8 + d % 8)


def alignment_bound(coef, flo, fhi):
    """Per interval [flo, fhi] of f > 0: an upper bound of the alignment steps of the Horner
    additions acc_k*f + c_k (k = 1..7, acc_0 = c_0), by interval arithmetic with every step's
    result widened by EPS: the exponent difference of the two operands over every exponent
    the product can have."""
    lo, hi = np.full_like(flo, coef[0]), np.full_like(flo, coef[0])
    total = np.zeros(flo.shape, np.int64)
    for c in coef[1:]:
        # acc_k: a known sign and 2^-17 <= |acc_k| < 2 (normal: the split-kind entry of __mulsf3x;
        # below 2^-60 in polynomial_alignment_bounds)
        assert np.all((lo > 0) | (hi < 0))
        assert np.all(np.maximum(np.abs(lo), np.abs(hi)) < 2.0) and np.minimum(np.abs(lo), np.abs(hi)).min() >= 2.0 ** -17
        cand = np.stack([lo * flo, lo * fhi, hi * flo, hi * fhi])
        plo, phi = cand.min(axis=0), cand.max(axis=0)
        plo, phi = plo - np.abs(plo) * EPS, phi + np.abs(phi) * EPS
        assert np.all((plo > 0) | (phi < 0)), "product sign not known"
        mlo, mhi = np.minimum(np.abs(plo), np.abs(phi)), np.maximum(np.abs(plo), np.abs(phi))
        elo, ehi = np.floor(np.log2(mlo)).astype(np.int64), np.floor(np.log2(mhi)).astype(np.int64)
        assert np.all(ehi - elo <= 1)
        ec = int(np.floor(np.log2(abs(c))))
        total += np.maximum(steps(np.abs(elo - ec)), steps(np.abs(ehi - ec)))
        lo, hi = plo + c, phi + c
        lo, hi = lo - np.abs(lo) * EPS, hi + np.abs(hi) * EPS
    return total


def binade_intervals(j, parts=2048):
    """[2^-j, 2^(1-j)) in `parts` equal intervals."""
    edges = 2.0 ** -j * (1 + np.arange(parts + 1) / parts)
    return edges[:-1], edges[1:]


def polynomial_alignment_bounds(coef):
    """(z < 1, z >= 1) bounds of the alignment steps. z < 1: f is any float in [0, 1): every binade
    2^-60..2^0 by intervals; below 2^-60, |acc_k*f| < 2^-59 (|acc_k| < 2) against |c_k| >= 2^-17
    gives d > 32, no step; f = 0 gives zero products, no step. z >= 1: f = m*2^-23 (0 <= m < 2^23):
    the binades 2^-12..2^0 by intervals, every m < 2^11 on its own."""
    assert min(abs(c) for c in coef) >= 2.0 ** -17
    small = max(int(alignment_bound(coef, *binade_intervals(j)).max()) for j in range(1, 61))
    coarse = max(int(alignment_bound(coef, *binade_intervals(j)).max()) for j in range(1, 13))
    f = np.arange(1, 1 << 11) * 2.0 ** -23
    return small, max(coarse, int(alignment_bound(coef, f, f).max()))


def entry_numbers():
    """(K, bound for z < 1, bound for z >= 1) from the entry's two rows:
    W - (K - small + big) n <= small and -W + K n <= 0."""
    [ent] = [e for e in avr_loops.load_paths() if e.get("id") == ENTRY]
    (r1, small), (r2, zero) = ent["rows"]
    k = r2["n"]
    assert zero == 0 and r2["W"] == -1 and r1["W"] == 1
    return ent, k, small, small - (k + r1["n"])


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("expdrv")
    elf = avr_libm_driver(d, "exp", DRIVER)
    return elf, avr_decode.load(elf), d


@needs_avr
def test_alignment_bounds_follow_from_the_linked_table(driver):
    elf, prog, _ = driver
    count, coef = powser_table(elf, prog, "exp")
    assert count == 7
    ent, k, small, big = entry_numbers()
    assert polynomial_alignment_bounds(coef) == (small, big) == (63, 54)
    # W >= K must mean modf's slow path for the ILP too: the powser entry's additions take <= 77
    # steps and modf's one subtraction <= 10 (8 byte + bit steps <= 32)
    [pw] = [e for e in avr_loops.load_paths() if e.get("id") == "exp-underflow-or-alignment"]
    assert [{"A": 1, "tiny": 77}, 77] in pw["rows"] and pw["counters"]["A"] == ent["counters"]["W"]
    assert k > 77 + 10


def sweep():
    """x whose f = frac(|x| log2 e) spans every binade down to 2^-40 (z < 1: x = f / log2 e), and
    z = n + m*2^-23 for every m < 2^11 (n = 1) and random m (n = 1, 2, 3), a few ulps around each."""
    rng = np.random.default_rng(5)
    xs = [2.0 ** -j * (1 + rng.random(60)) / LOG2E for j in range(1, 41)]
    m = np.concatenate([np.arange(1, 1 << 11), rng.integers(1 << 11, 1 << 23, 300)])
    for n in (1, 2, 3):
        z = n + (m if n == 1 else m[::8] & ~((1 << n) - 1)) * 2.0 ** -23
        xs.append(z / LOG2E)
    xs.append(np.arange(1, 40) / LOG2E)  # z near integers: f = 0 or tiny
    xs.append(np.float32([1e-40, 3e-39, 1e-45]))  # z subnormal: f = z subnormal
    x = np.concatenate(xs).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(1)), np.nextafter(x, np.float32(0))])
    return np.concatenate([x, -x]).astype(np.float32)


@pytest.mark.e2e
@needs_avr
def test_entry_holds_and_is_reached_under_simavr(driver, tmp_path):
    """Every exp call of the sweep satisfies the rows; W reaches 63 with modf's fast path and
    K + 54 with its slow path (both bounds are attained); the lone expf's bound with the entry
    covers every run and is below the bound without it."""
    from test_wcet_avr_context import Probe, build_tracer, check_path_entry, run_trace_sites
    elf, prog, d = driver
    ent, k, small, big = entry_numbers()
    counters = avr_loops.load_counters()
    start = prog.address_of("exp")
    pcs = [start + off for off, _ in ent["blocks"].values()]
    points = counters[ent["counters"]["W"]]["points"]
    pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in points]
    tracer = build_tracer(tmp_path / "avr_trace")
    if tracer is None:
        pytest.skip("libsimavr not available")
    x = sweep()
    probe = Probe(start, (), None, "sup+", pcs)
    run_trace_sites(tracer, elf, [probe], x[:, None], set(), (), tmp_path)
    assert probe.invocations == len(x)
    check_path_entry(ent, counters, probe.vectors)
    weights = [pt.get("weight", 1) for pt in points]
    n = np.array([v[0] for _, _, v in probe.vectors])
    w = np.array([sum(a * b for a, b in zip(weights, v[1:])) for _, _, v in probe.vectors])
    assert w[n == 0].max() == small and w[n == 1].max() == k + big
    # __mulsf3x's split-kind entry in exp's polynomial: K <= 1, reached (f zero or subnormal)
    [mul] = [e for e in avr_loops.load_paths() if e["symbol"] == "__mulsf3x" and e.get("id") == "exp-powser-split-kind"]
    split = counters[mul["counters"]["K"]]["points"]
    mprobe = Probe(prog.address_of("__mulsf3x"), mul["within"], None, "sup+",
                   [prog.address_of(pt["symbol"]) + pt["offset"] for pt in split])
    run_trace_sites(tracer, elf, [mprobe], x[:, None], set(mul["within"]), (), tmp_path)
    assert mprobe.invocations == 7 * np.sum(np.abs(x) < 128)  # 7 products per exp call
    check_path_entry(mul, counters, mprobe.vectors)
    ks = [sum(a * b for a, b in zip([pt.get("weight", 1) for pt in split], v)) for _, _, v in mprobe.vectors]
    assert max(ks) == 1
    b = board()
    bound = avr_ipet.analyze(elf, "cg_exp", {"loops": [], "layers": []}, b, None).cycles
    _, cycles = simavr.run_cases(elf, x[:, None], 1, entry_symbol="cg_exp", mcu=b["mcu"], freq=b["clock_hz"],
                                 harness=simavr.build_harness(d / "simavr_run"))
    print(f"\n  expf: bound {bound}, simavr max {cycles.max()} over {len(x)} arguments; "
          f"max probe cycles {probe.maxcycles}")
    assert cycles.max() <= bound
