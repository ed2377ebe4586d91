"""Host x86-64 instructions per TPG inference (callgrind Ir, libm included) of nnbuild's `switch`
and `stack` code on the 12 traced SiPS'22 TPGs, next to the figures for GEGELATI v1.4.0's own
generated code given in ../shared/docs/tpg.md (same measurement: gcc -O3 -std=c11, the first
2000 frames of each trace, callgrind, lower is better).

    python3 bench/tpg_callgrind.py [--frames 2000] [--only fishing_derby.9,...] [--kinds cleaned,full]
                                   [--shapes switch,stack] [--no-tables] [--json out.json]

For each TPG and shape: generate the C (environment sips22-atari), build it with a driver that
converts the frames to doubles first and then calls `<name>_infer` once per frame, run it under
`valgrind --tool=callgrind --toggle-collect=<name>_infer`, and divide the collected Ir by the
number of frames. The actions must be identical to the recorded ones (checked, printed). The
ratios to GEGELATI's switch code are printed as measured, with the targets of issue 27 (median
<= 0.4) and issue 6 (max <= 0.95). GEGELATI's figures are the recorded ones (its v1.4.0 code
generator needs the C++ library and the trained application's instruction set; it is not built
here), measured the same way on the same frames. --no-tables measures the code without the environment's integer tables
(nnbuild's structural savings alone). The data stays in ../shared: nothing is copied.
"""

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import codegen  # noqa: E402
from nnbuild.frontends import gegelati_dot  # noqa: E402
from nnbuild.ir.tpg import Environment  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "tpg" / "sips22"
GAMES = ("fishing_derby.9", "frostbite.2", "alien.4", "asteroids.1", "centipede.7", "alien.0")
#: ../shared/docs/tpg.md section 5: (teams/edges/programs, library, GEGELATI switch, GEGELATI stack)
GEGELATI = {
    ("fishing_derby.9", "cleaned"): ("4/10/9", 80_285, 788, 825),
    ("fishing_derby.9", "full"): ("14/141/124", 340_516, 3_304, 3_403),
    ("frostbite.2", "cleaned"): ("6/14/14", 36_441, 151, 167),
    ("frostbite.2", "full"): ("19/160/141", 186_169, 2_123, 2_194),
    ("alien.4", "cleaned"): ("11/28/25", 179_013, 1_514, 1_563),
    ("alien.4", "full"): ("122/1888/1435", 796_604, 7_283, 7_447),
    ("asteroids.1", "cleaned"): ("12/34/34", 313_783, 2_137, 2_231),
    ("asteroids.1", "full"): ("90/1184/903", 912_306, 7_112, 7_261),
    ("centipede.7", "cleaned"): ("4/11/11", 149_507, 982, 1_027),
    ("centipede.7", "full"): ("150/2381/1745", 922_404, 7_931, 7_942),
    ("alien.0", "cleaned"): ("12/30/27", 180_412, 1_891, 1_990),
    ("alien.0", "full"): ("505/13142/9352", 1_197_610, 13_850, 13_856),
}
CFLAGS = ["-O3", "-std=c11"]
TARGET_MEDIAN, TARGET_MAX = 0.4, 0.95

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tpg.h"
/* argv[1]: frames file (N x TPG_INPUTS bytes); argv[2]: N. Prints one action per frame. */
int main(int argc, char **argv)
{
    FILE *f;
    long n, i, k;
    unsigned char *raw;
    double *obs;
    int *act;
    if (argc != 3 || !(f = fopen(argv[1], "rb")))
        return 2;
    n = atol(argv[2]);
    raw = malloc((size_t)n * TPG_INPUTS);
    obs = malloc(sizeof(double) * (size_t)n * TPG_INPUTS);
    act = malloc(sizeof(int) * (size_t)n);
    if (!raw || !obs || !act || fread(raw, TPG_INPUTS, (size_t)n, f) != (size_t)n)
        return 3;
    for (k = 0; k < n * TPG_INPUTS; ++k)
        obs[k] = (double)raw[k];
    for (i = 0; i < n; ++i)
        act[i] = TPG_INFER_FLAT(obs + i * TPG_INPUTS);
    for (i = 0; i < n; ++i)
        printf("%d\n", act[i]);
    return 0;
}
"""


def dot_file(game, kind):
    if kind == "cleaned":
        return DATA / "cleaned" / f"out_best_cleaned.{game}.t48.dot"
    return DATA / "full" / f"out_best.{game}.t48.dot"


def trace(game, frames):
    obs = np.frombuffer(gzip.open(DATA / "traces" / f"{game}.obs.u8.gz").read(), np.uint8).reshape(-1, 1344)
    actions = np.array((DATA / "traces" / f"{game}.actions.txt").read_text().split(), dtype=int)
    return obs[:frames], actions[:frames]


def measure(model, shape, frames_file, n, workdir):
    """(Ir per inference, actions, compile seconds) of one generated shape."""
    gen = workdir / "gen"
    if gen.exists():
        shutil.rmtree(gen)
    codegen.generate(model, gen, shape=shape)
    (workdir / "driver.c").write_text(DRIVER)
    exe = workdir / "bench"
    t0 = time.time()
    subprocess.run(["gcc", *CFLAGS, f"-I{gen}", str(workdir / "driver.c"), str(gen / "tpg.c"),
                    str(gen / "tpg_weights.c"), "-o", str(exe), "-lm"], check=True)
    compile_s = time.time() - t0
    out = workdir / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=tpg_infer",
                          f"--callgrind-out-file={out}", str(exe), str(frames_file), str(n)],
                         capture_output=True, text=True, check=True)
    ir = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
    return ir / n, np.array(run.stdout.split(), dtype=int), compile_s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--only", help="comma-separated games (default: the 6 traced ones)")
    ap.add_argument("--kinds", default="cleaned,full")
    ap.add_argument("--shapes", default="switch,stack")
    ap.add_argument("--no-tables", action="store_true", help="without the environment's integer tables")
    ap.add_argument("--json", help="write the measurements here")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        print(f"bench: {DATA} not found (the SiPS'22 TPGs live in ../shared beside the checkout)", file=sys.stderr)
        return 2
    if not shutil.which("valgrind"):
        print("bench: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    env = Environment.load("sips22-atari")
    if args.no_tables:
        env = replace(env, integer_tables=None)
    games = args.only.split(",") if args.only else GAMES
    kinds, shapes = args.kinds.split(","), args.shapes.split(",")
    rows = []
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"instructions per inference, callgrind, {gcc}, {' '.join(CFLAGS)}, first {args.frames} frames"
          + (", no integer tables" if args.no_tables else "")
          + "; GEGELATI v1.4.0 figures as recorded in ../shared/docs/tpg.md (same measurement, not rebuilt here)")
    header = f"{'TPG':28s} {'t/e/p':>15s} {'GEGELATI switch':>15s} {'GEGELATI stack':>14s}"
    for s in shapes:
        header += f" {'ours ' + s:>12s} {'ratio':>6s}"
    print(header + "  actions")
    with tempfile.TemporaryDirectory(prefix="tpg-bench-") as tmp:
        tmp = Path(tmp)
        for game in games:
            obs, recorded = trace(game, args.frames)
            frames_file = tmp / f"{game}.u8"
            frames_file.write_bytes(obs.tobytes())
            for kind in kinds:
                model = gegelati_dot.load(dot_file(game, kind), env)
                model.name = "tpg"
                shape_, _, g_switch, g_stack = GEGELATI[(game, kind)]
                row = {"tpg": f"{game} {kind}", "gegelati_switch": g_switch, "gegelati_stack": g_stack}
                line = f"{game + ' ' + kind:28s} {shape_:>15s} {g_switch:15,d} {g_stack:14,d}"
                agree = []
                for s in shapes:
                    ir, actions, compile_s = measure(model, s, frames_file, len(obs), tmp)
                    mismatches = int(np.sum(actions != recorded))
                    ref = g_switch if s == "switch" else g_stack
                    row[s] = {"ir_per_inference": round(ir, 1), "ratio": round(ir / ref, 4),
                              "ratio_to_gegelati_switch": round(ir / g_switch, 4),
                              "mismatches": mismatches, "compile_s": round(compile_s, 1)}
                    line += f" {ir:12,.1f} {ir / ref:6.3f}"
                    agree.append(f"{s} {len(obs) - mismatches}/{len(obs)}")
                print(line + "  " + ", ".join(agree), flush=True)
                rows.append(row)
    for s in shapes:
        ratios = np.array([r[s]["ratio_to_gegelati_switch"] for r in rows])
        print(f"ours {s} / GEGELATI switch: median {np.median(ratios):.3f} (target <= {TARGET_MEDIAN}), "
              f"max {ratios.max():.3f} (target <= {TARGET_MAX}) over {len(ratios)} TPGs"
              + ("" if s != "switch" else
                 f" -> {'met' if np.median(ratios) <= TARGET_MEDIAN and ratios.max() <= TARGET_MAX else 'NOT met'}"))
    bad = [(r["tpg"], s) for r in rows for s in shapes if r[s]["mismatches"]]
    print("actions identical to the recorded ones: " + ("all" if not bad else f"NO: {bad}"))
    if args.json:
        Path(args.json).write_text(json.dumps({"flags": CFLAGS, "frames": args.frames, "gcc": gcc,
                                               "tables": not args.no_tables, "rows": rows}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
