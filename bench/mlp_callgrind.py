"""Host x86-64 instructions per inference (callgrind Ir, callees included) of nnbuild's MLP code
against ACETONE's, built side by side in the same run, for peers.md's topologies (the F1/10-sized
MLP 59-128-128-1 and the ACAS-like 5-7x50-5, ReLU, seeded weights), with the ratio at each flag set
and issue 27's goals (<= 0.35x at -O0 and -O2 -fno-tree-vectorize, <= 0.5x at -O3).

    python3 bench/mlp_callgrind.py [--inputs 5] [--json out.json] [--acetone-python PATH]

ACETONE (acetone-nnet 1.0.post1) runs from an interpreter of its own (bench/peer_acetone.py says
how to make one): it generates its C for the same layers and weights into the bench's temporary
directory, which is built with the same driver and flags and measured the same way (one inference
per process, Ir of the inference function and its callees, minimum over the inputs; every output
checked against nnbuild's float64 reference). Without that interpreter the bench falls back to
peers.md's recorded figures and says so on each line ("recorded"); peers.md has no -O3 column, so
the recorded fallback at -O3 is ACETONE's -O2 figure (vectoriser on). keras2c is not built here
(its wheel omits the C runtime its code includes): its figures are always the recorded ones.

The mlp shape is measured with the host board's weights storage `const-simd` (16-byte GCC vectors,
one neuron per lane, written in the C: `-fno-tree-vectorize` turns off gcc's auto-vectoriser, not
vector types the source spells out, so at that flag set it is SIMD code against ACETONE's scalar
code), with `const-host` (plain C99, no vector type: the like-for-like scalar figure; the weights of
up to 12 neurons interleaved so that gcc -O3's SLP vectoriser computes them in vector registers,
each neuron's sum in input order), with `const` (scalar, the layout the MCU targets get), then the
v2 shape (scalar). Each line says whether ACETONE's figure is measured in this run or recorded.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import peer_acetone  # noqa: E402
from acasxu_callgrind import acas_like, build, callgrind_runs, macs, run_in_workdir, seeded_mlp  # noqa: E402
from nnbuild import codegen, passes  # noqa: E402
from nnbuild.ir import reference  # noqa: E402

#: peers.md section 2 (Ir per inference), the fallback when ACETONE cannot be built here and
#: keras2c's figures always; -O3 has no recorded column: these are the -O2 (vectorising) figures
RECORDED = {
    "f1tenth_like": {"-O0": {"keras2c": 976_074, "ACETONE": 509_062},
                     "-O2 -fno-tree-vectorize": {"keras2c": 295_658, "ACETONE": 147_908},
                     "-O3": {"keras2c": 295_730, "ACETONE": 110_789}},
    "acas_like": {"-O0": {"keras2c": 638_068, "ACETONE": 325_070},
                  "-O2 -fno-tree-vectorize": {"keras2c": 194_557, "ACETONE": 97_657},
                  "-O3": {"keras2c": 194_357, "ACETONE": 74_476}},
}
#: issue 27's goals, ratio to ACETONE per flag set (issue 13's was 0.5 at each)
GOALS = {"-O0": 0.35, "-O2 -fno-tree-vectorize": 0.35, "-O3": 0.5}
#: (shape, weights storage): the host board's const-simd (vectors across neurons), const-host (plain
#: C99, weights interleaved by neuron blocks), const (the MCU targets' scalar layout)
VARIANTS = (("mlp", "const-simd"), ("mlp", "const-host"), ("mlp", "const"), ("v2", "const"))


def f1tenth_like(seed=1):
    """peers.md's MLP: 59 -> 128 relu -> 128 relu -> 1 (24,064 MACs)."""
    return seeded_mlp("f1tenth_like", [59, 128, 128, 1], seed)


def peer_figures(python, model, x, expected, workdir):
    """{flags: (ACETONE's Ir, how it was obtained)}: built here if `python` has acetone-nnet."""
    if python:
        measured = peer_acetone.measure_all(python, model, x, expected, GOALS, workdir)
        figures = {}
        for flags, variants in measured.items():
            _, ir, err = peer_acetone.best(variants)
            figures[flags] = (ir, f"measured, max |C - reference| {err:.3g}")
            print(f"  {model.name:<13} ACETONE   {'':<10} {flags:<24} {ir:>9,} Ir ({ir / macs(model):5.2f} Ir/MAC)  "
                  f"measured in this run; max |C - reference| {err:.3g}")
        return figures
    return {flags: (RECORDED[model.name][flags]["ACETONE"], "recorded" + (" (-O2)" if flags == "-O3" else ""))
            for flags in GOALS}


def measure(model, shape, storage, x, expected, peers, workdir, results):
    gen = workdir / f"gen_{model.name}_{shape}_{storage}"
    codegen.generate(model, gen, shape=shape, storage=storage, passes_log=passes.run(model)[1])
    for flags, (acetone, how) in peers.items():
        keras2c = RECORDED[model.name][flags]["keras2c"]
        counts, _, err = callgrind_runs(build(gen, model.name, flags, workdir), model.name, x, expected, workdir)
        best = min(counts)
        ratio = best / acetone
        goal = GOALS[flags]
        verdict = "meets" if ratio <= goal else "misses"
        print(f"  {model.name:<13} {shape:<4} {storage:<10} {flags:<24} {best:>9,} Ir ({best / macs(model):5.2f} Ir/MAC)  "
              f"ACETONE {acetone:,} ({how.split(',')[0]}): {ratio:.3f}x ({verdict} <= {goal}x), keras2c {keras2c:,} (recorded): "
              f"{best / keras2c:.3f}x; max |C - reference| {err:.3g}")
        results.append({"model": model.name, "shape": shape, "storage": storage, "flags": flags, "macs": macs(model),
                        "ir_min": best, "ir_all": counts, "acetone_ir": acetone, "acetone_figure": how,
                        "keras2c_ir_recorded": keras2c, "ratio_to_acetone": ratio, "target": goal,
                        "max_abs_error_vs_reference": err})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--acetone-python", help="a Python with acetone-nnet 1.0.post1 (bench/peer_acetone.py)")
    ap.add_argument("--models", default="f1tenth_like,acas_like", help="comma-separated subset")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found (apt-get install valgrind)")
    rng = np.random.default_rng(5)
    python = peer_acetone.interpreter(args.acetone_python)
    gcc = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    print(f"MLPs, gcc {gcc}, callgrind Ir per inference (min over {args.inputs} inputs, callees included)")
    if python:
        print(f"ACETONE {peer_acetone.version(python)}: generated and built in this run ({python}); "
              "keras2c: recorded figures (../shared/docs/peers.md section 2)")
    else:
        print("ACETONE and keras2c: RECORDED figures (../shared/docs/peers.md section 2): no Python with "
              "acetone-nnet found (--acetone-python, $NNBUILD_ACETONE_PYTHON)")

    def measure_all(workdir, results):
        for model in (f1tenth_like(), acas_like()):
            if model.name not in args.models.split(","):
                continue
            x = rng.uniform(-0.5, 0.5, (args.inputs, model.input_size))
            model = passes.run(model)[0]
            expected = reference.run(model, x.astype(np.float32).astype(np.float64))
            peers = peer_figures(python, model, x, expected, workdir)
            for shape, storage in VARIANTS:
                measure(model, shape, storage, x, expected, peers, workdir, results)
    return run_in_workdir(measure_all, args.json)


if __name__ == "__main__":
    sys.exit(main())
