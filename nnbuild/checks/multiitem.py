"""Checks of a generated multi-item system on the host (the seed's validation (i) and (ii),
checked rather than argued): the system and the unsplit model run on the same inputs in one
program, many times, each item's thread starting after a seeded random delay; every run's outputs
must equal the unsplit model's bit for bit, and every run's recorded transitions must be a firing
sequence of the items' program-order Petri net (and, without the get transitions, of the paper's
data-flow net). `sanitize=True` builds with ThreadSanitizer, which must report nothing. On threads,
every run's measured end-to-end time must be within the critical path of the timed net weighted by
the run's measured segment and synchronisation costs (`multiitem_timing`).
"""

import copy
import os
import subprocess
from pathlib import Path

import numpy as np

from nnbuild import codegen
from nnbuild.checks import multiitem_timing as timed
from nnbuild.checks.inputs import check_inputs
from nnbuild.codegen import multiitem as multiitem_c
from nnbuild.errors import NNBuildError
from nnbuild.ir import petri

RUNNERS = Path(__file__).resolve().parents[1] / "runners"
TSAN_EXIT = 66


def generate_host_check(system, workdir, *, shape, sync="flags", precision="float32"):
    """The C of `system` and of its unsplit model (`<name>_unsplit`, same shape and precision, its
    fixed-point formats proved over the same input box) in workdir/gen."""
    gen = Path(workdir) / "gen"
    files = multiitem_c.generate(system, gen, shape=shape, sync=sync, precision=precision)
    whole = copy.copy(system.whole)
    whole.name = f"{system.name}_unsplit"
    files += codegen.generate(whole, gen, shape=shape, precision=precision, input_range=multiitem_c.INPUT_RANGE)
    return [f for f in files if f.suffix == ".c"]


def compile_host_check(system, workdir, sources, *, sanitize=False, cc="gcc"):
    """The check program from the generated sources (ThreadSanitizer with `sanitize`)."""
    workdir = Path(workdir)
    gen = workdir / "gen"
    name, up = system.name, system.name.upper()
    whole = f"{system.name}_unsplit"
    defines = [f'-DNN_MI_HEADER="{name}.h"', f"-DNN_MI_INFER={name}_infer",
               f'-DNN_WHOLE_HEADER="{whole}.h"', f"-DNN_WHOLE_INFER={whole}_infer",
               f"-DNN_IN={up}_INPUTS", f"-DNN_OUT={up}_OUTPUTS", f"-DNN_ITEMS={len(system.items)}"]
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-pthread"]
    if sanitize:
        flags += ["-fsanitize=thread", "-g", "-O1"]
    program = workdir / ("check_tsan" if sanitize else "check")
    system_c = str(gen / f"{name}.c")
    command = [cc, *flags, *defines, f"-I{gen}", f"-I{RUNNERS}", "-include", "multiitem_hooks.h", system_c,
               str(RUNNERS / "multiitem_check.c"), *[str(s) for s in sources if str(s) != system_c],
               "-lm", "-o", str(program)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        first = next((l for l in result.stderr.splitlines() if "error" in l), result.stderr.strip()[:300])
        raise NNBuildError(f"multi-item check program does not compile: {first}")
    return program


def build_host_check(system, workdir, *, shape, sync="flags", sanitize=False, cc="gcc", precision="float32"):
    """The check program of `system` and its unsplit model, built in workdir."""
    sources = generate_host_check(system, workdir, shape=shape, sync=sync, precision=precision)
    return compile_host_check(system, workdir, sources, sanitize=sanitize, cc=cc)


def run_host_check(system, program, x, *, runs=1000, max_delay_us=200, seed=1, sync="flags", timeout=600):
    """Run the check program; returns the record (raises nothing: the caller judges it)."""
    n_out = int(np.prod(system.output_shape))
    env = dict(os.environ, TSAN_OPTIONS=f"exitcode={TSAN_EXIT} halt_on_error=1 second_deadlock_stack=1")
    result = subprocess.run([str(program), str(runs), str(max_delay_us), str(seed)],
                            input=np.ascontiguousarray(x, dtype="<f4").tobytes(), capture_output=True,
                            timeout=timeout, env=env)
    tsan = [l for l in result.stderr.decode(errors="replace").splitlines() if "ThreadSanitizer" in l]
    record = {"runs": runs, "max_delay_us": max_delay_us, "seed": seed, "sync": sync,
              "exit_status": result.returncode, "sanitizer_reports": len(tsan),
              "sanitizer_first": tsan[0] if tsan else None}
    if result.returncode != 0:
        record["ok"] = False
        return record
    code_net = petri.item_net(system, program_order=True)
    data_net = petri.item_net(system)
    actions = timed.action_codes(system, code_net)
    n_items = len(system.items)
    data = result.stdout
    pos, unequal, bad_trace, orders, timed_runs, firsts = 0, 0, None, set(), [], []
    for run in range(runs):
        multi = np.frombuffer(data, "<f4", n_out, pos)
        if run < len(x):
            firsts.append(multi)
        whole = np.frombuffer(data, "<f4", n_out, pos + 4 * n_out)
        count = int(np.frombuffer(data, "<i4", 1, pos + 8 * n_out)[0])
        events = np.frombuffer(data, "<i4", count, pos + 8 * n_out + 4)
        times = np.frombuffer(data, "=i8", count + n_items + 2, pos + 8 * n_out + 4 + 4 * count)
        pos += 8 * n_out + 4 + 12 * count + 8 * (n_items + 2)
        if multi.tobytes() != whole.tobytes():
            unequal += 1
        codes = [int(c) for c in events if c >= 0]
        if sync != "schedule":
            stamps = timed.run_stamps(system, actions, events, times[:count], times[count:count + n_items],
                                      int(times[-2]), int(times[-1]))
            timed_runs.append((timed.measured_costs(system, sync, stamps), stamps["end"]))
        names = [code_net.transitions[c].name for c in codes]
        orders.add(tuple(names))
        if bad_trace is None:
            why = petri.replay(code_net, names)
            if why is None:
                why = petri.replay(data_net, [n for n in names if not n.startswith("get.")])
            if why is not None:
                bad_trace = f"run {run}: {why}"
    timing = timed.soundness(system, sync, timed_runs) if timed_runs else None
    timing_sound = timing is None or timing["first_violation"] is None
    record.update(ok=unequal == 0 and bad_trace is None and not tsan and timing_sound,
                  bit_equal_runs=runs - unequal, firing_sequences=bad_trace is None, trace_violation=bad_trace,
                  distinct_orders=len(orders), timing=timing)
    record["max_abs_error"] = reference_error(system, x, firsts)
    record["first_outputs"] = [[float(v) for v in m] for m in firsts]
    return record


def output_error(outputs, expected):
    """max |outputs - expected| over every case and output (float64)."""
    outputs = np.asarray(outputs, np.float64)
    return float(np.max(np.abs(outputs - np.asarray(expected, np.float64).reshape(outputs.shape))))


def reference_error(system, x, outputs):
    """max |system outputs - the unsplit model's float64 reference| over the cases run."""
    from nnbuild.ir import reference
    if not len(outputs):
        return None
    x = np.asarray(x)[:len(outputs)]
    expected = reference.run(system.whole, x.reshape((len(x),) + tuple(system.whole.input_shape)), dtype=np.float64)
    return output_error(outputs, expected)


def check_host(system, workdir, *, shape, runs=1000, max_delay_us=200, seed=1, sync="flags", sanitize=False,
               cases=16, precision="float32", x=None):
    """Build and run (on `x`, else `cases` check inputs); the record, or one NNBuildError line
    naming what failed."""
    program = build_host_check(system, workdir, shape=shape, sync=sync, sanitize=sanitize, precision=precision)
    if x is None:
        x = check_inputs(int(np.prod(system.input_shape)), cases, seed, multiitem_c.INPUT_RANGE)
    record = run_host_check(system, program, x, runs=runs, max_delay_us=max_delay_us, seed=seed, sync=sync)
    record["sanitizer"] = "thread" if sanitize else None
    record["precision"] = precision
    if not record["ok"]:
        raise NNBuildError(failure(record))
    return record


def failure(record):
    if record.get("sanitizer_reports"):
        return f"ThreadSanitizer: {record['sanitizer_first']}"
    if record["exit_status"] != 0:
        return f"multi-item check program exited with status {record['exit_status']}"
    if record["bit_equal_runs"] != record["runs"]:
        return (f"outputs differ from the unsplit model in {record['runs'] - record['bit_equal_runs']} "
                f"of {record['runs']} runs")
    if record["trace_violation"]:
        return f"recorded events are not a firing sequence of the Petri net: {record['trace_violation']}"
    return f"host timing unsound: {record['timing']['first_violation']}"


# ------------------------------------------------------------------------- single core (AVR)

def merged_flowfacts(system, gen):
    """One flow-facts record for the whole system: every segment's loops, layers, indirect calls and
    value facts (each names its segment's file and line)."""
    import json
    merged = {"entry": f"{system.name}_infer", "loops": [], "layers": [], "indirect": [], "values": []}
    for item in system.items:
        for seg in item.segments:
            with open(Path(gen) / f"{seg}.flowfacts.json") as f:
                facts = json.load(f)
            for key in ("loops", "layers", "indirect", "values"):
                merged[key] += facts.get(key, [])
    return merged


def check_board(system, board, workdir, *, shape, check_main, check_defines, io, cases=8, seed=1,
                precision="float32", x=None):
    """The static schedule on a single-core board: built with the board's compiler around the
    generic check main, run on its simulator (cycles per case), compared with the unsplit model's
    float64 reference (in fixed point also with the bit-exact model of the unsplit model's code,
    bit for bit), and bounded by the board's WCET analyzer as a whole and per segment. The
    record carries the timing of the items (see `timing`). `board` is a loaded board; the check
    main, its defines for the system and its wire format come from the kind."""
    from nnbuild import wcet as analyzers
    workdir = Path(workdir)
    gen = workdir / "gen"
    files = multiitem_c.generate(system, gen, shape=shape, sync="schedule", precision=precision,
                                 storage=board.get("weights_storage", "const"))
    from nnbuild.runners import check_program_parts, script_option
    runs_on = check_program_parts(board)   # a qemu-system-arm machine's reset code and linker script
    sources = [f for f in files if f.suffix == ".c"] + [check_main, *runs_on.get("sources", [])]
    program = board.compiler.build_executable(board, sources, workdir / f"check{board.program_suffix}",
                                              include_dirs=[gen],
                                              defines=[f"{k}={v}" for k, v in check_defines],
                                              **script_option(runs_on.get("ldscript")))
    from nnbuild.checks import memory
    memory.gate_memory(board, memory.usage(board, board.compiler.section_sizes(board, program)))
    if x is None:
        x = check_inputs(int(np.prod(system.input_shape)), cases, seed, multiitem_c.INPUT_RANGE)
    harness = None
    if getattr(board.runner, "NEEDS_HARNESS", False):
        harness = board.runner.build_harness(workdir / "harness")
    outputs, cycles = board.runner.run(board, program, x, int(np.prod(system.output_shape)), io=io,
                                       entry=f"{system.name}_infer", harness=harness)
    error = reference_error(system, x, np.asarray(outputs).reshape(len(x), -1))
    record = {"board": board.name, "cases": len(x), "max_abs_error": error, "precision": precision,
              "first_outputs": np.asarray(outputs, np.float64).reshape(len(x), -1).tolist(),
              "measured_cycles": [int(c) for c in cycles] if cycles is not None else None}
    if precision != "float32":
        record["bit_equal_to_unsplit_cases"] = bit_equal_cases(system, precision, x, outputs)
    reason = analyzers.unavailable_reason(board)
    if reason:
        record["wcet"] = {"skipped": reason}
        return record
    facts = merged_flowfacts(system, gen)
    whole = analyzers.analyze(board, program, f"{system.name}_infer", facts, workdir / "wcet")
    segments = {}
    for item in system.items:
        for seg in item.segments:
            result = analyzers.analyze(board, program, f"{seg}_infer", facts, workdir / "wcet" / seg)
            segments[seg] = int(result.cycles)
    record["wcet"] = {"analyzer": whole.analyzer, "schedule_cycles": int(whole.cycles),
                      "segment_cycles": segments, "clock_hz": board.get("clock_hz")}
    record["timing"] = timing(system, segments, int(whole.cycles))
    if cycles is not None and max(record["measured_cycles"]) > whole.cycles:
        raise NNBuildError(f"WCET bound {whole.cycles} cycles < measured {max(record['measured_cycles'])} "
                           f"on {board.name}: the bound is unsound")
    return record


def bit_equal_cases(system, precision, x, outputs):
    """How many of the board's outputs equal, bit for bit, those of the unsplit model's fixed-point
    code (its bit-exact model, nnbuild.numerics.graph_bitexact, on the same inputs)."""
    from nnbuild.numerics import graph_bitexact, graph_plan
    plan = graph_plan.quantize_graph(system.whole, precision, multiitem_c.INPUT_RANGE)
    expected = graph_bitexact.run_graph(plan, x).astype("<f4").reshape(len(x), -1)
    got = np.asarray(outputs, dtype="<f4").reshape(len(x), -1)
    return int(sum(a.tobytes() == b.tobytes() for a, b in zip(got, expected)))


def timing(system, segment_cycles, schedule_cycles=None, sync_cycles=0):
    """The timed net's figures: per item the sum of its segments' bounds, and the end-to-end bound
    of the items on their own cores: the longest path through the program-order net, each run
    weighted by its segment's bound and each send/get by `sync_cycles`, plus all of the schedule's
    bound outside the segments (packing copies, entry and exit: charged to the path whole, which
    over-approximates the share any one path runs)."""
    net = petri.item_net(system, program_order=True)
    cost = {}
    for item in system.items:
        for kind, name in item.actions:
            if kind == "run":
                segment = item.segments[name]
                cost[f"{item.name}.{segment.instructions[0]}"] = segment_cycles[name]
    finish = {}
    order = [net.transitions[c] for c in multiitem_c.static_order(system, net)]
    produced_by = {p: t.name for t in net.transitions for p in t.outputs}
    for t in order:   # a topological order: every producer finishes before its consumers start
        start = max((finish[produced_by[p]] for p in t.inputs if p in produced_by), default=0)
        weight = cost.get(t.name, 0) if t.kind == "op" else sync_cycles
        finish[t.name] = start + weight
    per_item = {item.name: sum(segment_cycles[s] for s in item.segments) for item in system.items}
    outside = max(0, schedule_cycles - sum(per_item.values())) if schedule_cycles is not None else 0
    critical = max(finish.values()) + outside
    record = {"item_cycles": per_item, "end_to_end_cycles": critical, "sync_cycles": sync_cycles,
              "outside_segments_cycles": outside, "sequential_cycles": sum(per_item.values())}
    if schedule_cycles is not None:
        record["schedule_cycles"] = schedule_cycles
        record["speedup_bound"] = round(schedule_cycles / critical, 3) if critical else None
    return record
