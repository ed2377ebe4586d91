"""Every context-free entry of nnbuild/wcet/avr_libloops.json, checked against simavr (entries
with a "within"/"call_site" context and the "paths" constraints: test_wcet_avr_context.py; the
libgcc 64-bit shifts and "entry_regs" entries: test_wcet_avr_shifts.py).

drv_all (tests/wcet_fixtures/libdrv.c) calls every avr-libc float routine the generator uses
(+ - * / compare, expf, conversions, ldexpf, and logf/atanf/tanhf for __fp_powser's other tables,
cosf for the range reduction of the TPG shapes). The
analyser's own loop forest gives each table loop's headers and body; avr_loopcount.c counts, under
libsimavr, the header executions per entry into the loop over adversarial inputs (subnormals,
cancellation, every exponent difference, extremes). No observation may exceed the table bound.
"""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from nnbuild.wcet import avr_cfg, avr_decode, avr_loops

from test_wcet_avr import FIX, FLOAT_SPECIALS, build
from test_wcet_avr_context import data_symbol

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shutil.which("avr-gcc"), reason="avr-gcc not installed")]


def table_loops(elf, entry):
    """{(symbol, offset): (headers, body byte ranges)} for table loops reachable from `entry`."""
    prog = avr_decode.load(elf)
    table = context_free(avr_loops.load_table())
    keys = {prog.address_of(e["symbol"]) + e["offset"]: (e["symbol"], e["offset"])
            for e in table if e["symbol"] in {s.name for s in prog.symbols}}
    found, seen, work = {}, set(), [prog.address_of(entry)]
    while work:
        addr = work.pop()
        if addr in seen:
            continue
        seen.add(addr)
        region = avr_cfg.build_region(prog, addr, "avre16")
        for loop in avr_loops.find_loops(region, prog):
            if loop.header in keys:
                ranges = {(b, region.blocks[b].last.end) for b in loop.body if isinstance(b, int)}
                heads, old = set(loop.headers), found.get(keys[loop.header], (set(), set()))
                found[keys[loop.header]] = (heads | old[0], ranges | old[1])
        work += [t for b in region.blocks.values() for _, t in b.calls]
        work += [t.target for t in region.tails.values()]
    return found


#: libgcc's 64-bit shift routines: their entries are checked for every count by test_wcet_avr_shifts.py
SHIFT_ROUTINES = ("__ashldi3", "__ashrdi3", "__lshrdi3", "__rotldi3")


def context_free(table):
    """Context-free entries of the avr-libc routines (drv_all reaches every one of them)."""
    return [e for e in table if "within" not in e and "call_site" not in e and "entry_regs" not in e
            and e["symbol"] not in SHIFT_ROUTINES]


def adversarial_pairs():
    """(a, b) float pairs aimed at every data-dependent loop of the fplib routines."""
    rng = np.random.default_rng(7)
    sub = np.uint32([1, 2, 3, 0x80, 0x8000, 0x7FFFFF, 0x400000, 0x1FF, 0x10000]).view(np.float32)
    vals = np.concatenate([FLOAT_SPECIALS, sub, -sub, np.float32([2.0 ** 31 - 128, 4.2e9, -2.1e9,
                                                                 255.5, 0.999, 88.0, -88.0, 127.9])])
    pairs = [(a, b) for a in vals for b in vals]
    for k in range(0, 42):  # every exponent difference, with full mantissas: alignment loops
        for m in (1.0, 1.9999999, 1.5):
            pairs += [(np.float32(1.0), np.float32(-m * 2.0 ** -k)), (np.float32(1.9999999), np.float32(m * 2.0 ** -k))]
    base = (rng.random(300) * 2 + 1).astype(np.float32) * np.float32(2.0) ** rng.integers(-60, 60, 300).astype(np.float32)
    for x in base:  # cancellation: x - nextafter(x), x - x*(1 - 2^-k)
        pairs.append((x, -np.nextafter(x, np.float32(np.inf))))
        pairs.append((x, np.float32(-x * (1 - 2.0 ** -rng.integers(1, 24)))))
        pairs.append((np.float32(x * 2), -np.nextafter(x, np.float32(0))))
    for k in range(1, 24):  # subnormal / normal divisions and products
        d = np.uint32([1 << (k - 1)]).view(np.float32)[0]
        pairs += [(d, np.float32(1.9999999)), (np.float32(1.9999999), d), (d, np.float32(3e38)),
                  (np.float32(1e-38), np.float32(2.0 ** -k)), (d, np.float32(2.0 ** (k + 100)))]
    for k in range(20, 131):  # products just below the subnormal range: longest denormalisation
        pairs += [(np.float32(2.0 ** -k), np.float32(1.9999999 * 2.0 ** (k - 150))),
                  (np.float32(1.0 * 2.0 ** -k), np.float32(2.0 ** (k - 151)))]
    for n in (-382, -381, -300, -257, -256, -255, -200, -140, -129, -150, -24, -23):
        bits = np.uint32([n & 0xFFFF]).view(np.float32)[0]  # ldexpf(in0, (int16_t)bits(in1))
        pairs += [(np.float32(1.0), bits), (np.float32(1.9999999), bits), (np.float32(3.0), bits)]
    for x in np.linspace(-100, 100, 401, dtype=np.float32):  # expf/logf/tanhf ranges
        pairs.append((x, np.float32(x / 7)))
    arr = np.asarray(pairs, dtype=np.float32)
    return arr[np.isfinite(arr).all(axis=1)]


@pytest.fixture(scope="module")
def loopcount(tmp_path_factory):
    out = tmp_path_factory.mktemp("loopcount") / "avr_loopcount"
    proc = subprocess.run(["gcc", "-O2", "-std=gnu99", "-I/usr/include/simavr",
                           os.path.join(FIX, "avr_loopcount.c"), "-o", str(out), "-lsimavr", "-lelf"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("libsimavr not available: " + proc.stderr.strip()[:120])
    return str(out)


def test_every_table_entry_holds_under_simavr(tmp_path_factory, loopcount):
    elfdir = str(tmp_path_factory.mktemp("libloops"))
    elf = build(elfdir, ["libdrv.c"], "drv_all", 2, 20, "Os")
    table = {(e["symbol"], e["offset"]): e for e in context_free(avr_loops.load_table())}
    loops = table_loops(elf, "drv_all")
    assert set(loops) == set(table), f"table entries not reached by drv_all: {set(table) - set(loops)}"
    keys = sorted(loops)
    spec = ";".join("+".join(f"{h:x}" for h in sorted(loops[k][0])) + ":" +
                    ",".join(f"{lo:x}-{hi:x}" for lo, hi in sorted(loops[k][1])) for k in keys)
    prog = avr_decode.load(elf)
    ready, inbuf = prog.address_of("nnbuild_ready"), data_symbol(elf, "nnbuild_in")
    cases = adversarial_pairs()
    proc = subprocess.run([loopcount, elf, "atmega1284", hex(ready), hex(inbuf), "8", spec],
                          input=cases.tobytes(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [ln for ln in proc.stdout.decode().splitlines() if ln[:1].isdigit()]  # simavr chatter
    counts = np.array([[int(v) for v in line.split()] for line in lines])
    assert counts.shape == (len(cases), len(keys))
    worst = counts.max(axis=0)
    print()
    for k, w in zip(keys, worst):
        ent = table[k]
        bound = ent["header_max"] if "header_max" in ent else ent["back_max"] + 1
        print(f"  {k[0]}+{k[1]:#x}: table header_max {bound}, simavr max {w} per entry ({len(cases)} cases)")
        assert w <= bound, f"table entry {k[0]}+{k[1]:#x} exceeded: {w} > {bound}"


def test_table_entries_are_justified_and_well_formed():
    with open(avr_loops.TABLE_PATH) as f:
        doc = json.load(f)
    seen = set()
    for ent in doc["loops"]:
        key = (ent["symbol"], ent["offset"], tuple(ent.get("within", [])), ent.get("call_site"),
               tuple(sorted(ent.get("entry_regs", {}).items())))
        assert key not in seen
        seen.add(key)
        assert ("header_max" in ent) != ("back_max" in ent)
        assert len(ent["pattern"]) >= 4 and len(ent["justification"]) > 60


def test_pattern_mismatch_is_not_applied(tmp_path_factory):
    elfdir = str(tmp_path_factory.mktemp("libloops2"))
    elf = build(elfdir, ["libdrv.c"], "drv_all", 2, 20, "Os")
    prog = avr_decode.load(elf)
    table = [dict(e, pattern=["nop"] * 4) if e["symbol"] == "__mulsf3_pse" else e for e in avr_loops.load_table()]
    region = avr_cfg.build_region(prog, prog.address_of("__mulsf3_pse"), "avre16")
    loops = avr_loops.find_loops(region, prog)
    avr_loops.apply_table(region, loops, prog, table)
    assert all(not l.bounds and "pattern mismatch" in " ".join(l.sources) for l in loops)
