"""The example TPG (fishing_derby.9 cleaned) on the ARM7TDMI board: OTAWA's bound (arm7tdmi clocks,
newlib's and libgcc's double loops bounded by nnbuild/wcet/arm_libloops.json) vs the slowest
inference qemu-arm is driven to with the same clocks charged, per code shape.

    python3 bench/tpg_arm_wcet.py [--shapes switch,stack] [--opt=-O2] [--count 200] [--seed 1] [--json out.json]

Measured on the recorded game trace, on random screens (bytes), on random doubles of every magnitude
(bench/tpg_avr_wcet.py's palette and magnitudes, in the cells the programs read) and on screens
that send huge arguments to cos() (newlib's __kernel_rem_pio2). qemu-arm charges about 0.13 s an
inference here, so there is no search as on AVR. Reads ../shared; needs gcc-arm-none-eabi, qemu-user
and OTAWA (bash scripts/setup.sh --with-otawa).
"""

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from nnbuild import pipeline, wcet  # noqa: E402
from tpg_avr_wcet import DOT, read_cells, random_values, trace_frames  # noqa: E402

#: huge cos() arguments: cells where the programs take cos of a value scaled up by exp()
HUGE = [6381956970095103 * 2.0 ** 797, 1.7976931348623157e308, 1e22, 1e300, 5.5e110]


def huge_cos_screens(cells, rng, n):
    """Screens whose read cells are huge magnitudes or the values that make exp() overflow-edge."""
    x = np.zeros((n, 1344))
    x[:, cells] = rng.choice(HUGE + [88.7, 709.5, 0.5, 1.5, 255.0], (n, len(cells)))
    return x


def measure(shape, count, seed, work, opt=None):
    board = pipeline.load_board("arm")
    program, harness = pipeline.build_check_program(str(DOT), board, work, name="fd", shape=shape, opt=opt,
                                                    environment="sips22-atari")
    facts = json.loads((work / "gen" / "fd.flowfacts.json").read_text())
    bound = wcet.analyze(board, program, "fd_infer", facts, work / "wcet")

    def run(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return int(pipeline.run_cases(board, program, x, 1, harness=harness, kind="tpg", entry="fd_infer")[1].max())

    rng = np.random.default_rng(seed)
    cells = read_cells((work / "gen" / "fd.c").read_text())
    mixed = np.zeros((count, 1344))
    mixed[:, cells] = np.stack([random_values(rng, count) for _ in cells], axis=1)
    frames = trace_frames()
    return {"shape": shape, "bound": bound.cycles,
            "trace": run(frames[np.linspace(0, len(frames) - 1, count).astype(int)]),
            "random_bytes": run(rng.integers(0, 256, (count, 1344)).astype(float)),
            "random_doubles": run(mixed), "huge_cos": run(huge_cos_screens(cells, rng, count))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="switch,stack")
    ap.add_argument("--count", type=int, default=200, help="inputs per kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--opt", help="optimisation flag (default: the board's, -O0)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not DOT.is_file():
        sys.exit(f"{DOT} not found: ../shared must be beside this checkout")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(shape, args.count, args.seed, Path(tmp) / shape, args.opt) for shape in args.shapes.split(",")]
    print("| shape | OTAWA bound | trace max | random bytes max | random doubles max | huge cos() args max "
          "| bound/measured |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        worst = max(r["trace"], r["random_bytes"], r["random_doubles"], r["huge_cos"])
        print(f"| {r['shape']} | {r['bound']:,} | {r['trace']:,} | {r['random_bytes']:,} | {r['random_doubles']:,} "
              f"| {r['huge_cos']:,} | {r['bound'] / worst:.1f} |")
        if r["bound"] < worst:
            print(f"UNSOUND: {r['shape']} bound {r['bound']:,} < measured {worst:,}")
            sys.exit(1)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
