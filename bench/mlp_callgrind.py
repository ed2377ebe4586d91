"""Host x86-64 instructions per inference (callgrind Ir, callees included) of nnbuild's MLP code
against ACETONE's and keras2c's figures for the same topologies (../shared/docs/peers.md sections
1-2: the F1/10-sized MLP 59-128-128-1 and the ACAS-like 5-7x50-5, ReLU, seeded weights), with the
ratio to ACETONE's best at each flag set and issue 27's goals (<= 0.35x at -O0 and -O2 -fno-tree-vectorize,
<= 0.5x at -O3).

    python3 bench/mlp_callgrind.py [--inputs 5] [--json out.json]

Same measurement as peers.md and bench/acasxu_callgrind.py: one inference per process, Ir of
`<name>_infer` and its callees, minimum over the inputs. peers.md has no -O3 column: -O3 is set
against ACETONE's best measured figure (its -O2 with vectorisation). The outputs are checked
against nnbuild's float64 reference.

The mlp shape is measured with the host board's weights storage `const-simd` (16-byte GCC vectors,
one neuron per lane, written in the C: `-fno-tree-vectorize` turns off gcc's auto-vectoriser, not
vector types the source spells out, so at that flag set it is SIMD code against ACETONE's scalar
code) and with the scalar `const` storage (no vector type anywhere: the like-for-like figure),
then the v2 shape (scalar).
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from acasxu_callgrind import acas_like, build, callgrind_runs, macs, seeded_mlp  # noqa: E402
from nnbuild import codegen, passes  # noqa: E402
from nnbuild.ir import reference  # noqa: E402

#: peers.md section 2 (Ir per inference); "best" is ACETONE's lowest figure at any flag set
PEERS = {
    "f1tenth_like": {"-O0": {"keras2c": 976_074, "ACETONE": 509_062},
                     "-O2 -fno-tree-vectorize": {"keras2c": 295_658, "ACETONE": 147_908},
                     "-O3": {"keras2c": 295_730, "ACETONE": 110_789}},
    "acas_like": {"-O0": {"keras2c": 638_068, "ACETONE": 325_070},
                  "-O2 -fno-tree-vectorize": {"keras2c": 194_557, "ACETONE": 97_657},
                  "-O3": {"keras2c": 194_357, "ACETONE": 74_476}},
}
#: issue 27's goals, ratio to ACETONE per flag set (issue 13's was 0.5 at each)
GOALS = {"-O0": 0.35, "-O2 -fno-tree-vectorize": 0.35, "-O3": 0.5}
#: (shape, weights storage): the host board's const-simd (vectors across neurons), scalar const
VARIANTS = (("mlp", "const-simd"), ("mlp", "const"), ("v2", "const"))


def f1tenth_like(seed=1):
    """peers.md's MLP: 59 -> 128 relu -> 128 relu -> 1 (24,064 MACs)."""
    return seeded_mlp("f1tenth_like", [59, 128, 128, 1], seed)


def measure(model, shape, storage, x, workdir, results):
    model, log = passes.run(model)
    gen = workdir / f"gen_{model.name}_{shape}_{storage}"
    codegen.generate(model, gen, shape=shape, storage=storage, passes_log=log)
    expected = reference.run(model, x.astype(np.float32).astype(np.float64))
    for flags, peers in PEERS[model.name].items():
        counts, _, err = callgrind_runs(build(gen, model.name, flags, workdir), model.name, x, expected, workdir)
        best = min(counts)
        ratio = best / peers["ACETONE"]
        goal = GOALS[flags]
        verdict = "meets" if ratio <= goal else "misses"
        print(f"  {model.name:<13} {shape:<4} {storage:<10} {flags:<24} {best:>9,} Ir ({best / macs(model):5.2f} Ir/MAC)  "
              f"ACETONE {peers['ACETONE']:,}: {ratio:.3f}x ({verdict} <= {goal}x), keras2c {peers['keras2c']:,}: "
              f"{best / peers['keras2c']:.3f}x; max |C - reference| {err:.3g}")
        results.append({"model": model.name, "shape": shape, "storage": storage, "flags": flags, "macs": macs(model), "ir_min": best,
                        "ir_all": counts, "peers_ir": peers, "ratio_to_acetone": ratio, "target": goal,
                        "max_abs_error_vs_reference": err})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found (apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="nnbuild-bench-"))
    rng = np.random.default_rng(5)
    results = []
    print(f"MLPs, callgrind Ir per inference (min over {args.inputs} inputs, callees included)")
    print("ACETONE and keras2c: recorded figures (../shared/docs/peers.md section 2), not built in this run")
    try:
        for model in (f1tenth_like(), acas_like()):
            x = rng.uniform(-0.5, 0.5, (args.inputs, model.input_size))
            for shape, storage in VARIANTS:
                measure(model, shape, storage, x, workdir, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
