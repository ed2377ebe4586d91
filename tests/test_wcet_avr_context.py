"""Context-sensitive analysis and infeasible-path constraints of builtin-avr, checked on simavr.

tests/wcet_fixtures/avr_trace.c follows the call stack under libsimavr and reports, per
invocation of a probed routine (in a context: the library functions active around the call, or
the call site), its cycles and the execution counts of chosen instructions. Checks:
  * every region the analyser bounds in a context covers every observed invocation in that
    context (per-routine soundness, and the per-routine tightness is printed);
  * every context-specific loop bound of avr_libloops.json holds in its context;
  * every "paths" constraint holds for every observed count vector (for some choice of its
    auxiliary binaries).
Inputs are the adversarial pairs of test_wcet_avr_libloops plus targeted cases per fact.
"""

import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest

from nnbuild.numerics import float_facts
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops, avr_paths
from nnbuild.wcet import avr_timing as T

from test_wcet_avr import FIX, board, build

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shutil.which("avr-gcc"), reason="avr-gcc not installed")]


# ------------------------------------------------------------------ tracer helpers

def build_tracer(dest):
    """Compile avr_trace.c (None when libsimavr is missing)."""
    proc = subprocess.run(["gcc", "-O2", "-std=gnu99", "-I/usr/include/simavr",
                           os.path.join(FIX, "avr_trace.c"), "-o", str(dest), "-lsimavr", "-lelf"],
                          capture_output=True, text=True)
    return str(dest) if proc.returncode == 0 else None


def call_sites(prog):
    """(address, size) of every call instruction that transfers (rcall .+0 only pushes)."""
    return [(a, i.size) for a, i in sorted(prog.insns.items())
            if (i.mnem in ("call", "rcall") and i.target != i.end) or i.mnem in ("icall", "eicall")]


class Probe:
    """Invocations of `target` (called from `site`, or anywhere) whose outer context functions
    equal (mode 'eq') or include (mode 'sup') `names`; `pcs` are counted per invocation."""

    def __init__(self, target, names=(), site=None, mode="eq", pcs=(), group=0):
        self.target, self.names, self.site, self.mode, self.pcs = target, frozenset(names), site, mode, list(pcs)
        self.group = group
        self.invocations, self.maxcycles, self.vectors = 0, 0, []


def data_symbol(elf, name):
    out = subprocess.run([board()["nm"], elf], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts[-1] == name:
            return int(parts[0], 16) & 0xFFFF
    raise KeyError(name)


def run_trace(tracer, elf, probes, cases, ctx_names, tmpdir):
    """Run `cases` (float32 [N, k], written to nnbuild_in) and fill each probe's results."""
    return run_trace_sites(tracer, elf, probes, cases, ctx_names, (), tmpdir)


def run_trace_sites(tracer, elf, probes, cases, ctx_names, sites, tmpdir, site_tags=None):
    """run_trace, with the call sites the analyser's contexts distinguish (probe site '!' = none
    of them) and the operand tags of call sites ({site: tags}, active in and below the call)."""
    prog = avr_decode.load(elf)
    ids = {}
    lines = [f"call {a:x} {s}" for a, s in call_sites(prog)]
    lines += [f"site {a:x}" for a in sorted(sites)]
    for name in sorted(ctx_names):
        try:
            addr = prog.address_of(name)
        except Exception:
            continue
        ids[name] = len(ids)
        lines.append(f"ctx {ids[name]} {addr:x}")
    for site, tags in sorted((site_tags or {}).items()):
        for tag in sorted(tags):
            ids.setdefault(tag, len(ids))
            lines.append(f"ctxsite {ids[tag]} {site:x}")
    assert len(ids) <= 32
    # site-specific probes first: the tracer gives a frame to the first probe that matches
    order = sorted(range(len(probes)), key=lambda k: (probes[k].group, probes[k].site is None,
                                                      probes[k].site == "!"))
    for pid, k in enumerate(order):
        p = probes[k]
        if not p.names <= set(ids):
            mask = None
        else:
            mask = sum(1 << ids[n] for n in p.names)
        if mask is None:
            continue
        site = "-" if p.site is None else p.site if isinstance(p.site, str) else f"{p.site:x}"
        lines.append(f"probe {pid} {p.group} {p.target:x} {site} {p.mode} {mask:x} {len(p.pcs)} "
                     + " ".join(f"{pc:x}" for pc in p.pcs))
    spec = os.path.join(str(tmpdir), "trace.spec")
    with open(spec, "w") as f:
        f.write("\n".join(lines) + "\n")
    cases = np.ascontiguousarray(cases, dtype=np.float32)
    ready, inbuf = prog.address_of("nnbuild_ready"), data_symbol(elf, "nnbuild_in")
    proc = subprocess.run([tracer, elf, "atmega1284", hex(ready), hex(inbuf), str(cases.shape[1] * 4), spec],
                          input=cases.tobytes(), capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-500:]
    for line in proc.stdout.decode().splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("probe", "vec"):
            continue
        p = probes[order[int(parts[1])]]
        if parts[0] == "probe":
            p.invocations, p.maxcycles = int(parts[3]), int(parts[5])
        else:
            p.vectors.append((int(parts[2]), int(parts[3]), [int(v) for v in parts[4:]]))
    return probes


def analyse(elf, entry, facts=None):
    """(prog, Analyzer, top RegionResult) with the shipped table."""
    prog = avr_decode.load(elf)
    an = avr_ipet.Analyzer(prog, T.family(board()), facts or {"loops": [], "layers": []},
                           avr_loops.load_table(), None, avr_loops.load_paths())
    return prog, an, an.region(prog.address_of(entry))


def called_targets(prog):
    return {i.target for i in prog.insns.values() if i.mnem in ("call", "rcall") and i.target != i.end}


def tail_closure(an, addr):
    """Region starts reachable from `addr` through tail jumps and fall-throughs (same frame)."""
    seen, work = set(), [addr]
    while work:
        a = work.pop()
        if a not in seen:
            seen.add(a)
            work.extend(t.target for t in an._region(a).tails.values())
    return seen


def frames_reaching(an, prog, addr):
    """Analysed call targets whose frame can run the region starting at `addr`."""
    analysed = {a for a, _ in an.done}
    return sorted(t for t in called_targets(prog) & analysed if addr in tail_closure(an, t))


# ------------------------------------------------------------------ inputs

def exp_sweep():
    """x for expf over its whole range: a dense grid, every binade of tiny |x| (f = frac(|x| log2 e)
    subnormal or tiny: the powser products underflow), both signs."""
    xs = [np.linspace(-104, 104, 1601, dtype=np.float32)]
    for e in range(-149, 7):
        xs.append(np.float32([1.0, 1.5, 1.9999999]) * np.float32(2.0) ** e)
    for m in (1, 2, 3, 4, 8, 16, 64, 126, 127, 128, 140, 149):  # z = |x| log2(e) just above an integer
        near = int(np.float32(m * np.log(2.0)).view(np.uint32)) + np.arange(-2, 9)
        xs.append(near.astype(np.uint32).view(np.float32))
    xs = np.concatenate(xs).astype(np.float32)
    xs = np.concatenate([xs, -xs])
    return xs[np.isfinite(xs)]


def cos_sweep(rng):
    """x for cosf whose reduced argument y = r or r - pi/2 (__fp_sinus) spans every size: mantissas
    just below 0xC90FDA (r close to pi/2, the subtraction cancels to |y| ~ 2^-k), at small and huge
    exponents (1 to 128 reduction passes), and the mantissas whose remainder after 128 passes is
    smallest; both signs."""
    m = np.unique(np.concatenate([0xC90FDA - (1 << np.arange(18)), 0xC90FDA - rng.integers(0, 1 << 17, 60),
                                  [0xC90FDA, 0xC90FDB, 0x800000, 0xFFFFFF]])).astype(np.uint32)
    exps = np.array([127, 128, 130, 150, 200, 253, 254], dtype=np.uint32)
    x = ((exps[:, None] << np.uint32(23)) | (m[None, :] & np.uint32(0x7FFFFF))).ravel().view(np.float32)
    return np.concatenate([x, -x[::5]])


def context_cases():
    from test_wcet_avr_libloops import adversarial_pairs
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2 ** 32, size=(1500, 2), dtype=np.uint64).astype(np.uint32)
    bits = np.where((bits >> 23) & 0xFF == 0xFF, bits & np.uint32(0xBFFFFFFF), bits)
    x = exp_sweep()
    sweep = np.stack([x, np.roll(x, 7)], axis=1)  # drv_all: expf(in0) via drv_exp, expf(in1) via drv_libm
    c = cos_sweep(rng)
    trig = np.stack([c, np.roll(c, 3)], axis=1)  # drv_all: cosf(in0) via drv_trig
    return np.concatenate([adversarial_pairs(), bits.view(np.float32), sweep, trig, special_pairs()]).astype(np.float32)


def special_pairs():
    """Every pairing of zero, subnormal, normal, infinite and NaN operands (the split-kind rows:
    __fp_split3's exponent-0 and inf/NaN paths, once and twice)."""
    values = [0.0, -0.0, 1e-40, -3e-39, 1.5, -2.0, 3e38, np.inf, -np.inf, np.nan]
    return np.array([(a, b) for a in values for b in values], dtype=np.float32)


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tracer(tmp_path_factory):
    path = build_tracer(tmp_path_factory.mktemp("trace") / "avr_trace")
    if path is None:
        pytest.skip("libsimavr not available")
    return path


@pytest.fixture(scope="module")
def drv(tmp_path_factory):
    elfdir = str(tmp_path_factory.mktemp("ctxdrv"))
    elf = build(elfdir, ["libdrv.c"], "drv_all", 2, 20, "Os")
    prog, an, top = analyse(elf, "drv_all")
    return elf, prog, an, top


@pytest.fixture(scope="module")
def traced(drv, tracer, tmp_path_factory):
    """One simavr run over context_cases() with every probe the checks below need."""
    elf, prog, an, _ = drv
    probes = {}
    targets = called_targets(prog)
    for (addr, ctx), res in an.done.items():  # per-region bounds, in the analyser's contexts
        if addr in targets:
            if ctx == avr_paths.EMPTY and not an._sensitive(addr):
                probes[("region", addr, ctx)] = Probe(addr, (), None, "sup")
            else:
                probes[("region", addr, ctx)] = Probe(addr, ctx.names, ctx.site if ctx.site is not None else "!", "eq")
    for k, ent in enumerate(avr_loops.load_table()):  # context loop entries
        if "within" not in ent and "call_site" not in ent:
            continue
        if set(ent.get("within", [])) & float_facts.VALUE_ONLY_TAGS:
            continue  # generator value facts: checked on generated code, test_wcet_avr_value_facts.py
        header = prog.address_of(ent["symbol"]) + ent["offset"]
        site = avr_paths.resolve_site(prog, ent["call_site"]) if "call_site" in ent else None
        group = 1 + len({key[1] for key in probes if key[0] == "loop"})
        for start in sorted({a for a, _ in an.done}):
            heads = loop_headers(an, prog, start, header)
            for t in frames_reaching(an, prog, start) if heads else ():
                probes[("loop", k, t)] = Probe(t, ent.get("within", []), site, "sup", sorted(heads), group)
    counters = avr_loops.load_counters()
    for k, ent in enumerate(avr_loops.load_paths()):
        if value_fact_entry(ent):
            continue  # checked on generated code, test_wcet_avr_value_facts.py
        start = prog.address_of(ent["symbol"])
        pcs = [start + off for off, _ in ent["blocks"].values()]
        for ctr in ent.get("counters", {}).values():  # one pc list per counter, summed below
            pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in counters[ctr]["points"]]
        group = 1 + len({key[1] for key in probes if key[0] in ("loop", "paths")})
        for t in frames_reaching(an, prog, start):
            probes[("paths", k, t)] = Probe(t, ent.get("within", []), entry_site(prog, ent), "sup+", pcs, group)
    keys = list(probes)
    plist = [probes[k] for k in keys]
    # ids for the tracer: sites the analyser distinguishes go on `site` lines
    run_trace_sites(tracer, elf, plist, context_cases(), an.ctxs.names, an.ctxs.sites,
                    tmp_path_factory.mktemp("tracerun"), an.site_tags)
    return dict(zip(keys, plist))


def loop_headers(an, prog, start, header):
    """All headers of the loop of region `start` whose lowest header is `header` (irreducible
    loops have several; empty when there is no such loop), checked not to be nested in another
    loop of the region (then header executions per call = per entry into the loop)."""
    loops = avr_loops.find_loops(an._region(start), prog)
    loop = next((l for l in loops if l.header == header), None)
    if loop is None:
        return set()
    assert not any(o is not loop and o.body > loop.body for o in loops), "nested: per-call count != per entry"
    return set(loop.headers)


# ------------------------------------------------------------------ checks

def test_every_region_covers_its_invocations(drv, traced):
    """Per routine and context: the analyser's bound >= every observed invocation's cycles."""
    _, prog, an, top = drv
    print()
    for key, p in sorted(traced.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))):
        if key[0] != "region":
            continue
        res = an.done[(key[1], key[2])]
        name = res.name + res.ctx.label(prog)
        if p.invocations:
            print(f"  {name:58s} bound {res.cycles:6d}  simavr max {p.maxcycles:6d}  "
                  f"({p.invocations} calls) {res.cycles / p.maxcycles:.3f}")
        assert p.maxcycles <= res.cycles, f"UNSOUND: {name}: {p.maxcycles} > {res.cycles}"


def test_contexts_are_reached(drv, traced):
    """The inputs reach every kind of context, so the checks above are not vacuous."""
    _, prog, an, _ = drv
    seen = {an.done[(k[1], k[2])].name + an.done[(k[1], k[2])].ctx.label(prog)
            for k, p in traced.items() if k[0] == "region" and p.invocations}
    for want in ("in exp", "in __fp_powser, exp", "call@__addsf3+0x4", "call@__divsf3_pse+0x2e",
                 "call@exp+0x18", "__mulsf3:C.e<=128", "__divsf3:A.normal"):
        assert any(want in s for s in seen), f"no invocation observed {want}: {sorted(seen)}"


def test_context_loop_entries_hold(drv, traced):
    """Each context-specific loop bound: header executions per invocation in its context."""
    _, prog, _, _ = drv
    table = avr_loops.load_table()
    print()
    checked = set()
    for key, p in traced.items():
        if key[0] != "loop":
            continue
        ent = table[key[1]]
        bound = ent["header_max"] if "header_max" in ent else ent["back_max"] + 1
        worst = max((sum(v) for _, _, v in p.vectors), default=0)
        where = ", ".join(ent.get("within", []) + ([ent["call_site"]] if "call_site" in ent else []))
        print(f"  {ent['symbol']}+{ent['offset']:#x} in {where}: header_max {bound}, simavr max {worst} "
              f"per call over {p.invocations} calls of {prog.describe(p.target)}")
        assert worst <= bound, f"{ent['symbol']}+{ent['offset']:#x} in {where}: {worst} > {bound}"
        if p.invocations:
            checked.add(key[1])
    missing = [f"{table[k]['symbol']}+{table[k]['offset']:#x}" for k in {key[1] for key in traced if key[0] == "loop"}
               if k not in checked]
    assert not missing, f"context entries never exercised: {missing}"


def _satisfiable(rows, names, binaries, counts):
    for bits in itertools.product((0, 1), repeat=len(binaries)):
        val = dict(zip(names, counts), **dict(zip(binaries, bits)))
        if all(sum(c * val[n] for n, c in terms.items()) <= rhs for terms, rhs in rows):
            return True
    return False


def test_path_constraints_hold(drv, traced):
    """Every observed block-count vector satisfies each "paths" entry for some binaries."""
    paths, counters = avr_loops.load_paths(), avr_loops.load_counters()
    print()
    for k, ent in enumerate(paths):
        if value_fact_entry(ent):
            continue
        check_path_entry(ent, counters, [v for key, p in traced.items() if key[0] == "paths" and key[1] == k
                                         for v in p.vectors])


def entry_site(prog, ent):
    """The call instruction a table entry's "call_site" names (None: any caller)."""
    return avr_paths.resolve_site(prog, ent["call_site"]) if "call_site" in ent else None


def value_fact_entry(ent):
    """Entries conditioned on the generator's value facts: exercised by generated code only."""
    return bool(set(ent.get("within", [])) & float_facts.VALUE_ONLY_TAGS)


def fact_code(ent):
    """The generated code that writes a value-fact entry's facts (its "emitted_by", names from
    float_facts.FACT_CODE): the code a test must trace the entry on. Fails naming the entry
    when the field is missing or names code float_facts does not know."""
    where = f"+{ent['offset']}" if "offset" in ent else f" ({ent.get('id')})"
    name = f"avr_libloops.json entry {ent['symbol']}{where} within {ent.get('within', [])}"
    code = ent.get("emitted_by")
    assert code, (f"{name}: a value-fact tag without \"emitted_by\" (the generated code that writes the "
                  f"fact, some of {sorted(float_facts.FACT_CODE)})")
    unknown = sorted(set(code) - set(float_facts.FACT_CODE))
    assert not unknown, f"{name}: \"emitted_by\" names {unknown}, not in float_facts.FACT_CODE"
    return set(code)


def check_path_entry(ent, counters, vecs):
    """Every observed count vector of one "paths" entry satisfies its rows for some binaries
    (`vecs`: the blocks' counts, then one count per counter point, each weighed by its "weight")."""
    names = list(ent["blocks"])
    for name, ctr in ent.get("counters", {}).items():  # sum each counter's points
        weights = [pt.get("weight", 1) for pt in counters[ctr]["points"]]
        width = len(weights)
        vecs = [(m, c, v[:len(names)] + [sum(w * x for w, x in zip(weights, v[len(names):len(names) + width]))]
                 + v[len(names) + width:]) for m, c, v in vecs]
        names.append(name)
    assert vecs, f"paths entry {ent['symbol']} never exercised"
    maxima = np.max([v for _, _, v in vecs], axis=0)
    print(f"  paths {ent['symbol']} ({ent.get('id', '')}): {len(vecs)} distinct count vectors, "
          f"max per block {dict(zip(names, maxima.tolist()))}")
    for mult, cyc, v in vecs:
        assert _satisfiable(ent["rows"], names, ent.get("binaries", []), v), \
            f"paths {ent['symbol']}: counts {dict(zip(names, v))} violate the constraints"


def test_context_entries_only_apply_in_context(drv):
    """ldexp analysed outside exp keeps the context-free bound (256 denormalisation passes)."""
    _, prog, an, _ = drv
    ldexp = prog.address_of("ldexp")
    free = an.done[(ldexp, avr_paths.EMPTY)]
    inexp = [r for (a, c), r in an.done.items() if a == ldexp and "exp" in c.names]
    assert inexp and all(r.cycles < free.cycles - 1500 for r in inexp)
    srcs = " ".join(s for l in free.info["loops"] for s in l["sources"])
    assert "in exp" not in srcs and "header_max=256" in srcs


def test_path_block_mismatch_is_not_applied(drv):
    _, prog, an, _ = drv
    ent = dict(avr_loops.load_paths()[0])
    ent["blocks"] = dict(ent["blocks"], norm=[ent["blocks"]["norm"][0], ["nop", "nop"]])
    region = an._region(prog.address_of(ent["symbol"]))
    rows = avr_paths.path_rows(region, prog, [ent], frozenset(), None)
    assert not rows.rows and "not applied" in rows.sources[0]


def test_table_context_entries_are_well_formed():
    table = avr_loops.load_table()
    seen = set()
    for ent in table:
        key = (ent["symbol"], ent["offset"], tuple(ent.get("within", [])), ent.get("call_site"),
               tuple(sorted(ent.get("entry_regs", {}).items())))
        assert key not in seen
        seen.add(key)
    counters = avr_loops.load_counters()
    for ent in avr_loops.load_paths():
        assert len(ent["justification"]) > 100
        assert set(ent.get("counters", {}).values()) <= set(counters)
        names = set(ent["blocks"]) | set(ent.get("binaries", [])) | set(ent.get("counters", {}))
        for terms, rhs in ent["rows"]:
            assert set(terms) <= names and isinstance(rhs, int)
        for off, pattern in ent["blocks"].values():
            assert isinstance(off, int) and len(pattern) >= 2


def test_counter_mismatch_falls_back_to_the_unconstrained_bound(drv):
    """A counter whose code does not match counts nothing: the bound is then exactly the one
    without the counter's paths entry (never lower)."""
    elf, prog, _, top = drv
    paths, counters = avr_loops.load_paths(), avr_loops.load_counters()
    bad = {k: dict(v, points=[dict(p, pattern=["nop", "nop"]) for p in v["points"]]) for k, v in counters.items()}

    def bound(ctrs, pths):
        an = avr_ipet.Analyzer(prog, T.family(board()), {"loops": [], "layers": []}, avr_loops.load_table(),
                               None, pths, ctrs)
        return an.region(prog.address_of("drv_all")).cycles

    without = bound(counters, [p for p in paths if not p.get("counters")])
    assert bound(bad, paths) == without > top.cycles


# ------------------------------------------------------------------ polynomial facts

def powser_location(elf, prog, symbol, window=0x60):
    """(flash image, address) of the __fp_powser table that `symbol` loads into Z (its last
    `ldi r30` / `ldi r31` within `window` bytes of its start), from the linked ELF."""
    start = prog.address_of(symbol)
    ldi = {i.ops[0]: int(i.ops[1], 0) for a, i in sorted(prog.insns.items())
           if start <= a < start + window and i.mnem == "ldi" and i.ops[0] in ("r30", "r31")}
    image = subprocess.run([board()["objcopy"], "-O", "binary", "-j", ".text", elf, "/dev/stdout"],
                           capture_output=True, check=True).stdout
    return image, ldi["r30"] | ldi["r31"] << 8


def powser_table(elf, prog, symbol):
    """(term count, coefficients as floats) of the __fp_powser table that `symbol` loads into Z,
    read from the linked flash image."""
    image, addr = powser_location(elf, prog, symbol)
    count = image[addr]
    words = [image[addr + 1:addr + 5]] + [image[addr + 6 + 5 * k:addr + 10 + 5 * k] for k in range(count)]
    return count, [float(np.frombuffer(w, "<f4")[0]) for w in words]


def test_sine_polynomial_facts_hold_for_the_linked_table(drv):
    """The numbers the table's cos entries rest on, recomputed from the coefficient table in the
    linked image: the sine polynomial's partial sums (products of normal numbers) and its
    cancellation ratios (<= 1 normalisation shift) for t = y*y in [2^-62, (pi/2)^2]."""
    elf, prog, _, _ = drv
    count, c = powser_table(elf, prog, "__fp_sinus")
    assert count == 5
    t = np.concatenate([np.linspace(0, float(np.float32(np.pi / 2)) ** 2, 200_001), 2.0 ** -np.arange(0, 62.25, 0.25)])
    acc = np.full_like(t, c[0])
    for k in range(1, 6):
        assert np.abs(acc).min() >= 2.39e-8
        prod = acc * t
        acc = prod + c[k]
        assert (np.abs(acc) / np.maximum(np.abs(prod), abs(c[k]))).min() >= 0.63
    assert 0.6366 <= acc.min() and acc.max() <= 1.0
