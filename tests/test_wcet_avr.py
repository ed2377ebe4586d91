"""builtin-avr IPET analyser: bounds against cycle-exact simavr measurements of C fixtures.

Every fixture (tests/wcet_fixtures/*.c + its hand-written flow facts) is built for atmega1284 at
-Os, -O0 and -O2 with the board's flags, measured through nnbuild.runners.simavr on random and
adversarial inputs, then (float fixtures) improved by a coordinate-wise worst-case input search
(worst_case_search), and the bound must never be below the measured maximum. The ratio
bound/measured is printed (pytest -s) and capped per fixture so tightness cannot silently regress.
"""

import json
import os
import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest

from nnbuild.errors import NNBuildError
from nnbuild.wcet import analyzer_module
from nnbuild.wcet import avr_ipet

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "wcet_fixtures")
ROOT = os.path.dirname(HERE)
MCU, FREQ = "atmega1284", 20_000_000

#: fixture -> (float32 words in, float32 words out, kind of input, ratio cap per opt level)
FIXTURES = {
    "dot_i8": (4, 1, "i8", {"Os": 1.04, "O0": 1.0, "O2": 1.0}),
    "nested_i16": (5, 3, "i16", {"Os": 1.03, "O0": 1.01, "O2": 1.03}),
    "switch_act": (4, 2, "switch", {"Os": 1.0, "O0": 1.0, "O2": 1.0}),
    "relu_f": (10, 10, "float", {"Os": 1.16, "O0": 1.14, "O2": 1.16}),
    "fmac": (12, 8, "float", {"Os": 2.55, "O0": 2.25, "O2": 2.6}),
    "tanh_exp": (6, 6, "tanh", {"Os": 1.6, "O0": 1.62, "O2": 1.65}),
    "gen_mlp": (8, 3, "float", {"Os": 2.55, "O0": 2.33, "O2": 2.6}),
}
OPTS = ("Os", "O0", "O2")

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not (shutil.which("avr-gcc") and shutil.which("avr-objdump")),
                                reason="avr-gcc/binutils-avr not installed")]


def board():
    with open(os.path.join(ROOT, "toolchains", "avr.json")) as f:
        return json.load(f)


def build(dest_dir, sources, entry, n_in, n_out, opt, extra=()):
    """Link fixture sources with avr_main.c using the board's cflags/ldflags (ELF path)."""
    b = board()
    out = os.path.join(dest_dir, f"{entry}.{opt}.elf")
    if not os.path.exists(out):
        cmd = [b["cc"], *b["cflags"], f"-{opt}", f"-DENTRY={entry}", f"-DN_IN={n_in}",
               f"-DN_OUT={n_out}", *[os.path.join(FIX, s) for s in sources],
               os.path.join(FIX, "avr_main.c"), *b["ldflags"], *extra, "-lm", "-o", out]
        subprocess.run(cmd, check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def elfdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("avr_wcet_elf"))


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    """The runners' libsimavr harness (skip when libsimavr is missing)."""
    from nnbuild.runners import simavr
    try:
        return simavr.build_harness(tmp_path_factory.mktemp("simavr") / "simavr_run")
    except NNBuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def analysis(tmp_path_factory):
    """analyze(elf, entry) -> (bound, its work directory): builtin-avr on a fixture ELF with the
    fixture's flow facts file, once per ELF (the soundness test and the detail tests share it)."""
    done = {}

    def analyze(elf, entry):
        if elf not in done:
            work = tmp_path_factory.mktemp("wcet")
            done[elf] = (avr_ipet.analyze(elf, entry, os.path.join(FIX, f"{entry}.flowfacts.json"), board(),
                                          str(work)), work)
        return done[elf]
    return analyze


def measure(elf, entry, cases, n_out, harness):
    from nnbuild.runners import simavr
    _, cycles = simavr.run_cases(elf, cases, n_out, entry_symbol=entry, mcu=MCU, freq=FREQ,
                                 harness=harness, timeout=120)
    return cycles


# ------------------------------------------------------------------ inputs

def _words(raw, n_in):
    """Raw little-endian bytes [cases, 4*n_in] as float32 words (bit patterns kept)."""
    return np.ascontiguousarray(raw, dtype=np.uint8).view("<f4").reshape(-1, n_in)


FLOAT_SPECIALS = np.array([
    0.0, -0.0, 1.0, -1.0, 1.0000001, -0.99999994, 1.9999999, 0.5, 3.0, -7.5, 100.0, -1e4,
    1e-3, 123456.78, -3.4028235e38, 3.4028235e38, 1e38, -1e38, 1.1754944e-38, -1.1754942e-38,
    1.4e-45, -1.4e-45, 1e-40, -5.9e-39, 2.0 ** 23, -(2.0 ** 31), 2.0 ** 24 + 1, 0.1, -0.7,
], dtype=np.float32)


def float_cases(n_in, rng, n_random=200):
    """Random, structured and adversarial float inputs (never NaN or infinite)."""
    rows = [np.full(n_in, v, np.float32) for v in FLOAT_SPECIALS]
    rows += [np.full(n_in, -abs(v), np.float32) for v in (0.3, 2.5, 1e20, 1e-39)]
    rows += [np.where(np.arange(n_in) % 2, a, b).astype(np.float32)
             for a, b in ((1e38, -1e38), (1.4e-45, -1.0), (1.0, -1.0000001), (3.4e38, 1e-38))]
    scale = 10.0 ** rng.integers(-40, 39, size=(n_random, 1))
    rows += list((rng.standard_normal((n_random, n_in)) * scale).astype(np.float32))
    bits = rng.integers(0, 2 ** 32, size=(n_random, n_in), dtype=np.uint64).astype(np.uint32)
    bits = np.where((bits >> 23) & 0xFF == 0xFF, bits & np.uint32(0xBFFFFFFF), bits)  # no inf/NaN
    rows += list(bits.view(np.float32))
    # near-cancelling neighbours: x, -nextafter(x) patterns stress the add normalisation
    base = (rng.standard_normal((40, 1)) * 10.0 ** rng.integers(-10, 10, size=(40, 1))).astype(np.float32)
    alt = np.where(np.arange(n_in) % 2, base, -np.nextafter(base, np.float32(np.inf)))
    rows += list(alt.astype(np.float32))
    return np.asarray(rows, dtype=np.float32).reshape(-1, n_in)


def int_cases(n_in, kind, rng, n_random=300):
    """Random and extreme int8/int16 patterns packed into float32 words."""
    nbytes = 4 * n_in
    rows = [np.full(nbytes, b, np.uint8) for b in (0x00, 0x7F, 0x80, 0xFF, 0x01)]
    if kind == "i16":
        for v in (-32768, 32767, -1, 1000, -1000):
            rows.append(np.full(nbytes // 2, v, "<i2").view(np.uint8))
    rows += list(rng.integers(0, 256, size=(n_random, nbytes), dtype=np.uint8))
    return _words(np.asarray(rows), n_in)


def switch_cases(n_in, rng):
    """Every selector with extreme values in all four lanes, plus random lanes."""
    rows = []
    for sel in range(8):
        for x in (-32768, -9, -1, 0, 1, 32767):
            rows.append(np.tile(np.array([x, sel], "<i2"), 4).view(np.uint8))
    rows += list(rng.integers(0, 256, size=(200, 4 * n_in), dtype=np.uint8))
    return _words(np.asarray(rows), n_in)


def tanh_cases(n_in, rng):
    vals = np.concatenate([FLOAT_SPECIALS, np.linspace(-16, 16, 97, dtype=np.float32),
                           np.float32([15.0, -15.0, 14.999999, 1e-5, -1e-5, 0.34657359])])
    rows = [np.full(n_in, v, np.float32) for v in vals]
    rows += list((rng.standard_normal((150, n_in)) * 4).astype(np.float32))
    return np.asarray(rows, dtype=np.float32)


def cases_for(name, rng):
    n_in, _, kind, _ = FIXTURES[name]
    if kind == "float":
        return float_cases(n_in, rng)
    if kind == "tanh":
        return tanh_cases(n_in, rng)
    if kind == "switch":
        return switch_cases(n_in, rng)
    return int_cases(n_in, kind, rng)


LOG2E = 1.4426950408889634


def exp_hard_points():
    """expf arguments that drive avr-libc's exp to its longest paths: y = |x| log2(e) just above an
    integer (modf's fraction loops run 150 - exponent(y) passes and y - trunc(y) cancels), and
    tiny |x| (the polynomial's products underflow)."""
    pts = []
    for ip in range(0, 44):
        e = max(int(np.floor(np.log2(ip))), 0) if ip else 0
        for j in (1, 2, 3, 5):
            pts.append((ip + j * 2.0 ** (e - 23)) / LOG2E)
    pts += [2.0 ** -k for k in range(100, 150, 3)]
    pts = np.float32(pts)
    return np.concatenate([pts, -pts])


def palette(kind, rng, k=40):
    """Candidate values for one input coordinate: float classes across the whole range."""
    if kind in ("float", "tanh"):
        base = np.concatenate([FLOAT_SPECIALS, exp_hard_points() / (2 if kind == "tanh" else 1)])
        expo = rng.integers(-149, 128 if kind == "float" else 5, size=k)
        mant = rng.choice(np.float32([1.0, 1.5, 1.9999999, 1.0000001, 1.3]), size=k)
        sign = rng.choice(np.float32([-1.0, 1.0]), size=k)
        with np.errstate(over="ignore"):
            rand = (mant * sign * np.float32(2.0) ** expo.astype(np.float32)).astype(np.float32)
        vals = np.concatenate([rng.choice(base, size=min(k, len(base)), replace=False), rand])
    else:
        vals = rng.integers(0, 2 ** 32, size=k, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return vals[np.isfinite(vals)].astype(np.float32)


def local(value, kind, rng, k=12):
    """Neighbours of one coordinate value: a few ulps, relative nudges, sign flip, powers of 2."""
    v = np.float32(value)
    if kind not in ("float", "tanh"):
        raw = np.frombuffer(v.tobytes(), np.uint32)[0]
        flips = np.uint32(1) << rng.integers(0, 32, size=k).astype(np.uint32)
        return (np.uint32(raw) ^ flips).view(np.float32)
    bits = np.frombuffer(v.tobytes(), np.int32)[0]
    steps = rng.integers(-40, 41, size=k).astype(np.int64) * rng.choice([1, 1, 1, 1000, 100000], size=k)
    near = (np.int64(bits) + steps).clip(-2 ** 31, 2 ** 31 - 1).astype(np.int32).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        extra = np.float32([-v, v * 2, v / 2, v * np.float32(1 + 2 ** -20), v * np.float32(1 - 2 ** -23)])
    out = np.concatenate([near, extra])
    return out[np.isfinite(out)].astype(np.float32)


def worst_case_search(run, start, rng, kind, budget, batch=24):
    """Coordinate-wise hill climbing: from the slowest known input, try palette and neighbouring
    values for one coordinate at a time (batched runs) and keep any change that runs longer.
    `run(cases) -> cycles`; returns (best input, its cycles, number of runs)."""
    best, best_c = start[0].copy(), int(start[1])
    evals = 0
    while evals < budget:
        improved = False
        for i in rng.permutation(len(best)):
            vals = np.concatenate([palette(kind, rng, batch // 2), local(best[i], kind, rng, batch // 2)])
            cand = np.repeat(best[None, :], len(vals), axis=0)
            cand[:, i] = vals
            cyc = run(cand)
            evals += len(vals)
            j = int(np.argmax(cyc))
            if cyc[j] > best_c:
                best, best_c, improved = cand[j].copy(), int(cyc[j]), True
            if evals >= budget:
                break
        if not improved:  # restart from a random pair of coordinates
            cand = np.repeat(best[None, :], batch, axis=0)
            for row in cand:
                for i in rng.integers(0, len(best), size=2):
                    row[i] = palette(kind, rng, 4)[0]
            cyc = run(cand)
            evals += batch
            j = int(np.argmax(cyc))
            if cyc[j] > best_c:
                best, best_c = cand[j].copy(), int(cyc[j])
    return best, best_c, evals


def hill_climb(elf, name, cases, cycles, harness, rng, budget=600):
    """Worst case for the fixture: the slowest random/adversarial case, improved by
    worst_case_search (budget = simulated runs)."""
    n_out, kind = FIXTURES[name][1], FIXTURES[name][2]
    i = int(np.argmax(cycles))
    _, c, _ = worst_case_search(lambda x: measure(elf, name, x, n_out, harness), (cases[i], cycles[i]),
                                rng, kind, budget)
    return c


# ------------------------------------------------------------------ soundness and tightness

RESULTS = {}


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("name", list(FIXTURES))
def test_bound_covers_simavr(name, opt, elfdir, harness, analysis):
    n_in, n_out, kind, caps = FIXTURES[name]
    elf = build(elfdir, [f"{name}.c"], name, n_in, n_out, opt)
    res, _ = analysis(elf, name)
    rng = np.random.default_rng(zlib.crc32(f"{name}-{opt}".encode()))
    cases = cases_for(name, rng)
    cycles = measure(elf, name, cases, n_out, harness)
    worst = int(cycles.max())
    if kind in ("float", "tanh"):
        worst = max(worst, hill_climb(elf, name, cases, cycles, harness, rng,
                                      budget=600 if opt == "Os" else 150))
    ratio = res.cycles / worst
    RESULTS[(name, opt)] = (res.cycles, worst, ratio)
    print(f"\nWCET {name:11s} -{opt}: bound {res.cycles} cycles, simavr max {worst} "
          f"({len(cases)} cases), bound/measured {ratio:.4f}")
    assert res.cycles >= worst, f"UNSOUND: {name} -{opt} bound {res.cycles} < measured {worst}"
    assert ratio <= caps[opt], f"{name} -{opt}: bound/measured {ratio:.4f} above {caps[opt]}"
    if name == "dot_i8" and opt in ("O0", "O2"):
        # data-independent at -O0/-O2: the bound equals every measurement, i.e. no iteration is
        # lost or added for a top-tested (-O0) or rotated (-O2) loop
        assert res.cycles == cycles.max() == cycles.min()


def test_per_layer_split_and_details(elfdir, analysis):
    elf = build(elfdir, ["fmac.c"], "fmac", 12, 8, "Os")
    res, workdir = analysis(elf, "fmac")
    assert res.analyzer == "builtin-avr" and res.entry == "fmac"
    assert set(res.per_layer) == {"dense", "relu"}
    assert res.per_layer["dense"] > 50 * res.per_layer["relu"] > 0
    assert sum(res.per_layer.values()) + res.details["unattributed_cycles"] == res.cycles
    assert res.details["ilp"]["status"] == "optimal"
    assert any(name.startswith("__mulsf3") for name in res.details["callee_wcet"])
    assert res.details["unmatched_flowfact_loops"] == []
    assert any(f.endswith(".lp") for f in os.listdir(workdir))


def test_registry_and_cli(elfdir, tmp_path, capsys):
    assert analyzer_module(board()["wcet_tool"]) is avr_ipet
    elf = build(elfdir, ["relu_f.c"], "relu_f", 10, 10, "Os")
    out_json = tmp_path / "r.json"
    rc = avr_ipet.main([elf, "--entry", "relu_f", "--flowfacts", os.path.join(FIX, "relu_f.flowfacts.json"),
                        "--board", os.path.join(ROOT, "toolchains", "avr.json"), "--json", str(out_json),
                        "--workdir", str(tmp_path)])
    text = capsys.readouterr().out
    m = re.search(r"^WCET\[relu_f\] = (\d+) cycles$", text, re.M)
    assert rc == 0 and m and "layer relu:" in text
    assert json.loads(out_json.read_text())["cycles"] == int(m.group(1))


def test_flowfacts_dict_equals_path(elfdir, analysis):
    elf = build(elfdir, ["nested_i16.c"], "nested_i16", 5, 3, "O2")
    path = os.path.join(FIX, "nested_i16.flowfacts.json")
    with open(path) as f:
        facts = json.load(f)
    a, _ = analysis(elf, "nested_i16")   # the flow facts file
    b = avr_ipet.analyze(elf, "nested_i16", facts, board(), None)
    assert a.cycles == b.cycles and a.per_layer == b.per_layer


# ------------------------------------------------------------------ refusals

@pytest.fixture(scope="module")
def bad_elf(elfdir):
    return build(elfdir, ["avr_bad.c"], "bad_entry", 2, 2, "O0")


@pytest.mark.parametrize("entry,pattern", [
    ("bad_while", r"unbounded loop in bad_while at bad_while\+0x[0-9a-f]+ \(0x[0-9a-f]+\)"),
    ("bad_rec", r"recursion in bad_rec at bad_rec \(0x[0-9a-f]+\)"),
    ("bad_icall", r"indirect icall in bad_icall at bad_icall\+0x[0-9a-f]+ \(0x[0-9a-f]+\)"),
])
def test_refuses_unbounded_recursive_indirect(bad_elf, entry, pattern):
    with pytest.raises(NNBuildError, match=pattern):
        avr_ipet.analyze(bad_elf, entry, {"loops": [], "layers": []}, board(), None)


def test_indirect_call_with_flow_facts(bad_elf):
    facts = {"loops": [], "layers": [],
             "indirect": [{"function": "bad_icall", "offset": _icall_offset(bad_elf), "targets": ["twice", "negate"]}]}
    res = avr_ipet.analyze(bad_elf, "bad_icall", facts, board(), None)
    assert res.cycles > 0 and "twice (0x" in " ".join(res.details["callee_wcet"])


def test_indirect_calls_fact_charges_the_sum_of_its_calls(bad_elf):
    """A site whose `calls` fact lists one call per execution is charged the mean of its calls'
    bounds (rounded up), not the worst target's; a call outside the site's targets is refused."""
    site = {"function": "bad_icall", "offset": _icall_offset(bad_elf), "targets": ["twice", "negate"]}
    worst = avr_ipet.analyze(bad_elf, "bad_icall", {"loops": [], "layers": [], "indirect": [site]}, board(), None)
    callee = {k.split(" ")[0]: v for k, v in worst.details["callee_wcet"].items()}
    calls = dict(site, calls=[{"target": "twice", "loops": []}, {"target": "negate", "loops": []}])
    res = avr_ipet.analyze(bad_elf, "bad_icall", {"loops": [], "layers": [], "indirect": [calls]}, board(), None)
    mean = -(-(callee["twice"] + callee["negate"]) // 2)
    assert res.cycles == worst.cycles - max(callee["twice"], callee["negate"]) + mean
    cheap = min(callee, key=callee.get)
    once = dict(site, calls=[{"target": cheap, "loops": []}])
    res = avr_ipet.analyze(bad_elf, "bad_icall", {"loops": [], "layers": [], "indirect": [once]}, board(), None)
    assert callee[cheap] < max(callee.values()) and res.cycles == worst.cycles - max(callee.values()) + callee[cheap]
    stray = dict(site, calls=[{"target": "bad_rec", "loops": []}])
    with pytest.raises(NNBuildError, match="call target 'bad_rec' is not among the site's targets"):
        avr_ipet.analyze(bad_elf, "bad_icall", {"loops": [], "layers": [], "indirect": [stray]}, board(), None)


def _icall_offset(elf):
    from nnbuild.wcet import avr_decode
    prog = avr_decode.load(elf)
    start = prog.address_of("bad_icall")
    return next(a for a, i in sorted(prog.insns.items()) if a >= start and i.mnem == "icall") - start


def test_missing_generator_bound_names_function(elfdir):
    elf = build(elfdir, ["dot_i8.c"], "dot_i8", 4, 1, "Os")
    with pytest.raises(NNBuildError, match=r"unbounded loop in dot_i8 at dot_i8\+0x"):
        avr_ipet.analyze(elf, "dot_i8", {"loops": [], "layers": []}, board(), None)


def test_unknown_entry_and_timing_model(elfdir):
    elf = build(elfdir, ["dot_i8.c"], "dot_i8", 4, 1, "Os")
    with pytest.raises(NNBuildError, match="entry function 'nope'"):
        avr_ipet.analyze(elf, "nope", {"loops": []}, board(), None)
    with pytest.raises(NNBuildError, match="no cycle table"):
        avr_ipet.analyze(elf, "dot_i8", {"loops": []}, dict(board(), timing_model="avrxt"), None)


def test_flowfacts_lines_are_for_loops():
    """The hand-written flow facts point at `for` lines (guards against stale line numbers)."""
    for name in FIXTURES:  # gen_mlp.c and its flow facts were written by the same script
        with open(os.path.join(FIX, f"{name}.flowfacts.json")) as f:
            facts = json.load(f)
        with open(os.path.join(FIX, facts["loops"][0]["file"])) as f:
            lines = f.read().splitlines()
        for loop in facts["loops"]:
            assert lines[loop["line"] - 1].lstrip().startswith("for ("), (name, loop["line"])
