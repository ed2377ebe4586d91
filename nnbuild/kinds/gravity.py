"""Gravity programs (nnbuild.ir.gravity): networks that carry their own training code.

What differs from a neural network: the model is a program, not trained weights; its C has two
entry points, activate and train, over one caller-owned blob, each measured and bounded on its
own; its numbers are those of the `.g` file's `.precision` unless precision= says otherwise. The
check program (gravity_check_main.c) replays a learning sequence: the blob is initialised with
seed 1, each case is one batch (inputs, then targets), and the case's outputs are activate's on
the batch's first input before the batch's training step. The reference runs the same sequence in
float64 numpy, so one semantic check covers activate and train together.
"""

from pathlib import Path

import numpy as np

from nnbuild import kinds
from nnbuild.checks.inputs import check_inputs
from nnbuild.errors import NNBuildError
from nnbuild.ir import gravity as ir
from nnbuild.kinds import nn
from nnbuild.runners import CheckIO

NAME = ir.KIND
SHAPES = ("gravity",)
PRECISIONS = ("float32", "float64")
IO = CheckIO(input="<f4", output="<f4")
VIOLATION = nn.VIOLATION
SUMMARY = nn.SUMMARY
ERROR_FORMAT = nn.ERROR_FORMAT
#: the seed the check program initialises the blob with
CHECK_SEED = 1
CHECK_MAIN = Path(__file__).resolve().parents[1] / "runners" / "gravity_check_main.c"

describe, check_line, check_failure = nn.describe, nn.check_line, nn.check_failure


def compare(runs, reference_npz, tolerance):
    """The semantic record of a neural network (max |C - reference| per run), as this kind's."""
    return dict(nn.compare(runs, reference_npz, tolerance), kind=NAME)


def load(path, name=None, environment=None):
    """The program a .g file declares; no graph passes apply: (model, [])."""
    return kinds.load_file(path, name), []


def entries(name, model_path):
    """The functions a build measures and bounds: activate first (what inference runs), then train.
    The .g file is a few lines: reading its prefix here is cheap."""
    prefix = load(model_path)[0].prefix
    return [f"{prefix}_activate" if prefix else "activate", f"{prefix}_train" if prefix else "train"]


def model_refusal(model, precision, board):
    """Why the program cannot run on `board` (one line), or None: the caller-owned blob (weights,
    activations, gradients, deltas: memory_size() bytes) and one batch of inputs and targets (what
    train reads) must fit the board's RAM, or the C would declare sizes and walk arrays the target
    cannot address."""
    ram = board.get("ram_bytes") if board else None
    if not ram:
        return None
    try:
        element = ir.number(precision).bytes
    except NNBuildError:
        return None  # an unknown precision is refused by its own check
    blob = ir.layout(model.sizes)[2] * element
    batch = model.batch * (model.inputs + model.output_size) * element
    if blob + batch <= ram:
        return None
    where = model.source_files[0] if model.source_files else model.name
    return (f"{where}: Gravity program '{model.name}' ({'-'.join(map(str, model.sizes))}) needs {blob + batch:,} "
            f"bytes of RAM in {precision} (a memory blob of {blob:,} bytes: weights, activations, gradients, "
            f"deltas; and {batch:,} bytes for one batch of inputs and targets); board {board.name} has {ram:,} "
            "bytes of RAM")


def check_main():
    return CHECK_MAIN


def check_defines(name):
    """gravity_check_main.c bound to model `name` through its generated header's macros."""
    guard = name.upper()
    return [("NN_HEADER", f'"{name}.h"')] + [
        (f"NN_{what}", f"{guard}_{what}") for what in ("INITIALIZE", "ACTIVATE", "TRAIN", "REAL", "FRAC", "FIXED",
                                                       "BATCH")] + [
        ("NN_IN", f"{guard}_INPUTS"), ("NN_OUT", f"{guard}_OUTPUTS"), ("NN_MEMORY", f"{guard}_MEMORY_SIZE")]


def targets(model, count, rng):
    """Targets the output activation can reach: one-hot (softmax), 0/1 (sigmoid), [-1, 1] (linear)."""
    n = model.output_size
    activation = model.layers[-1].activation
    if activation == "softmax":
        return np.eye(n)[rng.integers(0, n, count)]
    if activation == "sigmoid":
        return rng.integers(0, 2, (count, n)).astype(np.float64)
    return rng.uniform(-1, 1, (count, n))


def reference_arrays(model, count, seed, input_range, data=None):
    """inputs.npz: `count` seeded batches (inputs over input_range, reachable targets) as float32
    case vectors, and the float64 reference of the learning sequence: activate on each batch's
    first input, then one SGD step, from the blob the C initialises."""
    if data:
        raise NNBuildError("Gravity programs are checked on seeded learning sequences; check data does not apply")
    batch, n_in = model.batch, model.inputs
    x = check_inputs(n_in, count * batch, seed, input_range)[:count * batch].astype(np.float32)
    x = x.reshape(-1, batch, n_in)
    count = len(x)
    y = targets(model, count * batch, np.random.default_rng(seed)).astype(np.float32).reshape(count, batch, -1)
    plan = ir.plan(model)
    weights = ir.unpack(plan, ir.initial_blob(plan, CHECK_SEED))
    outputs = []
    for xb, yb in zip(x.astype(np.float64), y.astype(np.float64)):
        outputs.append(ir.activate(model, weights, xb[:1])[0])
        weights = ir.train_step(model, weights, xb, yb)
    cases = np.concatenate([x.reshape(count, -1), y.reshape(count, -1)], axis=1)
    return {"x": cases, "y": np.array(outputs), "kind": np.array(NAME)}


def decode(outputs, path=None):
    return outputs
