"""The example TPG (fishing_derby.9 cleaned) on the ATmega1284: WCET bound vs the slowest inference
simavr can be driven to, per code shape.

    python3 bench/tpg_avr_wcet.py [--shapes switch,stack] [--rounds 60] [--sweeps 4] [--seed 1] [--write-slow FILE]
    python3 bench/tpg_avr_wcet.py --bounds-only     # the bounds alone, for the six traced cleaned TPGs
    python3 bench/tpg_avr_wcet.py --start tests/data/tpg_fishing_derby_slow.json --sweeps 3 --seed 7
                                                    # coordinate ascent from the stored slowest inputs

Per shape: the built-in analyzer's bound with the generator's visit facts (each team at most once
per inference) and without them (the team loop's bound alone), and the worst cycles measured under
simavr on the recorded game trace, on random screens (bytes), on random doubles of every magnitude,
and on the slowest inputs a seeded search finds (mutating only the screen cells the programs read:
an evolutionary search, 2,000 inputs a round, keeping the 100 slowest, then coordinate ascent
over those cells with random float bit patterns). `--write-slow` stores the
slowest input of each shape (its cells) for tests/test_tpg_sips22.py. Reads ../shared; needs gcc-avr,
avr-libc and simavr (bash scripts/setup.sh).
"""

import argparse
import json
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import pipeline, wcet  # noqa: E402
from nnbuild.runners import tpg_run  # noqa: E402

SIPS22 = REPO.parent / "shared" / "data" / "tpg" / "sips22"
DOT = SIPS22 / "cleaned" / "out_best_cleaned.fishing_derby.9.t48.dot"
TRACE = SIPS22 / "traces" / "fishing_derby.9.obs.u8.gz"
#: values that push soft-float and libm paths: signs, fractions, the exp overflow edge, huge and
#: tiny magnitudes, subnormals
PALETTE = np.array([0, 1, -1, 2, 0.5, -0.5, 1.5, 3.3, 255, -255, 256, 254.5, 88.7, -88.7, 100.25, 1000.5,
                    1e5 + 0.25, 1e10, -1e10, 1e30, -1e30, 3e38, -3e38, 1e-38, 1e-45, -1e-45, 6e7, 1.7e38,
                    8e6 + 0.5, 12345.678, 0.999, 1.0001,
                    # the slowest arguments of avr-libc's expf and cosf found under simavr (sweeps of
                    # expf over [80, 104] and of cosf over exponents 252-254 with bit-flip ascent): exp
                    # of a tiny fraction whose 2^-n is subnormal, cos with 128 reduction passes
                    103.2793, 102.5858, 101.893, 88.0297, 87.3369, -103.2793, 2.833547e38, 1.5497031e38,
                    1.072566e38,
                    # exp's slowest found over z = n + m*2^-16 (n = 146..150, every m < 2^14): z just above
                    # 149 (24 ldexp denormalisation passes, then 1/subnormal), the top one 3,675 cycles
                    103.279106, 102.58596, 101.89281, -103.279106,
                    # beyond float range: +-inf on AVR (a bid inf + -inf is NaN, so a slow exp's
                    # infinite result need not win its edge)
                    1e39, -1e39])
POPULATION, KEEP = 2000, 100


def read_cells(code):
    """Indices of the screen cells the generated code reads."""
    return sorted({int(m) for m in re.findall(r"screen\[(\d+)\]", code)} - {1344})


def random_values(rng, n):
    """Each value a palette entry, an integer in -300..299, or +-10^u for u in [-40, 38.5]."""
    kind = rng.integers(0, 3, n)
    return np.where(kind == 0, rng.choice(PALETTE, n),
                    np.where(kind == 1, rng.integers(-300, 300, n).astype(float),
                             rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-40, 38.5, n)))


def search(run, cells, rng, rounds):
    """(slowest input, its cycles) after `rounds` rounds of mutation of the slowest inputs."""
    x = np.zeros((POPULATION, 1344))
    x[:, cells] = np.stack([random_values(rng, POPULATION) for _ in cells], axis=1)
    best, best_cycles = None, -1
    for _ in range(rounds):
        cycles = run(x)
        order = np.argsort(-cycles, kind="stable")
        if cycles[order[0]] > best_cycles:
            best, best_cycles = x[order[0]].copy(), int(cycles[order[0]])
        x = np.repeat(x[order[:KEEP]], POPULATION // KEEP, axis=0)
        for row in x[KEEP:]:
            for k in rng.choice(cells, rng.integers(1, 4), replace=False):
                row[k] = random_values(rng, 1)[0] if rng.random() < 0.5 else row[k] * (1 + rng.normal(0, 0.1))
    return best, best_cycles


def float_patterns(rng, n):
    """n doubles from uniformly random finite float32 bit patterns (every exponent, both signs)."""
    bits = rng.integers(0, 0x7F800000, n, dtype=np.uint64).astype(np.uint32)
    bits |= rng.integers(0, 2, n, dtype=np.uint64).astype(np.uint32) << np.uint32(31)
    return bits.view(np.float32).astype(float)


def neighbours(rng, value, n):
    """The float32 `value` with each single bit flipped, and n variants with random low bits flipped."""
    with np.errstate(over="ignore"):  # a value beyond float range is an infinity on AVR too
        bits = np.array([value], dtype=np.float32).view(np.uint32)[0]
    flips = np.concatenate([np.uint32(1) << np.arange(32, dtype=np.uint32),
                            rng.integers(1, 1 << 16, n, dtype=np.uint64).astype(np.uint32)])
    with np.errstate(invalid="ignore"):  # flips that make a NaN are dropped below
        out = (bits ^ flips).astype(np.uint32).view(np.float32).astype(float)
    return out[np.isfinite(out)]


def ascend(run, start, cycles, cells, rng, sweeps):
    """Coordinate ascent from `start`: per cell in turn, try float bit patterns, neighbours of the
    current value (bit flips), the palette and the integers -300..300 there, keep the slowest; stop
    after a sweep without gain."""
    best, best_cycles = start.copy(), cycles
    for _ in range(sweeps):
        gained = False
        for k in rng.permutation(cells):
            values = np.concatenate([float_patterns(rng, 1000), neighbours(rng, best[k], 400), PALETTE,
                                     np.arange(-300, 301, dtype=float)])
            x = np.repeat(best[None], len(values), axis=0)
            x[:, k] = values
            c = run(x)
            i = int(np.argmax(c))
            if c[i] > best_cycles:
                best, best_cycles, gained = x[i].copy(), int(c[i]), True
        if not gained:
            break
    return best, best_cycles


def trace_frames():
    import gzip
    with gzip.open(TRACE) as f:
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, 1344).astype(float)


def stored_input(path, shape, cells):
    """The screen of `shape` in a --write-slow file (its cells; every other cell 0)."""
    x = np.zeros(1344)
    for k, v in json.loads(Path(path).read_text())[shape].items():
        x[int(k)] = v
    assert set(np.flatnonzero(x)) <= set(cells), f"{path}: {shape} sets cells the programs do not read"
    return x


def measure(shape, rounds, sweeps, seed, work, start=None):
    board = pipeline.load_board("avr")
    program, harness = pipeline.build_check_program(str(DOT), board, work, name="fd", shape=shape,
                                                    environment="sips22-atari")
    facts = json.loads((work / "gen" / "fd.flowfacts.json").read_text())
    bound = wcet.analyze(board, program, "fd_infer", facts, work / "wcet")
    loop_only = wcet.analyze(board, program, "fd_infer", {k: v for k, v in facts.items() if k != "visits"},
                             work / "wcet_loop_only")

    def run(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # doubles beyond float range become inf
            return tpg_run.run_simavr(program, x, entry_symbol="fd_infer", mcu=board["mcu"],
                                      freq=board["clock_hz"], harness=harness, nm=board["nm"])[1]

    rng = np.random.default_rng(seed)
    cells = read_cells((work / "gen" / "fd.c").read_text())
    mixed = np.zeros((POPULATION, 1344))
    mixed[:, cells] = np.stack([random_values(rng, POPULATION) for _ in cells], axis=1)
    t0 = time.time()
    if start:  # coordinate ascent from a stored input, no evolutionary search
        slow = stored_input(start, shape, cells)
        slow_cycles = int(run(slow[None])[0])
    else:
        slow, slow_cycles = search(run, cells, rng, rounds)
    slow, slow_cycles = ascend(run, slow, slow_cycles, cells, rng, sweeps)
    return {"shape": shape, "bound": bound.cycles, "bound_loop_only": loop_only.cycles,
            "visits": bound.details["paths"].get(next((k for k in bound.details["paths"] if k.startswith("fd_infer")), ""), []),
            "trace": int(run(trace_frames()).max()),
            "random_bytes": int(run(rng.integers(0, 256, (POPULATION, 1344)).astype(float)).max()),
            "random_doubles": int(run(mixed).max()), "search": slow_cycles, "search_seconds": time.time() - t0,
            "slow_input": {str(k): float(slow[k]) for k in cells}}


CLEANED = ("fishing_derby.9", "frostbite.2", "alien.4", "asteroids.1", "centipede.7", "alien.0")


def bounds_only(work):
    """WCET bounds of every traced cleaned TPG: switch with and without the visit facts, stack."""
    board = pipeline.load_board("avr")
    print("| TPG (cleaned) | WCET bound, switch | switch, loop bound only | WCET bound, stack |")
    print("|---|---|---|---|")
    for game in CLEANED:
        dot = SIPS22 / "cleaned" / f"out_best_cleaned.{game}.t48.dot"
        row = []
        for shape in ("switch", "stack"):
            where = work / game / shape
            program, _ = pipeline.build_check_program(str(dot), board, where, name="fd", shape=shape,
                                                      environment="sips22-atari")
            facts = json.loads((where / "gen" / "fd.flowfacts.json").read_text())
            row.append(wcet.analyze(board, program, "fd_infer", facts, where / "wcet").cycles)
            if shape == "switch":
                row.append(wcet.analyze(board, program, "fd_infer", {k: v for k, v in facts.items() if k != "visits"},
                                        where / "wcet_loop_only").cycles)
        print(f"| {game} | " + " | ".join(f"{c:,}" for c in row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="switch,stack")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--sweeps", type=int, default=4, help="coordinate-ascent sweeps after the rounds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write-slow", help="JSON file for the slowest input of each shape")
    ap.add_argument("--start", help="a --write-slow file: ascend from its input of each shape instead of searching")
    ap.add_argument("--json")
    ap.add_argument("--bounds-only", action="store_true", help="the six cleaned TPGs' bounds, no simavr search")
    args = ap.parse_args()
    if not DOT.is_file():
        sys.exit(f"{DOT} not found: ../shared must be beside this checkout")
    if args.bounds_only:
        with tempfile.TemporaryDirectory() as tmp:
            bounds_only(Path(tmp))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            rows.append(measure(shape, args.rounds, args.sweeps, args.seed, Path(tmp) / shape, args.start))
    print("| shape | bound, loop bound only | bound, with visit facts | trace max | random bytes max "
          "| random doubles max | searched max | bound/measured |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        worst = max(r["trace"], r["random_bytes"], r["random_doubles"], r["search"])
        print(f"| {r['shape']} | {r['bound_loop_only']:,} | {r['bound']:,} | {r['trace']:,} | {r['random_bytes']:,} "
              f"| {r['random_doubles']:,} | {r['search']:,} ({r['search_seconds']:.0f} s) "
              f"| {r['bound'] / worst:.2f} |")
        if r["bound"] < worst:
            print(f"UNSOUND: {r['shape']} bound {r['bound']:,} < measured {worst:,}")
            sys.exit(1)
    for r in rows:
        for note in r["visits"]:
            print(f"  {r['shape']}: {note}")
    if args.write_slow:
        Path(args.write_slow).write_text(json.dumps(
            {"about": f"slowest inputs found by bench/tpg_avr_wcet.py --rounds {args.rounds} --sweeps {args.sweeps} "
                      f"--seed {args.seed} "
                      "(screen cell -> value; every other cell 0)",
             **{r["shape"]: r["slow_input"] for r in rows}}, indent=1, sort_keys=True) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
