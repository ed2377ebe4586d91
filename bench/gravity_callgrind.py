"""Host x86-64 instructions (callgrind Ir, callees included) of nnbuild's Gravity C on the paper's
MNIST program (784-100-100-10, relu/softmax, cross-entropy, batch 8, float) beside Gravity's own
generated C for the same program, at each of -O0, -O2, -O2 -fno-tree-vectorize and -O3 (issue
27's goal: <= 0.7x Gravity's `mnist_activate` at -O2 -fno-tree-vectorize). train is reported per
sample (one `mnist_train` call = one batch of 8, divided by 8).

    python3 bench/gravity_callgrind.py [--inputs 3] [--peer DIR] [--storage const] [--json out.json]

--peer DIR: a directory holding the mnist.c and mnist.h that Gravity's own compiler generated
from bench/mnist.g (github.com/cjdipalma/gravity, the authors' release a916da1; build its
compiler yourself, e.g. in /tmp: nothing of it is part of this repository). Without it, the ratios
are to the figure recorded in ../shared/docs/peers.md (631,041 Ir at -O2), printed as recorded.

One call per process under `valgrind --tool=callgrind --toggle-collect=<function>`, the minimum over
seeded inputs in [0, 1] (as peers.md does). Each run's result is checked against the float64 numpy
reference: activate's outputs and the weights after the train step (ours); Gravity's outputs
against the float64 forward pass of the weights its own initialisation wrote into its blob.
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
#: ../shared/docs/peers.md: Gravity's mnist_activate at -O2 (gcc 12), when its C is not at hand
GRAVITY_ACTIVATE_O2 = 631_041
#: issue 27's goal, at GOAL_FLAGS
TARGET = 0.7
GOAL_FLAGS = "-O2 -fno-tree-vectorize"
FLAGS = ("-O0", "-O2", "-O2 -fno-tree-vectorize", "-O3")
MACS = 89_400

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


PEER_DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "mnist.h"

static char blob[1 << 20];
static float x[784], y[10];

/* Gravity's own mnist.c: argv[1] activate (writes the outputs, then memory_hard bytes of the blob:
 * its weights) or train (one batch: 8 inputs, 8 targets) */
int main(int argc, char **argv)
{
    static float xs[8 * 784], ys[8 * 10];
    if (argc < 2 || mnist_memory_size() > sizeof blob) return 2;
    if (fread(xs, sizeof xs, 1, stdin) != 1 || fread(ys, sizeof ys, 1, stdin) != 1) return 2;
    memcpy(x, xs, sizeof x);
    memcpy(y, ys, sizeof y);
    mnist_initialize(blob);
    if (strcmp(argv[1], "activate") == 0) {
        const float *out = (const float *)mnist_activate(blob, x);
        fwrite(out, sizeof(float), 10, stdout);
        fwrite(blob, 1, mnist_memory_hard(), stdout);
    } else {
        mnist_train(blob, xs, ys);
    }
    return 0;
}
"""


def compile_c(workdir, flags, sources, exe):
    subprocess.run(["gcc", *flags.split(), "-std=c99", "-g", f"-I{exe.parent}", *map(str, sources), "-o", str(exe),
                    "-lm"], check=True, cwd=workdir)


def build_peer(peer, workdir, flags):
    """Gravity's mnist.c with its driver, in a directory of its own."""
    where = workdir / "peer"
    where.mkdir(exist_ok=True)
    for name in ("mnist.c", "mnist.h"):
        (where / name).write_text((peer / name).read_text())
    (where / "driver.c").write_text(PEER_DRIVER)
    exe = where / ("gravity_" + re.sub(r"\W+", "_", flags))
    compile_c(where, flags, [where / "driver.c", where / "mnist.c"], exe)
    return exe


def peer_reference(model, blob, x):
    """float64 forward pass of Gravity's blob: per layer w[out][in] then b[out], relu/softmax."""
    values, at, a = np.frombuffer(blob, np.float32).astype(np.float64), 0, x.astype(np.float64)
    for n_in, n_out, layer in zip(model.sizes, model.sizes[1:], model.layers):
        w = values[at:at + n_in * n_out].reshape(n_out, n_in)
        b = values[at + n_in * n_out:at + n_in * n_out + n_out]
        at += n_in * n_out + n_out
        z = w @ a + b
        if layer.activation == "relu":
            a = np.maximum(z, 0)
        else:
            e = np.exp(z - z.max())
            a = e / e.sum()
    return a


def seeded_batches(model, count):
    """`count` batches (x in [0, 1], one-hot y, the driver's stdin), the same for nnbuild and Gravity."""
    rng = np.random.default_rng(1)
    for _ in range(count):
        x = rng.random((model.batch, model.inputs)).astype(np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, model.batch)]
        yield x, y, x.tobytes() + y.tobytes()


def measure_peer(model, exe, count, workdir):
    """(activate Ir, train Ir per sample, max activate error) of Gravity's own C."""
    act, train, err = [], [], 0.0
    for x, y, stdin in seeded_batches(model, count):
        ir_count, out = ir_of_one_call(exe, "mnist_activate", stdin, workdir)
        act.append(ir_count)
        outputs = np.frombuffer(out[:40], np.float32)
        err = max(err, float(np.abs(outputs - peer_reference(model, out[40:], x[0])).max()))
        train.append(ir_of_one_call(exe, "mnist_train", stdin, workdir)[0] / model.batch)
    return min(act), min(train), err


def build(workdir, flags, storage):
    model = gravity_g.parse("mnist.g", MNIST)
    files = generator.render(model, storage=storage)
    for name in ("mnist.c", "mnist.h"):
        (workdir / name).write_text(files[name])
    (workdir / "driver.c").write_text(DRIVER)
    exe = workdir / ("mnist_" + re.sub(r"\W+", "_", flags))
    compile_c(workdir, flags, [workdir / "driver.c", workdir / "mnist.c"], exe)
    return model, exe


def ir_of_one_call(exe, function, stdin, workdir):
    out = workdir / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          f"--toggle-collect={function}", str(exe), function.split("_")[-1]],
                         input=stdin, capture_output=True, check=True)
    total = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    return int(total.group(1)), run.stdout


def measure(flags, count, workdir, storage):
    """(activate Ir, train Ir per sample, max activate error, max weight error after the step)."""
    model, exe = build(workdir, flags, storage)
    plan = ir.plan(model)
    weights = ir.unpack(plan, ir.initial_blob(plan, 1))
    act, train, act_err, train_err = [], [], 0.0, 0.0
    for x, y, stdin in seeded_batches(model, count):
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
    parser.add_argument("--peer", type=Path, help="directory of Gravity's own generated mnist.c and mnist.h")
    parser.add_argument("--storage", default="const", help="nnbuild weights storage (const: the scalar code)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = {}
    print(f"Gravity MNIST 784-100-100-10 ({MACS:,} MACs), nnbuild storage {args.storage}; Gravity: "
          + (f"its own C from {args.peer}, measured in this run" if args.peer else
             f"recorded figure {GRAVITY_ACTIVATE_O2:,} Ir at -O2 (peers.md), not measured here"))
    with tempfile.TemporaryDirectory() as tmp:
        model = gravity_g.parse("mnist.g", MNIST)
        for flags in FLAGS:
            activate, train, act_err, train_err = measure(flags, args.inputs, Path(tmp), args.storage)
            row = {"activate_ir": activate, "train_ir_per_sample": train, "max_activate_error": act_err,
                   "max_weight_error_after_train": train_err}
            if args.peer:
                exe = build_peer(args.peer, Path(tmp), flags)
                peer, peer_train, peer_err = measure_peer(model, exe, args.inputs, Path(tmp))
                row.update(gravity_activate_ir=peer, gravity_train_ir_per_sample=peer_train,
                           gravity_max_activate_error=peer_err, gravity="measured")
            else:
                peer, peer_train = GRAVITY_ACTIVATE_O2, None
                row.update(gravity_activate_ir=peer, gravity="recorded -O2")
            row["ratio"] = activate / peer
            results[flags] = row
            verdict = ""
            if flags == GOAL_FLAGS:
                verdict = (" meets" if row["ratio"] <= TARGET else " MISSES") + f" <= {TARGET}x"
            peer_text = (f"Gravity {peer:>9,} ({peer / MACS:4.2f}/MAC, error {peer_err:.2g}; train "
                         f"{peer_train:,.0f}/sample, ratio {train / peer_train:.3f})" if args.peer else
                         f"Gravity {peer:>9,} (recorded, -O2)")
            print(f"  {flags:<24} activate {activate:>9,} Ir ({activate / MACS:4.2f}/MAC) {peer_text}: "
                  f"{row['ratio']:.3f}x{verdict}; train {train:>11,.0f} Ir/sample; max |C - float64| "
                  f"activate {act_err:.2g}, weights after one batch {train_err:.2g}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0 if results[GOAL_FLAGS]["ratio"] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
