"""Host x86-64 instructions per LeNet-5 inference (callgrind Ir, callees such as expf included),
for the generated code of a shape at -O0, -O2 -fno-tree-vectorize and -O3, against ACETONE's best
variant, built side by side in the same run and measured the same way.

    python3 bench/lenet5_callgrind.py [--shape v2] [--inputs 5] [--json out.json] [--model PATH]
                                      [--acetone-python PATH]

--model takes another LeNet-5 file (e.g. ../shared/data/nnef/lenet5.onnx or lenet5.nnef: same
topology, other weights, NCHW input): its outputs are checked against nnbuild's float64 reference.

The C is generated in the weights storages const (the layout the MCU targets get) and const-host
(plain C99 for hosts, same bits as const but for tanh: the blocks' weights interleaved, which gcc
-O3 vectorises; each convolution's tanh applied by the pooling that reads it; the one-channel first
convolution computed 8 columns at a time; tanh from a table of cubics, docs/_notes/lenh.md).
const-simd, the host board's, is const for the CNN shapes (the same C): its ratio is const's, and
the bench says so.

For each storage and flag set: generate firmware_examples/lenet5, build a driver that runs
ONE inference per process, run it under `valgrind --tool=callgrind --toggle-collect=lenet5_infer`
for each of the first N golden inputs, and print the minimum Ir (as peers.md does) and the ratio
to ACETONE's best. Also checks the outputs against the Keras golden values while at it.

ACETONE (acetone-nnet 1.0.post1, from an interpreter of its own: bench/peer_acetone.py) generates
its C for the same layers and weights in every Conv2D variant it has (6loops, std_gemm_*,
indirect_gemm_*); each is built at each flag set with the same driver and measured the same way,
its outputs checked against the same golden values; the ratio is to the lowest-Ir variant at that
flag set. Without that interpreter (or for a model ACETONE is not handed) the bench falls back to
peers.md's recorded figures and says "recorded" on each line.
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
sys.path.insert(0, str(REPO / "bench"))

import peer_acetone  # noqa: E402
from nnbuild import codegen, pipeline  # noqa: E402

EXAMPLE = REPO / "firmware_examples" / "lenet5"
#: ACETONE's best LeNet-5 Ir per inference in peers.md section 2, recorded (the fallback when it
#: cannot be built here), and issue 27's goals. peers.md has no -O3 column: the recorded fallback
#: at -O3 is ACETONE's best figure with gcc's vectoriser on (std_gemm_nn at -O2).
ACETONE = {"-O0": (11_525_905, "indirect_gemm_nn", 0.3),
           "-O2 -fno-tree-vectorize": (3_278_806, "6loops", 0.3),
           "-O3": (1_854_693, "std_gemm_nn -O2", 0.3)}

DRIVER = r"""
#include <stdio.h>
#include "lenet5.h"
int main(void)
{
    static float in[LENET5_INPUTS], out[LENET5_OUTPUTS];
    if (fread(in, sizeof in, 1, stdin) != 1) return 2;
    lenet5_infer(in, out);
    fwrite(out, sizeof out, 1, stdout);
    return 0;
}
"""


#: the weights storages measured; const-simd is const for the CNN shapes (the same C)
STORAGES = ("const", "const-host")


def build(gen, flags, workdir):
    driver = workdir / "driver.c"
    driver.write_text(DRIVER)
    exe = workdir / ("lenet5_" + gen.name + "_" + re.sub(r"\W+", "_", flags))
    cmd = ["gcc", *flags.split(), "-std=c99", "-g", f"-I{gen}", str(driver), str(gen / "lenet5.c"),
           str(gen / "lenet5_weights.c"), "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True)
    return exe


def ir_of_one_inference(exe, x, workdir):
    out = workdir / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          "--toggle-collect=lenet5_infer", str(exe)],
                         input=np.asarray(x, np.float32).tobytes(), capture_output=True, check=True)
    y = np.frombuffer(run.stdout, dtype=np.float32)
    text = out.read_text()
    total = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    return int(total.group(1)), y


def count_macs(model):
    """Multiply-accumulates of one inference (Conv2D and Dense layers)."""
    shapes, total = model.tensor_shapes(), 0
    for layer in model.layers:
        out = shapes[layer.name]
        if layer.kind == "conv2d":
            kh, kw, cg, _ = layer.kernel.shape
            total += int(np.prod(out)) * kh * kw * cg
        elif layer.kind == "dense":
            total += int(np.prod(out)) * int(layer.kernel.shape[0])
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="v2")
    ap.add_argument("--inputs", type=int, default=5)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--model", default=str(EXAMPLE / "lenet5.h5"), help="the LeNet-5 model file")
    ap.add_argument("--acetone-python", help="a Python with acetone-nnet 1.0.post1 (bench/peer_acetone.py)")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found (apt-get install valgrind)")
    golden = np.load(EXAMPLE / "golden.npz")
    workdir = Path(tempfile.mkdtemp(prefix="nnbuild-bench-"))
    model, log = pipeline.load_model(args.model, "lenet5")
    if Path(args.model).resolve() != (EXAMPLE / "lenet5.h5").resolve():
        from nnbuild.ir import reference
        x = np.random.default_rng(0).uniform(-1, 1, (args.inputs,) + tuple(model.input_shape)).astype(np.float32)
        golden = {"x": x.reshape(len(x), -1), "y": reference.run(model, x.astype(np.float64)).reshape(len(x), -1)}
    for storage in STORAGES:
        codegen.generate(model, workdir / storage, shape=args.shape, storage=storage, passes_log=log)
    macs = count_macs(model)
    same_work = macs == 281_640
    results = {"shape": args.shape, "model": Path(args.model).name, "macs": macs, "runs": {s: {} for s in STORAGES}}
    print(f"LeNet-5 ({Path(args.model).name}), shape {args.shape}, gcc {subprocess.run(['gcc', '-dumpfullversion'], capture_output=True, text=True).stdout.strip()}, "
          f"callgrind Ir per inference (min over {args.inputs} inputs, callees included)")
    python = peer_acetone.interpreter(args.acetone_python)
    measured = {}
    if python:
        try:
            peer_acetone.spec_of(model)
        except ValueError as exc:
            print(f"ACETONE: {exc}: recorded figures")
            python = None
    if python:
        print(f"ACETONE {peer_acetone.version(python)}: every Conv2D variant generated and built in this run ({python})")
        n = args.inputs
        measured = peer_acetone.measure_all(python, model, golden["x"][:n], golden["y"][:n], ACETONE, workdir)
        for flags, variants in measured.items():
            for variant, (ir, _, err) in sorted(variants.items(), key=lambda kv: kv[1][0]):
                wrong = "" if peer_acetone.correct((ir, None, err)) else " WRONG OUTPUTS, not a candidate"
                print(f"  ACETONE {variant:<16} {flags:<24} {ir:>11,} Ir ({ir / macs:5.2f} Ir/MAC); "
                      f"max |C - reference| {err:.3g}{wrong}")
    else:
        print("ACETONE: RECORDED figures (../shared/docs/peers.md section 2), not built in this run: no Python "
              "with acetone-nnet found (--acetone-python, $NNBUILD_ACETONE_PYTHON)")
    for flags, (acetone, variant, target) in ACETONE.items():
        how = "recorded"
        if measured:
            variant, acetone, _ = peer_acetone.best(measured[flags])
            how, same_work = "measured", True
        for storage in STORAGES:
            exe = build(workdir / storage, flags, workdir)
            counts, err = [], 0.0
            for k in range(args.inputs):
                ir, y = ir_of_one_inference(exe, golden["x"][k], workdir)
                counts.append(ir)
                err = max(err, float(np.max(np.abs(y - golden["y"][k]))))
            best = min(counts)
            # another LeNet-5 variant (the ONNX one has a 32x32 input: 416,520 MACs): compare per MAC
            ratio = best / acetone if same_work else (best / macs) / (acetone / 281_640)
            verdict = "meets" if ratio <= target else "MISSES"
            also = " (and const-simd: the same C)" if storage == "const" else ""
            print(f"  nnbuild {args.shape} {storage:<10} {flags:<24} {best:>11,} Ir ({best / macs:5.2f} Ir/MAC)  vs ACETONE {variant} ({how}) "
                  f"{'' if same_work else '(per MAC) '}"
                  f"{acetone:,}: {ratio:.3f}x ({verdict} the <= {target}x target){also}; max |C - reference| {err:.3g}")
            results["runs"][storage][flags] = {"ir_min": best, "ir_all": counts, "acetone": acetone,
                                               "acetone_variant": variant, "acetone_figure": how,
                                               "acetone_all_variants": {v: f[0] for v, f in measured.get(flags, {}).items()},
                                               "ratio": ratio, "target": target, "max_abs_error_vs_keras": err}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
