"""Host x86-64 instructions (callgrind Ir, callees included) of nnbuild's Gravity C on the paper's
MNIST program (784-100-100-10, relu/softmax, cross-entropy, batch 8, float) against Gravity's own
generated `mnist_activate`: 631,041 Ir at -O2 (../shared/docs/peers.md, Gravity). Target: <= 0.5x
for activate; train is reported per sample (one `mnist_train` call = one batch of 8, divided by 8).

    python3 bench/gravity_callgrind.py [--inputs 3] [--json out.json]

One call per process under `valgrind --tool=callgrind --toggle-collect=<function>`, the minimum over
seeded inputs in [0, 1] (as peers.md does). Each run's result is checked against the float64 numpy
reference: activate's outputs, and the weights after the train step.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild.codegen import gravity as generator  # noqa: E402
from nnbuild.frontends import gravity_g  # noqa: E402
from nnbuild.ir import gravity as ir  # noqa: E402

#: the paper's Listing 1 (also the tests' MNIST program)
MNIST = (REPO / "bench" / "mnist.g").read_text()
GRAVITY_ACTIVATE_O2 = 631_041
TARGET = 0.5
FLAGS = ("-O2", "-O2 -fno-tree-vectorize", "-O3", "-O0")

DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "mnist.h"

static float blob[MNIST_MEMORY_SIZE / sizeof(float)];
static float x[MNIST_BATCH * MNIST_INPUTS], y[MNIST_BATCH * MNIST_OUTPUTS];

/* argv[1]: activate (writes the outputs) or train (writes the whole blob after one batch) */
int main(int argc, char **argv)
{
    if (argc < 2 || fread(x, sizeof x, 1, stdin) != 1 || fread(y, sizeof y, 1, stdin) != 1) return 2;
    mnist_initialize(blob, 1u);
    if (strcmp(argv[1], "activate") == 0) {
        const float *out = (const float *)mnist_activate(blob, x);
        fwrite(out, sizeof(float), MNIST_OUTPUTS, stdout);
    } else {
        mnist_train(blob, x, y);
        fwrite(blob, 1, MNIST_MEMORY_SIZE, stdout);
    }
    return 0;
}
"""


def build(workdir, flags):
    model = gravity_g.parse("mnist.g", MNIST)
    files = generator.render(model)
    for name in ("mnist.c", "mnist.h"):
        (workdir / name).write_text(files[name])
    (workdir / "driver.c").write_text(DRIVER)
    exe = workdir / ("mnist_" + re.sub(r"\W+", "_", flags))
    subprocess.run(["gcc", *flags.split(), "-std=c99", "-g", f"-I{workdir}", str(workdir / "driver.c"),
                    str(workdir / "mnist.c"), "-o", str(exe), "-lm"], check=True)
    return model, exe


def ir_of_one_call(exe, function, stdin, workdir):
    out = workdir / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          f"--toggle-collect={function}", str(exe), function.split("_")[-1]],
                         input=stdin, capture_output=True, check=True)
    total = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    return int(total.group(1)), run.stdout


def measure(flags, count, workdir):
    """(activate Ir, train Ir per sample, max activate error, max weight error after the step)."""
    model, exe = build(workdir, flags)
    plan = ir.plan(model)
    weights = ir.unpack(plan, ir.initial_blob(plan, 1))
    rng = np.random.default_rng(1)
    act, train, act_err, train_err = [], [], 0.0, 0.0
    for _ in range(count):
        x = rng.random((model.batch, model.inputs)).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, model.batch)]
        stdin = x.tobytes() + y.tobytes()
        ir_count, out = ir_of_one_call(exe, "mnist_activate", stdin, workdir)
        act.append(ir_count)
        act_err = max(act_err, np.abs(np.frombuffer(out, np.float32) - ir.activate(model, weights, x[:1])[0]).max())
        ir_count, out = ir_of_one_call(exe, "mnist_train", stdin, workdir)
        train.append(ir_count / model.batch)
        after = ir.unpack(plan, np.frombuffer(out, np.float32))
        expected = ir.train_step(model, weights, x, y)
        train_err = max(train_err, max(np.abs(a - e).max() for (w, b), (ew, eb) in zip(after, expected)
                                       for a, e in ((w, ew), (b, eb))))
    return min(act), min(train), float(act_err), float(train_err)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for flags in FLAGS:
            activate, train, act_err, train_err = measure(flags, args.inputs, Path(tmp))
            ratio = activate / GRAVITY_ACTIVATE_O2
            results[flags] = {"activate_ir": activate, "train_ir_per_sample": train, "ratio_to_gravity_o2": ratio,
                              "max_activate_error": act_err, "max_weight_error_after_train": train_err}
            verdict = ("meets" if ratio <= TARGET else "misses") + f" <= {TARGET}x" if flags == "-O2" else ""
            print(f"  {flags:<24} activate {activate:>9,} Ir ({activate / 89_400:4.2f} Ir/MAC), "
                  f"{ratio:.3f}x Gravity's -O2 {GRAVITY_ACTIVATE_O2:,} {verdict}; train {train:>11,.0f} Ir/sample; "
                  f"max |C - reference| activate {act_err:.2g}, weights after one batch {train_err:.2g}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0 if results["-O2"]["ratio_to_gravity_o2"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
