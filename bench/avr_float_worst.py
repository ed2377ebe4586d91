"""Worst input search for the float32 F1/10 controller on the ATmega1284: the builtin-avr bound
beside the slowest input found on simavr, as bound/measured (issue 27's goal: <= 1.3).

    python3 bench/avr_float_worst.py [--runs 120] [--write-slow]

Inputs, all run on simavr (one process per batch): range corners and IEEE specials (zeros,
subnormals, huge, infinities, NaN), random inputs, the stored slowest input
(tests/data/f1tenth_float_slow.json), and a constructed search. The constructed search targets the
additions: the MLP shape sums each neuron's products by sign, and an addition costs most when the
accumulator is about 2^31 times the product (exponent alignment by 3 bytes and 7 bits). Layer 2's
inputs are layer 1's tanh outputs; 61 of layer 1's 128 pre-activations are set to chosen values by
solving the 61x61 linear system of their weights, tiny targets (about 2^-20) next to O(1) values
spread the magnitudes layer 2 adds. A hill-climb on the targets (exponents, signs, which neurons)
keeps any change that runs longer. --write-slow stores the slowest input found.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import pipeline, wcet  # noqa: E402
from nnbuild.runners import simavr  # noqa: E402

ARCH = REPO / "firmware_examples/f1tenth/architecture.json"
SLOW = REPO / "tests/data/f1tenth_float_slow.json"


def fixed_inputs(n_in, rng):
    """Corners, specials and random inputs."""
    specials = [0.0, -0.0, 1.4e-45, -1e-40, 1e-30, 1.0, -1.0, 1e4, 1e30, -3.4e38, np.inf, -np.inf, np.nan]
    rows = [np.full(n_in, v) for v in specials]
    rows += [np.where(np.arange(n_in) % 2 == 0, v, -v) for v in (1.0, 1e4, 1e30, np.inf)]
    rows += list(rng.uniform(-1, 1, (6, n_in)))
    if SLOW.exists():
        rows.append(np.array(json.loads(SLOW.read_text())["f1tenth"], dtype=np.float64))
    return np.array(rows, dtype=np.float32)


class Constructed:
    """Inputs that set 61 of layer 1's pre-activations to targets (the others follow)."""

    def __init__(self, model, rng):
        first = model.layers[0]
        self.w, self.b = first.kernel.astype(np.float64), first.bias.astype(np.float64)
        self.rng = rng

    def start(self):
        n = self.w.shape[0]
        return np.arange(0, 2 * n, 2), 2.0 ** (-20 - self.rng.uniform(0, 1, n))

    def solve(self, pins, targets):
        x = np.linalg.solve(self.w[:, pins].T, targets - self.b[pins]).astype(np.float32)
        return x if np.all(np.isfinite(x)) else None

    def mutate(self, pins, targets):
        pins, targets = pins.copy(), targets.copy()
        i, r = self.rng.integers(len(pins)), self.rng.random()
        if r < 0.4:
            targets[i] *= 2.0 ** self.rng.integers(-6, 7)
        elif r < 0.55:
            targets[i] = -targets[i]
        elif r < 0.7:
            targets[i] = self.rng.choice([-1, 1]) * self.rng.uniform(0.3, 3)
        else:
            pins[i] = self.rng.choice(np.setdiff1d(np.arange(self.w.shape[1]), pins))
            pins.sort()
        return pins, targets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=120, help="simulated runs of the constructed search")
    ap.add_argument("--batch", type=int, default=12, help="candidates per simavr process")
    ap.add_argument("--write-slow", action="store_true", help=f"store the slowest input in {SLOW.relative_to(REPO)}")
    args = ap.parse_args(argv)
    board = pipeline.load_board("avr")
    model, _ = pipeline.load_model(ARCH, "f1tenth")
    rng = np.random.default_rng(2027)
    with tempfile.TemporaryDirectory() as tmp:
        elf, harness = pipeline.build_check_program(ARCH, board, tmp, name="f1tenth")
        facts = json.loads((Path(tmp) / "gen/f1tenth.flowfacts.json").read_text())
        bound = wcet.analyze(board, elf, "f1tenth_infer", facts, Path(tmp) / "wcet").cycles

        def run(x):
            _, cyc = simavr.run_cases(elf, np.asarray(x, np.float32), model.output_size, entry_symbol="f1tenth_infer",
                                      mcu=board["mcu"], freq=board["clock_hz"], harness=harness, timeout=7200)
            return cyc

        x = fixed_inputs(model.input_size, rng)
        cyc = run(x)
        best_x, best = x[int(np.argmax(cyc))], int(cyc.max())
        print(f"fixed set: {len(x)} inputs, slowest {best:,} cycles")
        search = Constructed(model, rng)
        pins, targets = search.start()
        state, state_c, runs = (pins, targets), 0, 0
        while runs < args.runs:
            cands = [search.mutate(*state) if runs else state for _ in range(args.batch)]
            xs = [(c, search.solve(*c)) for c in cands]
            xs = [(c, v) for c, v in xs if v is not None]
            cyc = run(np.array([v for _, v in xs]))
            runs += len(xs)
            j = int(np.argmax(cyc))
            if cyc[j] >= state_c:
                state, state_c = xs[j][0], int(cyc[j])
            if cyc[j] > best:
                best_x, best = xs[j][1], int(cyc[j])
            print(f"  constructed search: {runs} runs, slowest {best:,}", flush=True)
    total = len(x) + runs
    print(f"\nfloat32 f1tenth on avr: bound {bound:,} cycles, slowest of {total} inputs {best:,}, "
          f"bound/measured {bound / best:.3f} (goal <= 1.3)")
    if args.write_slow:
        SLOW.write_text(json.dumps({"about": "slowest float32 f1tenth input found by bench/avr_float_worst.py "
                                             f"({best} cycles on simavr, atmega1284, -Os)",
                                    "f1tenth": [float(v) for v in best_x]}, indent=1) + "\n")
        print(f"wrote {SLOW.relative_to(REPO)}")


if __name__ == "__main__":
    main()
