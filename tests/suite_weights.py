"""The whole suite's schedule on xdist workers. `--dist loadfile` hands a worker one test file at a
time, in the order the workers collected them (addopts: --no-loadscope-reorder); tests/conftest.py
orders the files heaviest first by the CPU seconds of suite_weights.tsv, so that the long files
start at once and the last ones to start are short (the two workers end close together).

Refresh the table after a change that moves a file's cost (a whole run, then the quick tier):

  NNBUILD_CPULOG=/tmp/all.tsv python3 -m pytest -q -rs
  NNBUILD_CPULOG=/tmp/quick.tsv python3 -m pytest -q -m "not e2e"
  python3 tests/suite_weights.py /tmp/all.tsv --quick /tmp/quick.tsv

(NNBUILD_CPULOG: one line per test, nodeid, self CPU s, children CPU s, wall s, xdist worker;
conftest's CpuLog.) `--simulate` writes nothing: it prints the predicted end of xdist's schedule (the
tests' CPU seconds, or with --wall their wall seconds; no worker start, no collection) for xdist's
own order (files with most tests first), for the log's own weights and for the table's.
"""

import argparse
import collections
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("suite_weights.tsv")


def load(column="all", table=TABLE):
    """{test file name: CPU seconds} of the table's column `all` (the whole suite) or `quick`
    (`-m "not e2e"`); {} where there is no table."""
    if not table.exists():
        return {}
    lines = [line.split("\t") for line in table.read_text().splitlines() if line and not line.startswith("#")]
    index = lines[0].index(column)
    return {row[0]: float(row[index]) for row in lines[1:] if row[index] != "-"}


def order_files(files, weights):
    """`files` ({name: number of selected tests}, in collection order) heaviest first; a file the
    table does not know (new) goes first, most tests first, as its cost is unknown."""
    rank = {name: k for k, name in enumerate(files)}
    return sorted(files, key=lambda f: (f in weights, -weights.get(f, files[f]), rank[f]))


def read_log(path, wall=False):
    """[(file name, nodeid, seconds)] of a CPU log, in its order: CPU (self + children) seconds, or
    with `wall` the wall seconds."""
    rows = []
    for line in Path(path).read_text().splitlines():
        nodeid, self_cpu, children, wall_s = line.split("\t")[:4]
        seconds = float(wall_s) if wall else float(self_cpu) + float(children)
        rows.append((nodeid.split("::", 1)[0].rsplit("/", 1)[-1], nodeid, seconds))
    return rows


def per_file(rows):
    totals = collections.defaultdict(float)
    for name, _, seconds in rows:
        totals[name] += seconds
    return totals


def write_table(all_rows, quick_rows=None, table=TABLE):
    """The table: every file of the whole run, its CPU seconds and (from the quick tier's log, or
    kept from the old table) its quick tier's; '-' where a file has no quick test."""
    everything = per_file(all_rows)
    quick = per_file(quick_rows) if quick_rows is not None else load("quick", table)
    lines = ["# CPU seconds per test file (self + children), heaviest first: tests/suite_weights.py refreshes it",
             "file\tall\tquick"]
    for name in sorted(everything, key=lambda f: (-everything[f], f)):
        lines.append(f"{name}\t{everything[name]:.1f}\t" + (f"{quick[name]:.1f}" if name in quick else "-"))
    table.write_text("\n".join(lines) + "\n")


def simulate(units, workers=2):
    """Predicted end time of xdist's LoadScopeScheduling over `units` ([(file, [test seconds])], in
    work-queue order): each worker first gets one file, then another while it has at most 2 tests
    pending (so a worker holding a file of 1 or 2 tests also takes the next at once), and again each
    time a test ends leaving it at most 2 pending. Returns (makespan, {worker: [(file, start, end)]})."""
    queue = collections.deque(units)
    pending = [collections.deque() for _ in range(workers)]   # (file, seconds) not yet ended
    clock = [0.0] * workers
    runs = {w: [] for w in range(workers)}

    def assign(w):
        name, tests = queue.popleft()
        pending[w].extend((name, s) for s in tests)

    def reschedule(w):
        if queue and len(pending[w]) <= 2:
            assign(w)

    for w in range(workers):
        if queue:
            assign(w)
    for w in range(workers):
        reschedule(w)
    while any(pending):
        w = min((w for w in range(workers) if pending[w]), key=lambda w: clock[w])
        name, seconds = pending[w].popleft()
        if not runs[w] or runs[w][-1][0] != name:
            runs[w].append([name, clock[w], clock[w]])
        clock[w] += seconds
        runs[w][-1][2] = clock[w]
        reschedule(w)
    return max(clock), runs


def units_of(rows, order):
    tests = collections.OrderedDict()
    for name, _, seconds in rows:
        tests.setdefault(name, []).append(seconds)
    return [(name, tests[name]) for name in order]


def xdist_reorder(rows):
    """xdist's own order (--loadscope-reorder): most tests first, collection (alphabetical) order
    among equals."""
    counts = collections.Counter(name for name, *_ in rows)
    return sorted(sorted(counts), key=lambda f: -counts[f])


def report(label, rows, order, workers):
    end, runs = simulate(units_of(rows, order), workers)
    ends = sorted(max(r[2] for r in worker_runs) for worker_runs in runs.values() if worker_runs)
    minutes, seconds = divmod(round(end), 60)
    print(f"{label}: {end:.0f} s ({minutes} min {seconds} s); the workers end {ends[-1] - ends[0]:.0f} s apart")
    for w, worker_runs in runs.items():
        tail = ", ".join(f"{n} {s:.0f}-{e:.0f}" for n, s, e in worker_runs[-4:])
        print(f"  gw{w}: {len(worker_runs)} files, first {worker_runs[0][0]}, last four: {tail}")
    return end


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="a whole run's CPU log (NNBUILD_CPULOG)")
    parser.add_argument("--quick", help="the quick tier's CPU log (its column; kept from the table without it)")
    parser.add_argument("--simulate", action="store_true", help="print the predicted schedules; write nothing")
    parser.add_argument("--wall", action="store_true", help="simulate with the tests' wall seconds, not their CPU")
    parser.add_argument("--column", choices=("all", "quick"), default="all", help="the table's column to simulate")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    rows = read_log(args.log, wall=args.wall)
    if not args.simulate:
        write_table(rows, read_log(args.quick) if args.quick else None)
        print(f"{TABLE}: {len(per_file(rows))} files, {sum(per_file(rows).values()):.0f} CPU s")
        return 0
    counts = collections.OrderedDict((name, 0) for name in sorted({r[0] for r in rows}))
    for name, *_ in rows:
        counts[name] += 1
    what = "wall" if args.wall else "CPU"
    print(f"{len(rows)} tests, {len(counts)} files, {sum(r[2] for r in rows):.0f} {what} s on {args.workers} workers")
    report("xdist's reorder (most tests first)", rows, xdist_reorder(rows), args.workers)
    report("heaviest first (this log's own weights)", rows, order_files(counts, per_file(rows)), args.workers)
    if TABLE.exists():
        report(f"heaviest first (suite_weights.tsv, {args.column})", rows, order_files(counts, load(args.column)),
               args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
