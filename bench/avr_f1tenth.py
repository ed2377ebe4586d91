"""The F1/10 controller on the ATmega1284 (20 MHz) in each precision: WCET bound, worst measured
cycles (simavr), bound/measured, error, flash, and per layer the bound's cycles per
multiply-accumulate, each beside issue 13's target and the seed's figure; for q16-acc32 and q8 also
issue 27's figures (measured cycles per MAC, WCET ms, bound/measured, per-layer cycles per MAC)
beside those recorded before the paired kernels and with them (two neurons a pass), and the inner
loop's floor (FLOOR).

    python3 bench/avr_f1tenth.py [--precisions q16-acc32,q8,fix16,float32] [--json out.json]

Runs the real build (`scons target=avr model=f1tenth precision=P deadline=10s`) in a temporary copy
of the project, so every figure comes from avr-gcc, simavr and the built-in analyzer, then reads
build/avr/f1tenth/report.json. Needs gcc-avr, avr-libc and simavr (bash scripts/setup.sh).
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import pipeline  # noqa: E402

#: nnbuild too: site_init puts the copy's root first on sys.path, so the build measures this checkout
PARTS = ("SConstruct", "site_scons", "toolchains", "firmware_examples", "nnbuild")
#: issue 13: (WCET ms at 20 MHz, max error vs float64, bound/measured) per precision
TARGETS = {"q16-acc32": (45.0, 1e-3, 1.03), "q8": (None, 1e-3, 1.03), "fix16": (None, 1e-3, 1.03),
           "float32": (None, 1e-3, 1.5)}
#: the build's own gate tolerance where the example's 1e-3 cannot hold (q8's int8 weights: ~1e-2);
#: the figure is still printed against the issue's target above
GATE_TOLERANCE = {"q8": "2e-2"}
#: the seed (Pearce et al.): this network in fix16 on Patmos at 50 MHz, WCET by platin
SEED_MS = 82.83
#: issue 27: measured cycles per MAC (whole inference / 24,320 MACs) and WCET ms per precision
GOALS = {"q16-acc32": (29.0, 36.0), "q8": (19.0, 24.0)}
#: recorded by this bench before the paired kernels (one neuron per pass, AVR201's signed MAC:
#: 32 cycles per q16 MAC, 21 per q8 MAC in the inner loop): WCET and measured cycles, and per
#: layer the bound's cycles per MAC; "before" in the table below
BEFORE = {"q16-acc32": (876_531, 873_917, {"dense_1": 36.7, "dense_2": 34.7, "dense_3": 35.5}),
          "q8": (613_443, 610_829, {"dense_1": 26.1, "dense_2": 24.0, "dense_3": 24.8})}

#: recorded by this bench with the paired kernels (two neurons a pass, before the four-neuron
#: ones): WCET = measured cycles, and per layer the bound's cycles per MAC
PAIRS = {"q16-acc32": (718_784, {"dense_1": 29.9, "dense_2": 28.4, "dense_3": 34.8}),
         "q8": (445_913, {"dense_1": 18.5, "dense_2": 17.4, "dense_3": 23.8})}
#: the four-neuron inner loop per MAC, counted instruction by instruction (fixed_helpers.c.j2):
#: q16: LPM 2 x 3 + MUL 4 x 2 + 11 adds (the two straight products as one 4-byte add after a MOVW,
#: the cross ones 3 each) = 25 a neuron, + the input's two LD (4) shared by 4 neurons, + the loop's
#: dec/breq/rjmp (4) per 8 inputs: 25 + 1 + 0.125; q8: LPM 3 + MUL 2 x 2 + 7 adds = 14, + 1 + 0.125
#: (q8's loop reaches 14.5 with three neurons on split 24-bit sums, but the spills around it cost
#: more than it saves: 430,747 cycles for the inference against 427,817)
FLOOR = {"q16-acc32": 26.125, "q8": 15.125}


def build(project, precision):
    run = subprocess.run([sys.executable, "-m", "SCons", "-Q", "target=avr", "model=f1tenth",
                          f"precision={precision}", "deadline=10s",
                          *([f"tolerance={GATE_TOLERANCE[precision]}"] if precision in GATE_TOLERANCE else [])],
                         cwd=project, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"scons failed for {precision}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return json.loads((project / "build/avr/f1tenth/report.json").read_text())


def verdict(value, limit):
    return "" if limit is None else (" (meets <= %g)" % limit if value <= limit else " (misses <= %g)" % limit)


def print_before_after(precision, w, r, per_mac, total_macs):
    """Issue 27's figures beside the recorded ones of the one-neuron kernels (BEFORE)."""
    if precision not in BEFORE:
        return
    bound0, measured0, layers0 = BEFORE[precision]
    goal_cpm, goal_ms = GOALS[precision]
    cpm, cpm0 = r["measured_cycles"] / total_macs, measured0 / total_macs
    print(f"             issue 27, before -> now: measured cycles per MAC {cpm0:.1f} -> {cpm:.1f}"
          f"{verdict(cpm, goal_cpm)}; WCET {bound0 / 20e3:.2f} -> {w['wcet_ms']:.2f} ms{verdict(w['wcet_ms'], goal_ms)}; "
          f"bound/measured {bound0 / measured0:.4f} -> {w['bound_over_measured']:.4f}{verdict(w['bound_over_measured'], 1.01)}")
    print("             per layer, bound's cycles per MAC before -> now: " + ", ".join(
        f"{name} {layers0[name]:.1f} -> {c:.1f}" for name, (_, c) in per_mac.items() if name in layers0))
    measured2, layers2 = PAIRS[precision]
    print(f"             two neurons a pass -> four: measured cycles per MAC {measured2 / total_macs:.1f} -> {cpm:.1f}; "
          "per layer (bound) " + ", ".join(f"{name} {layers2[name]:.1f} -> {c:.1f}" for name, (_, c) in per_mac.items()
                                           if name in layers2))
    print(f"             the inner loop's floor (four neurons a pass, counted): {FLOOR[precision]:.3f} cycles per MAC; "
          f"the rest of the measured {cpm:.2f} is input rounding, tanh, requantisation and the one-neuron dense_3")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precisions", default="q16-acc32,q8,fix16,float32")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    model = pipeline.load_model(REPO / "firmware_examples/f1tenth/architecture.json", "f1tenth")[0]
    macs = {l.name: l.inputs * l.units for l in model.layers if l.kind == "dense"}
    project = Path(tempfile.mkdtemp(prefix="nnbuild-bench-avr-"))
    results = []
    try:
        for part in PARTS:
            src = REPO / part
            (shutil.copytree(src, project / part, ignore=shutil.ignore_patterns("build", "__pycache__"))
             if src.is_dir() else shutil.copy2(src, project / part))
        print(f"F1/10 (61-128-128-1 tanh, {sum(macs.values()):,} MACs) on the ATmega1284 at 20 MHz; the seed: "
              f"{SEED_MS} ms (fix16, Patmos 50 MHz, platin)")
        for precision in args.precisions.split(","):
            r = build(project, precision)
            w = r["wcet"]
            ms_target, err_target, ratio_target = TARGETS.get(precision, (None, None, None))
            print(f"  {precision:<10} WCET {w['wcet_cycles']:>11,} cycles = {w['wcet_ms']:8.2f} ms"
                  f"{verdict(w['wcet_ms'], ms_target)}, {w['wcet_ms'] / SEED_MS:.2f}x the seed's ms; measured "
                  f"{r['measured_cycles']:,}; bound/measured {w['bound_over_measured']:.4f}"
                  f"{verdict(w['bound_over_measured'], ratio_target)}; max error {r['max_abs_error']:.2g}"
                  f"{verdict(r['max_abs_error'], err_target)}; flash {r['flash_bytes']:,} B")
            per_mac = {name: (d["cycles"], d["cycles"] / macs[name]) for name, d in w["per_layer"].items()
                       if name in macs}
            print("             per layer (bound): " + ", ".join(
                f"{name} {cycles:,} cycles = {cpm:.1f} per MAC" for name, (cycles, cpm) in per_mac.items()))
            print_before_after(precision, w, r, per_mac, sum(macs.values()))
            results.append({"precision": precision, "wcet_cycles": w["wcet_cycles"], "wcet_ms": w["wcet_ms"],
                            "measured_cycles": r["measured_cycles"], "bound_over_measured": w["bound_over_measured"],
                            "max_abs_error": r["max_abs_error"], "flash_bytes": r["flash_bytes"],
                            "cycles_per_mac": {n: c for n, (_, c) in per_mac.items()},
                            "targets": dict(zip(("wcet_ms", "max_abs_error", "bound_over_measured"),
                                                TARGETS.get(precision, (None,) * 3)))})
    finally:
        shutil.rmtree(project, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
