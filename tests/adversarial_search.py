"""The adversarial input search the WCET tests of every timed board share: range corners, special
floats (NaN, infinities, subnormals, values beyond the range) and a hill-climb on the cycles the
board's runner reports, the inputs run in batches (one simulator process per batch, never one per
input). `check_bound` runs the search and holds the bound >= every input's cycles."""

import numpy as np

#: mutants run per hill-climb round (one simulator run each round)
BATCH = 25


def corner_inputs(n_in, lo, hi, rng):
    """Whole-range corners, alternating and random corner patterns, special floats (NaN, infinities,
    subnormals, values beyond the range) and uniform draws: about 60 inputs."""
    mid = (lo + hi) / 2
    rows = [np.full(n_in, v) for v in (lo, hi, mid, 0.0, -0.0, 1e-38, -1e-38, 1.4e-45, 7.5e-4, hi * 0.999,
                                      lo * 0.999, 2 * hi, 2 * lo, 1e30, -1e30)]
    rows += [np.full(n_in, v) for v in (np.nan, np.inf, -np.inf)]
    for period in (1, 2, 3, 5, 7, 28):
        pattern = (np.arange(n_in) // period) % 2 == 0
        rows += [np.where(pattern, hi, lo), np.where(pattern, lo, hi)]
    rows += list(rng.choice([lo, hi], size=(16, n_in)))
    rows += list(rng.choice([lo, hi, mid, 0.0, np.nan, np.inf, -np.inf, 1e-40, 2 * hi], size=(8, n_in)))
    rows += list(rng.uniform(lo, hi, (8, n_in)))
    return np.array(rows, dtype=np.float32)


def mutate(best, lo, hi, rng, count):
    """`count` variants of `best`, each with a few elements set to a corner, a special or a random value."""
    n_in = best.size
    choices = np.array([lo, hi, (lo + hi) / 2, 0.0, hi * 0.999, lo * 0.999, 1e-40, np.nan, np.inf, -np.inf, 2 * hi],
                       dtype=np.float32)
    out = np.repeat(best[None, :], count, axis=0)
    for row in out:
        k = int(rng.integers(1, max(2, n_in // 8) + 1))
        at = rng.choice(n_in, size=k, replace=False)
        row[at] = np.where(rng.random(k) < 0.7, rng.choice(choices, size=k), rng.uniform(lo, hi, k))
    return out


def search(run, n_in, lo, hi, rng, total, batch=BATCH, extra=None):
    """(inputs, cycles, outputs) of `total` inputs: the corners (and `extra`, inputs a caller
    constructs for its code), then hill-climb rounds from the slowest input so far (a mutant that
    ties it is taken too, to walk plateaus). `run(x)` runs a batch of inputs in one simulator
    process: (outputs, cycles)."""
    xs = corner_inputs(n_in, lo, hi, rng)
    if extra is not None:
        xs = np.vstack([xs, np.asarray(extra, dtype=np.float32)])
    xs = xs[:total]
    ys, cycles = run(xs)
    best = int(np.argmax(cycles))
    while len(xs) < total:
        mutants = mutate(xs[best], lo, hi, rng, min(batch, total - len(xs)))
        y, c = run(mutants)
        xs, ys, cycles = np.vstack([xs, mutants]), np.vstack([ys, y]), np.concatenate([cycles, c])
        if c.max() >= cycles[best]:
            best = len(cycles) - len(c) + int(np.argmax(c))
    return xs, np.asarray(cycles, dtype=np.int64), ys


def check_bound(label, bound, run, n_in, lo, hi, seed, total, batch=BATCH, extra=None):
    """The search against `bound`: (bound / worst cycles, inputs, cycles, outputs); fails on any input
    over the bound. The figures are printed (pytest -s)."""
    xs, cycles, ys = search(run, n_in, lo, hi, np.random.default_rng(seed), total, batch, extra)
    assert len(xs) >= total
    worst = int(cycles.max())
    print(f"\n{label}: WCET bound {bound:,} cycles, worst of {len(xs)} adversarial inputs {worst:,} "
          f"(best {int(cycles.min()):,}), bound/measured {bound / worst:.4f}")
    assert worst <= bound, f"UNSOUND: {label} ran {worst} cycles over its bound {bound}"
    return bound / worst, xs, cycles, ys
