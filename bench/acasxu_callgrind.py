"""Host x86-64 instructions per ACAS Xu inference (callgrind Ir, callees included) of nnbuild's
generated C at -O0, -O2 -fno-tree-vectorize and -O3, beside ACETONE's (built side by side in the
same run, bench/peer_acetone.py) and keras2c's (recorded) figures for their
"ACAS-like" network (../shared/docs/peers.md section 2), measured the same way as
bench/lenet5_callgrind.py measures LeNet-5.

    python3 bench/acasxu_callgrind.py [--inputs 5] [--json out.json] [--acetone-python PATH]

Two models:
  - the real network ACASXU_run2a_1_1_batch_2000.nnet (read from ../shared, never copied):
    5 -> 6 x 50 ReLU -> 5, 13,000 MACs, with the NNet clamp and normalisation (four Elementwise
    layers in front, two behind), which keep it on the v2 code shape;
  - peers.md's ACAS-like topology (5 -> 7 x 50 ReLU -> 5, 15,500 MACs, no normalisation) with
    seeded weights, built as IR Dense layers: the same work as the peers measured, through the
    mlp shape and the v2 shape.

The ACAS-like net is measured with the mlp shape in the weights storages const-simd (GCC vectors,
the host board's), const-host (plain C99, weights interleaved by neuron blocks: gcc -O3 vectorises
it) and const (what the MCU targets get), and with the v2 shape (const); the real net with v2.

For each model, shape and flag set: generate the C, build a driver that runs ONE
inference per process, run it under `valgrind --tool=callgrind --toggle-collect=<name>_infer` for
each of the first N inputs, print the minimum Ir (as peers.md does), Ir per MAC and the ratio to the
peers' Ir (the ACAS-like net) or Ir per MAC (the real net: another MAC count). The outputs are
checked against nnbuild's float64 reference (and, for the real net, the README's golden values).
The real net reads raw inputs (the two golden ones, then random points of the input box); the
ACAS-like net reads normalised ones (uniform in [-0.5, 0.5]), as the real net's Dense layers do.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import codegen, passes, pipeline  # noqa: E402
from nnbuild.ir import reference  # noqa: E402
from nnbuild.ir.graph import Dense, Model  # noqa: E402

import peer_acetone  # noqa: E402

NNET = REPO.parent / "shared" / "data" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"
#: peers.md section 2, the ACAS-like net (5 -> 7x50 relu -> 5, 15,500 MACs): Ir per inference,
#: recorded (the fallback for ACETONE, always for keras2c); -O3 stands in with the -O2 figures
RECORDED = {"-O0": {"keras2c": 638_068, "ACETONE": 325_070},
            "-O2 -fno-tree-vectorize": {"keras2c": 194_557, "ACETONE": 97_657},
            "-O3": {"keras2c": 194_357, "ACETONE": 74_476}}
#: issue 27's goals, ratio to ACETONE per flag set
GOALS = {"-O0": 0.35, "-O2 -fno-tree-vectorize": 0.35, "-O3": 0.5}
PEER_MACS = 15_500
#: ../shared/data/nnet/README.md golden values for net 1_1
GOLDEN = {(5000.0, 0.5, -0.5, 500.0, 400.0): [17.5072124179, 18.3311613714, 16.3951714299, 10.757405097, 9.6708094014],
          (19791.091, 0.0, 0.0, 650.0, 600.0): [-0.4084289687, 0.5207054911, 0.5012315366, 0.5027865376, 0.5034111659]}
LOW = np.array([0.0, -3.141593, -3.141593, 100.0, 0.0])
HIGH = np.array([60760.0, 3.141593, 3.141593, 1200.0, 1200.0])

DRIVER = r"""
#include <stdio.h>
#include "NAME.h"
int main(void)
{
    static float in[UPPER_INPUTS], out[UPPER_OUTPUTS];
    if (fread(in, sizeof in, 1, stdin) != 1) return 2;
    NAME_infer(in, out);
    fwrite(out, sizeof out, 1, stdout);
    return 0;
}
"""


#: (shape, weights storage) of the ACAS-like net: the host board's vectors, the host's scalar layout,
#: the MCU targets' scalar layout, then the v2 shape
VARIANTS = (("mlp", "const-simd"), ("mlp", "const-host"), ("mlp", "const"), ("v2", "const"))

def seeded_mlp(name, sizes, seed=1):
    """A relu MLP (linear last layer) of layer `sizes` with seeded He-scaled weights, as peers.md's
    stand-ins are (Ir barely depends on the weights)."""
    rng = np.random.default_rng(seed)
    layers = [Dense(name=f"dense_{k + 1}", kernel=(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
                    bias=(rng.standard_normal(b) * 0.1).astype(np.float32),
                    activation="relu" if k < len(sizes) - 2 else "linear")
              for k, (a, b) in enumerate(zip(sizes, sizes[1:]))]
    return Model(name=name, input_shape=(sizes[0],), layers=layers, meta={"format": "bench"})


def acas_like(seed=1):
    """peers.md's ACAS-like topology: 5 -> 7 x 50 relu -> 5."""
    return seeded_mlp("acas_like", [5] + [50] * 7 + [5], seed)


def macs(model):
    return sum(l.inputs * l.units for l in model.layers if l.kind == "dense")


def build(gen, name, flags, workdir):
    driver = workdir / f"driver_{name}.c"
    driver.write_text(DRIVER.replace("UPPER", name.upper()).replace("NAME", name))
    exe = workdir / (f"{name}_" + re.sub(r"\W+", "_", flags))
    cmd = ["gcc", *flags.split(), "-std=c99", "-g", f"-I{gen}", str(driver), str(gen / f"{name}.c"),
           str(gen / f"{name}_weights.c"), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def ir_of_one_inference(exe, name, x, workdir):
    out = workdir / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          f"--toggle-collect={name}_infer", str(exe)],
                         input=np.asarray(x, np.float32).tobytes(), capture_output=True, check=True)
    y = np.frombuffer(run.stdout, dtype=np.float32)
    total = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    return int(total.group(1)), y


def callgrind_runs(exe, name, x, expected, workdir):
    """(Ir of each input's one inference, the outputs [N, n_out], max |outputs - expected|)."""
    runs = [ir_of_one_inference(exe, name, row, workdir) for row in x]
    outputs = np.array([y for _, y in runs])
    return [ir for ir, _ in runs], outputs, float(np.max(np.abs(outputs - np.asarray(expected))))


def inputs(count, seed=5):
    """The two golden inputs, then random points of the input box."""
    rng = np.random.default_rng(seed)
    rows = [list(k) for k in GOLDEN] + list(LOW + (HIGH - LOW) * rng.random((max(count - 2, 0), 5)))
    return np.array(rows[:count], np.float64)


def peer_figures(python, model, x, workdir):
    """{flags: {tool: (Ir, "measured"/"recorded")}} for the ACAS-like net: ACETONE built here when
    `python` has acetone-nnet, keras2c recorded."""
    figures = {flags: {tool: (ir, "recorded") for tool, ir in peers.items()} for flags, peers in RECORDED.items()}
    if python:
        expected = reference.run(model, x.astype(np.float32).astype(np.float64))
        for flags, variants in peer_acetone.measure_all(python, model, x, expected, RECORDED, workdir).items():
            _, ir, err = peer_acetone.best(variants)
            figures[flags]["ACETONE"] = (ir, "measured")
            print(f"  {'ACAS-like 5-7x50-5, ACETONE':<34} {flags:<24} {ir:>9,} Ir ({ir / PEER_MACS:5.2f} Ir/MAC)  "
                  f"measured in this run; max |C - reference| {err:.3g}")
    return figures


def measure(model, log, shape, x, workdir, results, label, peers_by_flags, storage="const"):
    gen = workdir / f"gen_{model.name}_{shape}_{storage}"
    codegen.generate(model, gen, shape=shape, storage=storage, passes_log=log)
    n_macs = macs(model)
    expected = reference.run(model, x.astype(np.float32).astype(np.float64))
    for flags, peers in peers_by_flags.items():
        exe = build(gen, model.name, flags, workdir)
        counts, outputs, err = callgrind_runs(exe, model.name, x, expected, workdir)
        golden_err = max((float(np.max(np.abs(outputs[k] - GOLDEN[tuple(row)])))
                          for k, row in enumerate(x) if tuple(row) in GOLDEN), default=0.0)
        best = min(counts)
        same_work = model.name == "acas_like"
        ratio = {tool: (best / ir if same_work else (best / n_macs) / (ir / PEER_MACS)) for tool, (ir, _) in peers.items()}
        peer_text = ", ".join(
            f"{tool} {ir:,} ({how}): {ratio[tool]:.3f}x" if same_work
            else f"{tool} {ir / PEER_MACS:.2f} ({how}): {ratio[tool]:.3f}x" for tool, (ir, how) in peers.items())
        verdict = "meets" if ratio["ACETONE"] <= GOALS[flags] else "misses"
        golden_text = f", max |C - golden| {golden_err:.3g}" if model.name != "acas_like" else ""
        print(f"  {label:<34} {flags:<24} {best:>9,} Ir ({best / n_macs:5.2f} Ir/MAC)  "
              f"{'vs' if same_work else 'Ir/MAC vs'} {peer_text} ({verdict} <= {GOALS[flags]}x); "
              f"max |C - reference| {err:.3g}{golden_text}")
        results.append({"model": model.name, "shape": shape, "storage": storage, "flags": flags, "macs": n_macs, "ir_min": best,
                        "ir_all": counts, "ir_per_mac": best / n_macs,
                        "peers_ir": {tool: ir for tool, (ir, _) in peers.items()},
                        "peers_figure": {tool: how for tool, (_, how) in peers.items()}, "peer_macs": PEER_MACS,
                        "ratio": ratio, "target": GOALS[flags],
                        "ratio_is": "Ir ratio (same topology)" if same_work else "Ir/MAC ratio (other topology)",
                        "max_abs_error_vs_reference": err,
                        **({"max_abs_error_vs_golden": golden_err} if model.name != "acas_like" else {})})


def run_in_workdir(measure_all, json_path):
    """measure_all(workdir, results) in a fresh temporary folder (removed after, whatever happens);
    the results then written as {"runs": results} to json_path when one is given. main's exit status."""
    workdir = Path(tempfile.mkdtemp(prefix="nnbuild-bench-"))
    results = []
    try:
        measure_all(workdir, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if json_path:
        Path(json_path).write_text(json.dumps({"runs": results}, indent=1) + "\n")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--acetone-python", help="a Python with acetone-nnet 1.0.post1 (bench/peer_acetone.py)")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found (apt-get install valgrind)")
    x = inputs(args.inputs)
    gcc = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    print(f"ACAS Xu, gcc {gcc}, callgrind Ir per inference (min over {len(x)} inputs, callees included); "
          f"peers: peers.md's ACAS-like 5-7x50-5 ({PEER_MACS:,} MACs)")
    python = peer_acetone.interpreter(args.acetone_python)
    print(f"ACETONE {peer_acetone.version(python)}: generated and built in this run ({python}); keras2c: recorded "
          "(../shared/docs/peers.md)" if python else
          "ACETONE and keras2c: RECORDED figures (../shared/docs/peers.md section 2): no Python with acetone-nnet "
          "found (--acetone-python, $NNBUILD_ACETONE_PYTHON)")

    def measure_all(workdir, results):
        model, log = passes.run(acas_like())
        normalised = np.random.default_rng(6).uniform(-0.5, 0.5, (len(x), 5))  # what the real net's Dense layers see
        peers = peer_figures(python, model, normalised, workdir)
        if NNET.exists():
            real, real_log = pipeline.load_model(NNET, "acasxu")
            measure(real, real_log, "v2", x, workdir, results, "ACASXU_run2a_1_1 (13,000 MACs), v2", peers)
        else:
            print(f"  {NNET} not present (../shared beside the checkout): the real network is skipped")
        for shape, storage in VARIANTS:
            measure(model, log, shape, normalised, workdir, results, f"ACAS-like 5-7x50-5, {shape} {storage}", peers,
                    storage)
    return run_in_workdir(measure_all, args.json)


if __name__ == "__main__":
    sys.exit(main())
