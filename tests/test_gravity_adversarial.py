"""Adversarial search against the builtin-avr bounds of a Gravity program (float32, ATmega1284):
activate and train of firmware_examples/gravity_digits, activate over 500 cases (an input batch
and its targets), train over 100 (500 in the slow tier, NNBUILD_SLOW_TESTS=1): range corners,
zeros of both signs, subnormals, NaN and infinities, huge values, inputs built to make the
additions align their operands longest (and, for train, the weight updates), then a hill-climb on simavr cycles
(tests/adversarial_search.py). The check firmware starts every case from the initial blob
(NN_FRESH_BLOB), so a NaN case leaves the next ones their own weights. The bound must never be
beaten; bound/worst is printed (run with -s)."""

import json

import numpy as np
import pytest

import adversarial_search
from conftest import REPO, needs_avr, slow
from nnbuild import pipeline, wcet
from nnbuild.frontends import gravity_g
from nnbuild.ir import gravity as gravity_ir
from nnbuild.kinds import gravity as gravity_kind
from nnbuild.runners import simavr

pytestmark = [pytest.mark.e2e, needs_avr]

PROGRAM = REPO / "firmware_examples/gravity_digits/gravity_digits.g"
#: cases per search (issue 27's floor: 500 per build)
TOTAL = 500
#: train's search in the default e2e tier (a train case costs 2.5 activate cases); 500 in the slow tier
TRAIN_QUICK = 100
#: most bound/worst allowed: issue 27's goal (activate 1.287 found over 500 cases; train 1.287 over
#: 100, 1.283 over 500, with the update's exact near subtraction and the update rows below)
MOST = {"digits_activate": 1.3, "digits_train": 1.3}


def spread_rows(rng, count=40):
    """Inputs whose products differ in magnitude by about 2^24..2^31 (the additions that align
    their operands the longest): the first few inputs near +-1 (so both of a neuron's sign-split
    sums are large early), the others 2^-26..2^-31 of them (one binade per row, or spread), signs
    mixed; and inputs of random binades. Targets: one-hot, or spread the same way."""
    rows = []
    for r in range(count):
        low = 26 + r % 6
        x = rng.choice([-1.0, 1.0], 64) * 2.0 ** -rng.uniform(low, low + (0 if r % 2 else 3), 64)
        if r % 8 != 7:
            big = 2 + r % 7
            x[:big] = rng.choice([-1.0, 1.0], big) * rng.uniform(0.5, 1.0, big)
        else:
            x = rng.choice([-1.0, 1.0], 64) * 2.0 ** rng.uniform(-40, 10, 64)
        y = np.eye(10)[rng.integers(10)] if r % 3 else rng.choice([-1.0, 1.0], 10) * 2.0 ** -rng.uniform(0, 30, 10)
        rows.append(np.concatenate([x, y]))
    return np.array(rows, dtype=np.float32)


def update_rows(rng, count=24):
    """Inputs that make train's weight updates align their operands long: w - 0.1 x_i dz_j with
    |0.1 x_i dz_j| about 2^-23..2^-31 |w| (__subsf3's far path, 3 bytes and 7 bits). The inputs are
    tiny (2^-18..2^-40 of the largest), along W1 c for a positive c (the check firmware's initial
    weights, seed 1), so every hidden neuron is active and every layer-1 gradient non-zero; the
    targets are large (2^-6..2^8), so the deltas are too."""
    plan = gravity_ir.plan(gravity_g.load(PROGRAM))
    blob = gravity_ir.initial_blob(plan, 1).astype(np.float64)
    first = plan.regions[0].w
    w1 = blob[first:first + 64 * 16].reshape(64, 16)
    rows = []
    for r in range(count):
        x = w1 @ rng.uniform(0.2, 1.0, 16)
        if r % 3 == 1:
            x = np.sign(x) * 2.0 ** rng.uniform(-1, 0, 64)
        elif r % 3 == 2:
            x = np.sign(x) * np.sqrt(np.abs(x))
        x = x / np.abs(x).max() * 2.0 ** -rng.uniform(18, 40)
        top = rng.uniform(-6, 8)
        y = rng.choice([-1.0, 1.0], 10) * 2.0 ** (top - rng.uniform(0, rng.uniform(0, 4), 10))
        rows.append(np.concatenate([x, y]))
    return np.array(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """The check firmware with fresh blobs, its flow facts and the board."""
    tmp = tmp_path_factory.mktemp("gravity_adv")
    board = pipeline.load_board("avr")
    plain = gravity_kind.check_defines
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gravity_kind, "check_defines", lambda name: plain(name) + [("NN_FRESH_BLOB", "1")])
        elf, harness = pipeline.build_check_program(PROGRAM, board, tmp, name="gravity_digits")
    facts = json.loads((tmp / "gen" / "gravity_digits.flowfacts.json").read_text())
    return board, elf, harness, facts, tmp


def search(program, entry, total):
    board, elf, harness, facts, tmp = program
    bound = wcet.analyze(board, elf, entry, facts, tmp / f"wcet_{entry}").cycles

    def run(cases):
        return simavr.run_cases(elf, np.asarray(cases, np.float32), 10, entry_symbol=entry, mcu=board["mcu"],
                                freq=board["clock_hz"], harness=harness)

    ratio, xs, cycles, _ = adversarial_search.check_bound(f"gravity_digits {entry} (float32, AVR)", bound, run,
                                                          74, 0.0, 1.0, 27, total,
                                                          extra=extra_rows(entry))
    assert len(xs) >= total and cycles.min() > 0
    assert ratio <= MOST[entry], f"{entry}'s bound is {ratio:.3f}x the worst case found"


def extra_rows(entry):
    """The constructed inputs of an entry: the spread rows, and for train the update rows first (the
    100-case search keeps the first 40 or so constructed rows after the corners)."""
    rows = spread_rows(np.random.default_rng(5))
    return np.vstack([update_rows(np.random.default_rng(7)), rows]) if entry == "digits_train" else rows


def test_activate_no_case_beats_the_bound(program):
    search(program, "digits_activate", TOTAL)


def test_train_no_case_beats_the_bound(program):
    search(program, "digits_train", TRAIN_QUICK)


@slow("test_train_no_case_beats_the_bound searches train over 100 cases")
def test_train_no_case_of_500_beats_the_bound(program):
    search(program, "digits_train", TOTAL)
