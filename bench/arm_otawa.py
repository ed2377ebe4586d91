"""Every ARM example on the ARM7TDMI board: OTAWA's bound (nnbuild's arm7tdmi script: TRM clocks at
zero wait states, IPET by owcet on the generator's flow facts) beside the worst run measured under
qemu-arm with the same clocks charged per executed instruction, and their ratio; the last column
counts the soft-float call sites whose value facts (nnbuild/numerics/float_facts.py, the `paths`
and `caller_tags` of nnbuild/wcet/arm_libloops.json) tightened OTAWA's system. The worst input an
adversarial search finds is tests/test_arm_adversarial.py's figure (pytest -s).

    python3 bench/arm_otawa.py [--only xor,f1tenth-q16] [--json out.json]

Runs the real build (`scons target=arm model=M ... deadline=none`) in this checkout and reads
build/arm/<model>/report.json; a refused build prints its one-line reason instead of figures.
Needs gcc-arm-none-eabi, qemu-user and OTAWA (bash scripts/setup.sh --with-otawa).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLOCK_HZ = json.loads((REPO / "toolchains" / "arm.json").read_text())["clock_hz"]
#: (row name, scons arguments)
EXAMPLES = [
    ("xor", ["model=xor"]),
    ("xor-O2", ["model=xor", "opt=-O2"]),
    ("f1tenth-q16", ["model=f1tenth", "precision=q16-acc32"]),
    ("f1tenth-q16-O2", ["model=f1tenth", "precision=q16-acc32", "opt=-O2"]),
    ("f1tenth-fix16", ["model=f1tenth", "precision=fix16"]),
    ("f1tenth-fix16-O2", ["model=f1tenth", "precision=fix16", "opt=-O2"]),
    ("f1tenth-float32", ["model=f1tenth", "precision=float32"]),
    ("f1tenth-float32-O2", ["model=f1tenth", "precision=float32", "opt=-O2"]),
    ("acasxu", ["model=acasxu"]),
    ("cifarnet", ["model=cifarnet"]),
    ("lenet5", ["model=lenet5"]),
    ("lenet5-v1", ["model=lenet5", "shape=v1"]),
    ("xor-v1", ["model=xor", "shape=v1"]),
    ("tpg-switch", ["model=tpg_fishing_derby", "shape=switch"]),
    ("tpg-stack", ["model=tpg_fishing_derby", "shape=stack"]),
    ("lenet5-O2", ["model=lenet5", "opt=-O2"]),
    ("acasxu-O2", ["model=acasxu", "opt=-O2"]),
    ("cifarnet-O2", ["model=cifarnet", "opt=-O2"]),
    ("lenet5-v1-O2", ["model=lenet5", "shape=v1", "opt=-O2"]),
    ("xor-v1-O2", ["model=xor", "shape=v1", "opt=-O2"]),
    ("tpg-switch-O2", ["model=tpg_fishing_derby", "shape=switch", "opt=-O2"]),
    ("tpg-stack-O2", ["model=tpg_fishing_derby", "shape=stack", "opt=-O2"]),
]


def build(args):
    """(report dict, None) of a passing build, or (None, its error line)."""
    run = subprocess.run([sys.executable, "-m", "SCons", "-Q", "target=arm", *args, "deadline=none"], cwd=REPO,
                         capture_output=True, text=True)
    model = model_of(args)
    if run.returncode != 0:
        lines = [l for l in (run.stdout + run.stderr).splitlines() if "error" in l.lower()]
        return None, (lines or ["failed"])[0]
    return json.loads((REPO / "build" / "arm" / model / "report.json").read_text()), None


def model_of(args):
    return next(a.split("=", 1)[1] for a in args if a.startswith("model="))


def value_fact_sites(model):
    """'tagged/all' call sites of the fmul/fdiv path rows OTAWA's system got (arm_libloops.json
    `paths`, nnbuild/wcet/otawa_paths.py), e.g. '40/60 fmul, 3/3 fdiv'; '-' without rows."""
    details = json.loads((REPO / "build" / "arm" / model / "wcet.json").read_text()).get("details", {})
    seen = {}
    for row in (details.get("ilp") or {}).get("path_constraints", []):
        sites = row["call_sites"]
        tagged, total = sum(n for t, n in sites.items() if t != "other"), sum(sites.values())
        seen[row["routine"]] = max(seen.get(row["routine"], (0, 0)), (tagged, total))
    return ", ".join(f"{t}/{n} {r.replace('__aeabi_', '')}" for r, (t, n) in sorted(seen.items())) or "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated row names")
    ap.add_argument("--json", help="also write the figures here")
    opts = ap.parse_args(argv)
    rows = [(n, a) for n, a in EXAMPLES if not opts.only or n in opts.only.split(",")]
    results = {}
    print("| ARM example | OTAWA bound (clocks) | at 60 MHz | measured (qemu-arm, same clocks) | bound/measured "
          "| soft-float call sites with value facts |")
    print("|---|---|---|---|---|---|")
    for name, args in rows:
        report, error = build(args)
        if report is None:
            results[name] = {"error": error}
            print(f"| {name} | refused: {error} | | | | |", flush=True)
            continue
        wcet = report["wcet"]
        bound, measured = wcet["wcet_cycles"], wcet["measured_cycles"]
        facts = value_fact_sites(model_of(args))
        results[name] = {"bound": bound, "measured": measured, "ratio": wcet["bound_over_measured"],
                         "value_fact_sites": facts}
        print(f"| {name} | {bound:,} | {bound / CLOCK_HZ * 1e3:.2f} ms | {measured:,} | "
              f"{wcet['bound_over_measured']:.4f} | {facts} |", flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
