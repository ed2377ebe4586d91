"""Multi-item systems (seed 002) as a model kind: load (parse, Petri-net checks), generate the
items' C, check it, time it and gate it, into one build directory with report.json and gate.json.

Behind the pipeline's plan (nnbuild.pipeline.multiitem_plan: SCons, `nnbuild check`, and
`nnbuild multiitem`, which runs the same tasks in order outside SCons). A single-graph model is split into a system first (`split`, items=N or a map).

    host: the items as POSIX threads (sync=flags, or barrier); >= 1,000 runs with random thread
          start delays, bit-equal to the unsplit model, each run's events a firing sequence of the
          net, then the same under ThreadSanitizer; 1,000 runs without delays time the items: every
          run within the timed net's critical path of its measured segment and sync costs;
    avr:  the items in one static schedule under simavr; WCET of the schedule and of each segment;
          the deadline gate on the schedule's bound (the end-to-end bound of this one-core
          deployment); the bound of the items on their own cores is reported beside it.
"""

import json
from pathlib import Path

import numpy as np

from nnbuild import files
from nnbuild.checks import multiitem as checks
from nnbuild.checks import report_html_multiitem
from nnbuild.codegen import multiitem as multiitem_c
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_items

NAME = "multiitem"
SHAPES = ("v2", "v1", "v3")
PRECISIONS = multiitem_c.PRECISIONS
SYNCS = ("flags", "barrier")


#: why the single-model steps (generate, reference, run, ...) refuse this kind
REFUSAL = "a multi-item system builds through `python3 -m nnbuild multiitem` (or SCons), not step by step"


def load(path, name=None, environment=None):
    """The system of a multi-item document, its Petri-net checks done (system.meta["petri"]), and
    an empty passes log (the kinds' interface): (system, [])."""
    if environment:
        raise NNBuildError("an environment applies to TPGs, not to multi-item systems", path=path)
    return nnef_items.load(path, name), []


def reference_arrays(model, count, seed, input_range, data=None):
    """inputs.npz of a system: its unsplit model's check inputs and float64 reference outputs."""
    from nnbuild.kinds import nn
    return nn.reference_arrays(model.whole, count, seed, input_range, data)


def split(path, folder, *, target="host", items=None, item_map=None, shape="v2"):
    """A single-graph model (any format) split into the multi-item `.nnef` folder `folder`: by a
    JSON map layer -> item, or items=N weighted by the target board's per-layer WCET bound of the
    unsplit model (multiply-accumulate counts where the board has no analyzer; the record says
    which). Returns the split's record (also in folder/split.json). The costs are the float32
    code's in `shape` whatever the precision built: the split is one for every precision."""
    from nnbuild import boards, kinds
    from nnbuild.checks import layer_costs
    from nnbuild.frontends import item_split
    from nnbuild.kinds import nn
    kind = kinds.of_file(str(path)).NAME
    if kind == NAME:
        raise NNBuildError("items= splits a single-graph model; this one is already a multi-item system", path=path)
    if kind != nn.NAME:
        raise NNBuildError(f"items= splits a neural network, not a {kind} model", path=path)
    model, _ = nn.load(path)
    costs, source = None, item_split.MAC_COSTS
    if items is not None:
        board = boards.load_board(target)
        costs, source = layer_costs.wcet_layer_costs(model, board, Path(folder).parent / "costs", shape=shape,
                                                     check_main=nn.check_main(),
                                                     check_defines=nn.check_defines(model.name))
        if costs is None:
            source = f"{item_split.MAC_COSTS} ({source})"
    layer_items = item_split.read_map(item_map) if item_map is not None else None
    result = item_split.split(model, folder, items=items, layer_items=layer_items, layer_costs=costs,
                              cost_source=source, map_path=item_map)
    return result.record


def validate(target, shape, precision, sync):
    """One line for options no multi-item build takes."""
    if shape not in SHAPES:
        raise NNBuildError(f"shape '{shape}' does not generate multi-item systems (shapes: {', '.join(SHAPES)})")
    multiitem_c.check("flags", precision, shape)
    if target == "host" and sync not in SYNCS:
        raise NNBuildError(f"sync '{sync}' is not a host threading (choose {', '.join(SYNCS)})")


def check(path, workdir, *, target="host", shape="v2", precision="float32", sync="flags", runs=1000,
          max_delay_us=200, sanitize=False, cases=8, seed=1, data=None):
    """One check of the system in workdir, its record: on the host its items as threads (runs with
    random start delays up to max_delay_us, under ThreadSanitizer with `sanitize`), on a board its
    static schedule run on the simulator and bounded; on `cases` check inputs, or on the inputs x of
    `data` (.npz; then also against its outputs y when it has them). A failed check raises one line."""
    validate(target, shape, precision, sync)
    system, _ = load(path)
    x = y = None
    if data:
        arrays = reference_arrays(system, 0, 0, multiitem_c.INPUT_RANGE, data)
        x = arrays["x"].reshape(len(arrays["x"]), -1)
        with np.load(data) as given:
            y = given["y"].reshape(len(x), -1) if "y" in given.files else None
    if target == "host":
        record = checks.check_host(system, workdir, shape=shape, runs=runs, max_delay_us=max_delay_us, seed=seed,
                                   sync=sync, sanitize=sanitize, cases=cases, precision=precision, x=x)
    else:
        record = check_on_board(system, target, workdir, shape=shape, cases=cases, seed=seed, precision=precision,
                                x=x)
    if y is not None:
        record["vs_framework"] = checks.output_error(record["first_outputs"], y)
    record["model"] = system.name
    return record


def report(path, records, output, *, target="host", shape="v2", precision="float32", sync="flags",
           deadline_ms=None, tolerance=1e-4, split_record=None):
    """report.json (and report.html beside it) from the checks' records ({"host", "timing",
    "tsan"} or {"board"}); the gates' verdict is in it (gates_passed, failure). `split_record`:
    how the system was split from a single-graph model (`split`), when it was."""
    system, _ = load(path)
    report = {"kind": NAME, "model": system.name, "target": target, "shape": shape, "precision": precision,
              "items": [i.name for i in system.items], "petri": system.meta["petri"]}
    if split_record is not None:
        report["split"] = split_record
    failures = []
    if target == "host":
        report.update(sync=sync, host=records["host"], host_timing=records["timing"]["timing"],
                      deadline={"deadline_ms": None, "verdict": "the host is untimed: no deadline applies"})
        if "tsan" in records:
            report["thread_sanitizer"] = records["tsan"]
    else:
        board = records["board"]
        report.update(sync="schedule", board=board, deadline=deadline_verdict(board, deadline_ms))
        if board["max_abs_error"] > tolerance:
            failures.append(f"max error {board['max_abs_error']:.3g} > tolerance {tolerance:.3g}")
        if board.get("bit_equal_to_unsplit_cases", board["cases"]) != board["cases"]:
            failures.append(f"outputs differ from the unsplit model's {precision} code in "
                            f"{board['cases'] - board['bit_equal_to_unsplit_cases']} of {board['cases']} cases")
        if report["deadline"].get("met") is False:
            failures.append(report["deadline"]["verdict"])
    report["gates_passed"] = not failures
    if failures:
        report["failure"] = failures[0]
    from nnbuild.checks import report as reports
    report.update(reports.multiitem_fields(report))
    reports.validate(json.loads(json.dumps(report)))
    files.write_text(output, json.dumps(report, indent=1, sort_keys=True) + "\n")
    report_html_multiitem.save(Path(output).with_name("report.html"), report)
    return report


def gate(report_path, output):
    """gate.json, written only when every gate of the report holds; else its first failure, one line."""
    record = json.loads(Path(report_path).read_text())
    if not record.get("gates_passed"):
        raise NNBuildError(record.get("failure", "a gate failed"), path=report_path)
    files.write_text(output, json.dumps({"gates": "passed", "model": record["model"],
                                         "target": record["target"]}) + "\n")


def discard_gate(outdir):
    """Remove the gate.json of the build in `outdir` before a check of it runs: a gate passed
    earlier (another precision, sync or model) must not outlive a check that fails, and the
    gate is written again only once the checks and the report hold."""
    (Path(outdir) / "gate.json").unlink(missing_ok=True)


def check_options(target, *, sync="flags", runs=1000, max_delay_us=200, sanitize=True, purpose="build"):
    """The checks of a build, label -> their own options of `check`: on the host the threads with
    random start delays, the timing runs without, ThreadSanitizer (`nnbuild check`: the first only);
    on a board its static schedule."""
    if target != "host":
        return {"board": {}}
    checks = {"host": {"max_delay_us": max_delay_us}, "timing": {"max_delay_us": 0},
              "tsan": {"max_delay_us": max_delay_us, "sanitize": True}}
    if purpose == "check":
        checks = {"host": checks["host"]}
    elif not sanitize:
        del checks["tsan"]
    return {label: dict(sync=sync, runs=runs, **extra) for label, extra in checks.items()}


def split_folder(path):
    """Where a build puts the split of the single-graph model `path` (a file, or an NNEF folder or
    its graph.nnef), relative to its directory."""
    from nnbuild import names
    path = Path(path)
    stem = path.parent.stem if path.name == nnef_items.GRAPH_FILE else path.stem
    return f"split/{names.c_identifier(stem)}.nnef"


def check_on_board(system, target, workdir, **options):
    """checks.multiitem.check_board with the board loaded and the NN kind's check main: the
    system's header gives the same API (<name>_infer, <NAME>_INPUTS/OUTPUTS) as a single model."""
    from nnbuild import boards
    from nnbuild.kinds import nn
    return checks.check_board(system, boards.load_board(target), workdir, check_main=nn.check_main(),
                              check_defines=nn.check_defines(system.name), io=nn.IO, **options)


def deadline_verdict(board, deadline_ms):
    """The deadline against the deployment's end-to-end bound (one core: the schedule's bound)."""
    wcet = board.get("wcet", {})
    if "schedule_cycles" not in wcet:
        return {"deadline_ms": deadline_ms, "met": False if deadline_ms else None,
                "verdict": f"no WCET bound ({wcet.get('skipped', 'no analyzer')}): the deadline cannot be checked"}
    clock = wcet["clock_hz"]
    timing = board["timing"]
    bound_ms = wcet["schedule_cycles"] / clock * 1e3
    record = {"deadline_ms": deadline_ms, "end_to_end_bound_ms": round(bound_ms, 3),
              "items_on_own_cores_bound_ms": round(timing["end_to_end_cycles"] / clock * 1e3, 3),
              "item_bounds_ms": {k: round(v / clock * 1e3, 3) for k, v in timing["item_cycles"].items()},
              "worst_measured_ms": round(max(board["measured_cycles"]) / clock * 1e3, 3)}
    if deadline_ms is None:
        record.update(met=None, verdict="no deadline set")
    else:
        from nnbuild.checks.deadline import deadline_cycles
        budget = deadline_cycles(deadline_ms, clock)     # exact: integer cycles against the deadline's
        record.update(met=int(wcet["schedule_cycles"]) <= budget, deadline_cycles=budget)
        sign = "<=" if record["met"] else ">"
        record["verdict"] = (f"end-to-end bound {bound_ms:.1f} ms {sign} deadline {deadline_ms:g} ms "
                             f"({int(wcet['schedule_cycles']):,} cycles {sign} {budget:,} cycles)")
    return record


def summary(report):
    """The lines a build prints."""
    petri = report["petri"]
    lines = [f"{report['model']}: {len(report['items'])} items; Petri net {petri['states']} states "
             f"(program order {petri['program_order_states']}), deadlock-free, 1-safe, equivalent to the unsplit net"]
    if report.get("split"):
        lines.append(split_summary(report["split"]))
    for key in ("host", "thread_sanitizer"):
        r = report.get(key)
        if r:
            lines.append(f"{key}: {r['bit_equal_runs']}/{r['runs']} runs bit-equal to the unsplit model, "
                         f"{r['distinct_orders']} event orders, all firing sequences, "
                         f"sanitizer reports {r['sanitizer_reports']}")
    measured = report.get("host_timing")
    if measured:
        lines.append(f"host timing (no start delays): measured end-to-end within the critical path of the measured "
                     f"segment and synchronisation costs in {measured['within_critical_path']}/{measured['runs']} runs "
                     f"({measured['within_without_sync_costs']} without the synchronisation costs); bound of the "
                     f"worst costs {measured['bound_of_worst_costs_ns'] / 1e3:.1f} us, worst measured "
                     f"{measured['max_end_to_end_ns'] / 1e3:.1f} us")
    if "board" in report:
        d = report["deadline"]
        lines.append(f"{report['target']}: {d['verdict']}; items on their own cores {d.get('items_on_own_cores_bound_ms')} ms, "
                     f"item bounds {d.get('item_bounds_ms')} ms, worst measured {d.get('worst_measured_ms')} ms")
        board = report["board"]
        if "bit_equal_to_unsplit_cases" in board:
            lines.append(f"{report['target']}: {board['bit_equal_to_unsplit_cases']}/{board['cases']} outputs bit-equal to "
                         f"the unsplit model's {report['precision']} code, max error {board['max_abs_error']:.3g}")
    return lines


def split_summary(record):
    """One line: how a model was split, by which costs."""
    by_item = {}
    for layer, item in record["layers"].items():
        by_item.setdefault(item, []).append(layer)
    items = "; ".join(f"{item}: {', '.join(layers)}" for item, layers in by_item.items())
    return (f"split by {record['by']} ({items}); costs: {record['cost_source']}; items on their own cores "
            f"{record['items_on_own_cores']:,} vs {record['sequential']:,} in sequence")
