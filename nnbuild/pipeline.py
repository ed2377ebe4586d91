"""The pipeline of one build, described once: `plan` lists its tasks (a step of nnbuild.steps, or a
C program to compile and link) with their inputs and outputs; the SCons tool turns each task into
build actions, and `execute` runs the same tasks in order outside SCons (`nnbuild check`, tests).

Paths in a plan are relative to the build directory unless absolute (the model, the check data,
nnbuild's own C sources).
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

from nnbuild import boards, codegen, kinds, options, runners, steps
from nnbuild.errors import NNBuildError

#: where a simulator harness lives, shared by every build of a project
HARNESS_DIR = "#build/tools"


@dataclass
class Task:
    """One node of the build: `step` is a key of steps.STEPS, or "program" (compile + link).

    `sources` maps a role to a path or list of paths; `options` are the step function's other
    arguments (for "program": board, defines per source, include dirs, opt)."""

    step: str
    targets: List[str]
    sources: Dict[str, object] = field(default_factory=dict)
    options: Dict[str, object] = field(default_factory=dict)
    #: tasks whose outputs must exist first though they are not inputs (the memory gate before runs)
    after: List[str] = field(default_factory=list)
    role: str = ""


@dataclass
class Plan:
    tasks: List[Task]
    name: str
    board: boards.Board
    #: role -> target path of the nodes callers name (generated, check, firmware, report, gate, ...)
    nodes: Dict[str, object] = field(default_factory=dict)
    #: the functions the build measures and bounds, the inference entry first
    entries: List[str] = field(default_factory=list)


def plan(*, name, model, board, kind, shape=kinds.DEFAULT_SHAPE, precision=None, opt=None,
         main=None, tolerance=1e-4, count=32, seed=1, input_range=(-1.0, 1.0), deadline=None,
         deadline_origin=None, environment=None, data=None, purpose="build", record_wcet_errors=False,
         path=None, inputs=None, wcet="auto", interface=None) -> Plan:
    """Every task of one build of `model` for `board` in one precision.

    purpose "build": generate, reference, programs (firmware with `main`), runs (the host build too
    when the target is not the host), compare, size, WCET (when the board's analyzer can run here),
    report and gate. purpose "check" (`nnbuild check`): check inputs from `data`, the target's run
    and the comparison only. `path` is the PATH the analyzers' tools are looked up on. `inputs`: the
    check inputs made once elsewhere (reference_task) and shared, e.g. by precision=auto's candidates;
    the plan then has no reference task of its own. `interface` (scons, nnmodel, cmake, cli): the
    front running the build, whose syntax the gate's hints use."""
    board = boards.load_board(board)
    codegen.check_model_name(name)      # it names files and folders: refused here, before any is made
    kind = kinds.get(kind) if isinstance(kind, str) else kind
    precision = kinds.default_precision(kind, precision)
    kinds.check(kind, shape, precision, board)
    roles = {role: f"gen/{f}" for role, f in codegen.output_roles(name, kinds.resolve_shape(kind, shape)).items()}
    gen = list(roles.values())
    header, code, flowfacts, trace = roles["header"], roles["code"], roles["flowfacts"], roles["trace"]
    weights = [roles[r] for r in codegen.C_SOURCE_ROLES if r in roles and r != "code"]
    #: the functions measured and bounded: the inference entry first (a Gravity program: activate, train)
    entries = kind.entries(name, model) if hasattr(kind, "entries") else [f"{name}_infer"]
    tasks = [Task("generate", gen, {"model": model}, role="generated",
                  options={"name": name, "shape": shape, "precision": precision, "input_range": input_range,
                           "storage": board.get("weights_storage", "const"), "dsp": board.get("dsp"),
                           "target": board.ref,
                           "environment": environment})]
    if inputs is None:
        inputs = "inputs.npz"
        tasks.append(reference_task(model, inputs, data=data, count=count, seed=seed, input_range=input_range,
                                    environment=environment))
    nodes = {"generated": gen, "generated_roles": roles, "inputs": inputs}
    check_main = str(kind.check_main())
    defines = kind.check_defines(name)

    def program(target_board, sub, what, main_source, main_defines):
        prefix = f"{sub}/" if sub else ""
        target = f"{prefix}{what}{target_board.program_suffix}"
        runs_on = runners.check_program_parts(target_board) if what == "check" else {}
        tasks.append(Task("program", [target], {"sources": [code, *weights, main_source, *runs_on.get("sources", [])]},
                          role=f"{prefix}{what}",
                          options={"board": target_board.ref, "include": ["gen"], "objdir": f"{prefix}obj",
                                   "defines": {main_source: main_defines}, "header": header,
                                   "opt": opt if target_board is board else None, "ldscript": runs_on.get("ldscript"),
                                   "model": name, "hint": codegen.too_big_hint(kinds.resolve_shape(kind, shape))}))
        return target

    check = program(board, None, "check", check_main, defines)
    nodes["check"] = check
    firmware = program(board, None, "firmware", main, []) if main and purpose == "build" else None
    nodes["firmware"] = firmware

    runs, extra_runs = {}, {}
    runner = board.runner
    on_host = runner is not None and getattr(runner, "RUNS_ON_HOST", False)
    if purpose == "build" and not on_host:
        host = boards.load_board("host")
        host_check = program(host, "host", "check", check_main, defines)
        runs["host"] = _run_task(tasks, host, host_check, None, entries[0], inputs)
    if runner is not None:
        harness = None
        if getattr(runner, "NEEDS_HARNESS", False):
            harness = f"{HARNESS_DIR}/{runner.__name__.rsplit('.', 1)[-1]}_run"
            tasks.append(Task("harness", [harness], options={"board": board.ref}, role="harness"))
        runs[board.run_label()] = _run_task(tasks, board, check, harness, entries[0], inputs)
        if purpose == "build" and board.measures_cycles():
            extra_runs = {entry: _run_task(tasks, board, check, harness, entry, inputs, suffix=f"_{entry}")
                          for entry in entries[1:]}
    elif purpose == "check":
        raise NNBuildError(f"board '{board.name}' has no simulator nnbuild can run; check on the host or on a "
                           "board with one")
    labels = sorted(runs)
    tasks.append(Task("compare", ["semantic.json"], {"reference": inputs, "runs": {k: runs[k] for k in labels}},
                      options={"tolerance": tolerance}, role="semantic"))
    nodes.update(runs={k: runs[k] for k in labels}, semantic="semantic.json")
    if purpose == "check":
        return Plan(tasks, name, board, nodes, entries)

    image = firmware or check
    tasks.append(Task("size", ["size.json"], {"elf": image, "trace": trace, "flowfacts": flowfacts}, role="size",
                      options={"board": board.ref,
                               # the first entry that can be bounded counts: main, else the last entry
                               # (a Gravity program's train, which runs activate's program too)
                               "entry": (["main"] if firmware else []) + entries[::-1],
                               # a precision=auto candidate that does not fit is a row of the table, not a stop
                               "record_errors": record_wcet_errors}))
    for task in tasks:  # the memory gate first: nothing runs on a simulator of a board the image does not fit
        if task.step == "run" and task.options["board"] == board.ref and not on_host:
            task.after.append("size.json")
    target_run = runs.get(board.run_label()) if runner else None
    wcet_json, entry_bounds = None, {}
    from nnbuild import wcet as analyzers
    if wcet != "skip" and not analyzers.unavailable_reason(board, path):
        wcet_json = "wcet.json"
        tasks.append(Task("wcet", [wcet_json], {"elf": check, "flowfacts": flowfacts}, role="wcet",
                          options={"board": board.ref, "entry": entries[0],
                                   "record_errors": record_wcet_errors}))
        for entry in entries[1:]:   # every other entry: its own bound, held to its own measured runs
            entry_bounds[entry] = f"wcet_{entry}.json"
            tasks.append(Task("wcet", [entry_bounds[entry]], {"elf": check, "flowfacts": flowfacts},
                              role=f"wcet_{entry}", options={"board": board.ref, "entry": entry,
                                                             "record_errors": record_wcet_errors}))
    evidence = {**model_evidence(model), **{f"generated:{Path(f).name}": f for f in gen}, "elf:check": check,
                **({"elf:firmware": firmware} if firmware else {})}
    tasks.append(Task("report", ["report.json", "report.html"],
                      {"semantic": "semantic.json", "size": "size.json", "trace": trace, "run": target_run,
                       "wcet": wcet_json, "entry_wcet": entry_bounds or None,
                       "entry_runs": {e: r for e, r in extra_runs.items() if e in entry_bounds} or None,
                       "evidence": evidence, "data": data},
                      options={"model": name, "board": board.ref, "precision": precision, "shape": shape,
                               "opt": opt, "deadline": deadline, "deadline_origin": deadline_origin,
                               "seed": None if data else seed, "count": count,
                               "input_range": input_range}, role="report"))
    nodes.update(size="size.json", wcet=wcet_json, report="report.json")
    if purpose == "build":
        tasks.append(Task("gate", ["gate.json"], {"report": "report.json"}, role="gate",
                          options={"interface": interface}))
        nodes["gate"] = "gate.json"
    return Plan(tasks, name, board, nodes, entries)


def model_evidence(model):
    """{role: absolute path} of the model's own files for the report's hashes: the file, or every
    file of a model folder (NNEF: graph.nnef and its .dat tensors)."""
    path = Path(str(model)).resolve()
    if path.is_dir():
        return {f"model:{p.relative_to(path).as_posix()}": str(p) for p in sorted(path.rglob("*"))
                if p.is_file() and not p.name.startswith(".")}
    return {"model": str(path)} if path.is_file() else {}


def multiitem_plan(*, name, model, board, shape=kinds.DEFAULT_SHAPE, precision=kinds.DEFAULT_PRECISION,
                   sync="flags", runs=1000, max_delay_us=200, sanitize=True, deadline=None, tolerance=1e-4,
                   count=8, seed=1, data=None, purpose="build", items=None, item_map=None) -> Plan:
    """Every task of a multi-item system's build: with `items` (N) or `item_map` (a JSON map file)
    the single-graph `model` split first into split/<name>.nnef (a new precision, tolerance or
    deadline keeps the split); its checks, each in its own directory (the host: threads with random
    start delays, the timing runs without, ThreadSanitizer; a board: the static schedule run on its
    simulator and bounded), the report, the gate. A new deadline or tolerance re-runs report and
    gate only; a new sync or run count, the host's checks. purpose "check" (`nnbuild check`): the
    target's one check on the inputs of `data`, nothing else."""
    board = boards.load_board(board)
    kind = kinds.get("multiitem")
    shape = kinds.resolve_shape(kind, shape)
    tasks, split = [], None
    if items is not None or item_map is not None:
        folder = kind.split_folder(model)
        split = f"{folder}/split.json"
        tasks.append(Task("multiitem_split", [f"{folder}/graph.nnef", split], {"model": model}, role="split",
                          options={"target": board.ref, "shape": shape, "items": items,
                                   "item_map": str(Path(item_map).resolve()) if item_map else None}))
        model = f"{folder}/graph.nnef"
    common = {"target": board.ref, "shape": shape, "precision": precision, "count": count, "seed": seed}
    checks = {label: dict(common, **options) for label, options in kind.check_options(
        board.name, sync=sync, runs=runs, max_delay_us=max_delay_us, sanitize=sanitize, purpose=purpose).items()}
    tasks += [Task("multiitem_check", [f"{label}.json"], {"model": model, "data": data}, options=options, role=label)
              for label, options in checks.items()]
    if purpose == "check":
        return Plan(tasks, name, board, {"checks": {label: f"{label}.json" for label in checks}}, [f"{name}_infer"])
    tasks.append(Task("multiitem_report", ["report.json", "report.html"],
                      {"model": model, "checks": {label: f"{label}.json" for label in checks}, "split": split},
                      role="report",
                      options={"target": board.ref, "shape": shape, "precision": precision, "sync": sync,
                               "deadline": deadline, "tolerance": tolerance}))
    tasks.append(Task("multiitem_gate", ["gate.json"], {"report": "report.json"}, role="gate"))
    return Plan(tasks, name, board, {"checks": {label: f"{label}.json" for label in checks}, "split": split,
                                     "report": "report.json", "gate": "gate.json"}, [f"{name}_infer"])


def reference_task(model, output, *, data=None, count=32, seed=1, input_range=(-1.0, 1.0), environment=None):
    """The check inputs and the float64 reference's outputs for them: one per model and options,
    whatever the precision (precision=auto's candidates share it)."""
    return Task("reference", [output], {"model": model, "data": data}, role="inputs",
                options={"count": count, "seed": seed, "input_range": input_range, "environment": environment})


def auto_candidates(model, board, *, target=None, shape=kinds.DEFAULT_SHAPE, environment=None, tolerance=1e-4,
                    tolerances=None):
    """precision=auto: {precision: the tolerance it is judged by} for every precision the model's
    kind, the shape (for this model, when the shape decides from it) and the board allow, each with
    its own tolerance where `tolerances` declares one; one line when there is none (`target`: the
    board as the user named it)."""
    kind = kinds.of_file(str(model))
    loaded = None
    if hasattr(codegen.shape_module(kinds.resolve_shape(kind, shape)), "choose"):
        loaded, _ = kind.load(str(model), None, environment)
    candidates = kinds.precision_candidates(kind, shape, board, loaded)
    if not candidates:
        raise NNBuildError(f"precision=auto: no precision of {kind.NAME} models can be generated in shape {shape} "
                           f"for {target or board.name}")
    return {p: options.tolerance_of(p, tolerance, tolerances) for p in candidates}


def _run_task(tasks, board, program, harness, entry, inputs="inputs.npz", suffix=""):
    label = board.run_label()
    target = f"run_{label}{suffix}.npz"
    sources = {"program": program, "inputs": inputs}
    if harness:
        sources["harness"] = harness
    tasks.append(Task("run", [target], sources, role=f"run_{label}{suffix}",
                      options={"board": board.ref, "entry": entry if board.measures_cycles() else None}))
    return target


def firmware_plan(*, firmware, stem, board, models, path=None, images=(".hex", ".bin"), interface=None) -> Plan:
    """The checks of a user's linked firmware holding one or more models: its images (.hex, .bin by
    the board's objcopy), and per model the memory report and gate over the image (stack from
    `main`), the WCET bound of the model's inference function in the image, a report joining them
    with the model's semantic check and target run, and the model's gates.

    `firmware`: the linked image (a path, or a build tool's expression for it); `stem`: the images'
    file stem; `models`: (model plan, its directory) pairs. Paths of the result are relative to the
    firmware's directory.

    The images are the release: they come after every gate (Task.after), and a failing gate removes
    them (the gate step's `discard`), so a .hex never sits beside a broken gate. A model built with
    wcet="skip" (no WCET task in its plan) is not bounded in the image either."""
    board = boards.load_board(board)
    image_files = [f"{stem}{suffix}" for suffix in images]
    tasks = []
    nodes = {f"image{suffix}": f"{stem}{suffix}" for suffix in images}
    from nnbuild import wcet
    analyzable = not wcet.unavailable_reason(board, path)
    entries = ["main"] + [e for mp, _ in models for e in mp.entries[::-1]]
    gates, reports = {}, {}
    for mp, mdir in models:
        if mp.board.name != board.name:
            raise NNBuildError(f"model '{mp.name}' is built for '{mp.board.name}', the firmware for '{board.name}'")

        def at(rel, mdir=mdir):
            return None if rel is None else (rel if os.path.isabs(str(rel)) else os.path.join(str(mdir), rel))
        flowfacts, trace = mp.nodes["generated_roles"]["flowfacts"], mp.nodes["generated_roles"]["trace"]
        model_entries = mp.entries
        sub = f"{stem}.checks/{mp.name}"
        tasks.append(Task("size", [f"{sub}/size.json"], {"elf": firmware, "trace": at(trace), "flowfacts": at(flowfacts)},
                          options={"board": board.ref, "entry": entries}, role=f"{mp.name}/size"))
        wcet_json, entry_bounds = None, {}
        if analyzable and mp.nodes.get("wcet"):
            wcet_json = f"{sub}/wcet.json"
            for entry in model_entries:
                target = wcet_json if entry == model_entries[0] else f"{sub}/wcet_{entry}.json"
                tasks.append(Task("wcet", [target], {"elf": firmware, "flowfacts": at(flowfacts)},
                                  role=f"{mp.name}/wcet" + ("" if target == wcet_json else f"_{entry}"),
                                  options={"board": board.ref, "entry": entry, "record_errors": False}))
                if target != wcet_json:
                    entry_bounds[entry] = target
        model_report = next(t for t in mp.tasks if t.step == "report")
        entry_runs = {e: at(r) for e, r in (model_report.sources.get("entry_runs") or {}).items() if e in entry_bounds}
        tasks.append(Task("report", [f"{sub}/report.json", f"{sub}/report.html"],
                          {"semantic": at(mp.nodes["semantic"]), "size": f"{sub}/size.json", "trace": at(trace),
                           "run": at(model_report.sources.get("run")), "wcet": wcet_json,
                           "entry_wcet": entry_bounds or None, "entry_runs": entry_runs or None,
                           "evidence": {**{k: at(v) for k, v in (model_report.sources.get("evidence") or {}).items()
                                           if not k.startswith("elf:")}, "elf:firmware": firmware},
                           "data": at(model_report.sources.get("data"))},
                          options=dict(model_report.options), role=f"{mp.name}/report"))
        tasks.append(Task("gate", [f"{sub}/gate.json"], {"report": f"{sub}/report.json"}, role=f"{mp.name}/gate",
                          options={"interface": interface, "discard": image_files}))
        reports[mp.name], gates[mp.name] = f"{sub}/report.json", f"{sub}/gate.json"
    tasks += [Task("image", [f"{stem}{suffix}"], {"elf": firmware}, options={"board": board.ref},
                   role=f"image{suffix}", after=list(gates.values())) for suffix in images]
    nodes.update(reports=reports, gates=gates)
    return Plan(tasks, stem, board, nodes)


def is_policy_flag(flag):
    """A compile flag of the board that is policy for the generated code (language standard,
    warnings, -Werror, -pedantic), not a property of the target: a user's own sources compiled for
    the board get the board's other flags only, with the user's own flags after them."""
    return (flag.startswith(("-W", "-pedantic", "-std=")) and not flag.startswith(("-Wl,", "-Wa,", "-Wp,")))


def user_compile_flags(board, opt=None):
    """The board's compile flags for a user's own sources: the target's (-mmcu, -DF_CPU, ...) and
    the optimisation level, without the generated code's warning policy."""
    board = boards.load_board(board)
    return [f for f in board.compiler.compile_flags(board, opt) if not is_policy_flag(f)]


# --------------------------------------------------------------------------- outside SCons


def execute(the_plan: Plan, workdir, *, harness_dir=None, loaded=None):
    """Run every task of a plan in order in `workdir` (the same step functions SCons runs).

    `loaded` maps a model path to its (model, passes log) when the caller has loaded it already:
    the steps then take it instead of reading the file again."""
    loaded = loaded or {}
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    def where(path):
        if path is None:
            return None
        path = str(path)
        if path.startswith(HARNESS_DIR):
            base = Path(harness_dir) if harness_dir else workdir / "tools"
            return base / path[len(HARNESS_DIR) + 1:]
        return Path(path) if os.path.isabs(path) else workdir / path

    for task in the_plan.tasks:
        if task.step == "program":
            _build_program(task, where)
            continue
        step = steps.STEPS[task.step]
        kwargs = dict(task.options)
        for role, value in task.sources.items():
            if isinstance(value, dict):
                kwargs[role] = {k: str(where(v)) for k, v in value.items()}
            elif value is not None:
                kwargs[role] = str(where(value))
        if kwargs.get("discard"):
            kwargs["discard"] = [str(where(p)) for p in kwargs["discard"]]
        if task.sources.get("model") in loaded:
            kwargs["model"], log = loaded[task.sources["model"]]
            if task.step == "generate":
                kwargs["passes_log"] = log
        target_arg = next(a.dest for a in step.args if a.dest in ("output", "outdir"))
        kwargs[target_arg] = str(where(task.targets[0]).parent if target_arg == "outdir" else where(task.targets[0]))
        if task.step == "harness" and where(task.targets[0]).exists():
            continue
        step.function(**{k: v for k, v in kwargs.items() if v is not None})


def build_multiitem(model, outdir, **plan_args):
    """A multi-item system's whole build outside SCons (`nnbuild multiitem`): the tasks of
    multiitem_plan run in order in `outdir` by the same step functions SCons runs. An earlier
    gate.json goes first; a broken gate raises its one line after report.json is written.
    Returns the report."""
    outdir = Path(outdir)
    kinds.get("multiitem").discard_gate(outdir)
    the_plan = multiitem_plan(name="multiitem", model=str(Path(model).resolve()), **plan_args)
    execute(the_plan, outdir)
    return steps.read_json(outdir / the_plan.nodes["report"])


def _build_program(task, where):
    board = boards.load_board(task.options["board"])
    sources = [where(s) for s in task.sources["sources"]]
    defines = []
    for source, pairs in task.options["defines"].items():
        defines += [f"{k}={v}" for k, v in pairs]
    where(task.targets[0]).parent.mkdir(parents=True, exist_ok=True)   # a sub-board's folder (host/)
    board.compiler.build_executable(board, sources, where(task.targets[0]),
                                    include_dirs=[where(d) for d in task.options["include"]],
                                    defines=defines, opt=task.options["opt"], hint=task.options.get("hint", ""),
                                    **runners.script_option(task.options.get("ldscript")))


def check(model, data, *, target="host", name=None, shape=kinds.DEFAULT_SHAPE, precision=None,
          opt=None, input_range=None, tolerance=1e-4, environment=None, build_dir=None):
    """`nnbuild check`: the model's C built for `target`, run on the inputs of `data` (.npz x[, y]),
    compared with the float64 reference (and y). Returns the semantic record; raises on a broken
    tolerance. Without `build_dir` everything happens in a temporary directory, removed after."""
    import tempfile
    board = boards.load_board(target)
    kind = kinds.of_file(model)
    precision = kinds.default_precision(kind, precision)
    model_path = str(Path(model).resolve())
    if kind.NAME == "multiitem":
        return _check_multiitem(model_path, str(Path(data).resolve()), board, shape=shape, precision=precision,
                                tolerance=tolerance, build_dir=build_dir)
    loaded_model, log = kind.load(model, name, environment)
    name = loaded_model.name
    if input_range is None:
        input_range = _data_range(kind, loaded_model, data, precision)
    the_plan = plan(name=name, model=model_path, board=board, kind=kind, shape=shape,
                    precision=precision, opt=opt, tolerance=tolerance, input_range=input_range,
                    environment=environment, data=str(Path(data).resolve()), purpose="check")
    loaded = {model_path: (loaded_model, log)}
    if build_dir:
        results = _checked(the_plan, Path(build_dir), loaded)
    else:
        with tempfile.TemporaryDirectory(prefix="nnbuild-check-") as tmp:
            results = _checked(the_plan, Path(tmp), loaded)
    label = board.run_label()
    failure = kind.check_failure(results, label)
    if failure:
        raise NNBuildError(failure, path=model)
    return results


def _check_multiitem(model, data, board, *, shape, precision, tolerance, build_dir):
    """`nnbuild check` of a multi-item system: its one check on the board (the host: its items as
    threads, bit-equal to the unsplit model) on the data's inputs, against the unsplit model's
    float64 reference (and the data's y). Returns the check's record."""
    import tempfile
    the_plan = multiitem_plan(name="multiitem", model=model, board=board, shape=shape, precision=precision,
                              data=data, purpose="check")
    with tempfile.TemporaryDirectory(prefix="nnbuild-check-") as tmp:
        workdir = Path(build_dir or tmp)
        execute(the_plan, workdir)
        (label, record_file), = the_plan.nodes["checks"].items()
        record = steps.read_json(workdir / record_file)
    runs = f", {record['bit_equal_runs']}/{record['runs']} runs bit-equal to the unsplit model" \
        if "bit_equal_runs" in record else ""
    framework = f", max |C - y| = {record['vs_framework']:.3g}" if "vs_framework" in record else ""
    print(f"{record['model']} on {board.name}: {len(record['first_outputs'])} inputs{runs}{framework}, "
          f"max |C - reference| = {record['max_abs_error']:.3g}")
    worst = max(record["max_abs_error"], record.get("vs_framework", 0.0))
    if worst > tolerance:
        raise NNBuildError(f"max error {worst:.3g} > tolerance {tolerance:.3g}", path=model)
    return record


def _checked(the_plan, workdir, loaded):
    """Execute a check plan; print where it ran and the most cycles an inference took."""
    import contextlib
    import io

    import numpy as np
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            execute(the_plan, workdir, loaded=loaded)
    except BaseException:
        print(said.getvalue(), end="")
        raise
    results = steps.read_json(workdir / "semantic.json")
    described = set(kinds.get(results["kind"]).describe(results))
    for line in said.getvalue().splitlines():   # the compare step's lines: the line below says it once
        if line not in described:
            print(line)
    (label, run_file), = the_plan.nodes["runs"].items()
    with np.load(workdir / run_file) as run:
        cycles = f", max {int(np.max(run['cycles'])):,} cycles" if "cycles" in run.files and len(run["cycles"]) else ""
    shape = steps.read_json(workdir / the_plan.nodes["generated_roles"]["trace"]).get("shape", "")
    print(kinds.get(results["kind"]).check_line(results, the_plan.name, label, shape) + cycles)
    return results


def _data_range(kind, model, data, precision):
    """A fixed-point build needs a declared input range: without one, the data's own range."""
    import numpy as np

    from nnbuild.numerics import formats as quantize
    if not quantize.is_fixed(precision):
        return (-1.0, 1.0)
    x = kind.reference_arrays(model, 0, 0, (-1.0, 1.0), data)["x"]
    lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
    print(f"fixed point formats proven over the data's range [{lo:g}, {hi:g}] (give --range to set the model's "
          "declared range)")
    return (lo, hi) if lo < hi else (lo - 1.0, hi + 1.0)


# --------------------------------------------------------------------------- library conveniences


def load_board(name_or_path):
    """A board by name (toolchains/NAME.json) or by a path to its JSON file."""
    return boards.load_board(name_or_path)


def load_model(path, name=None, environment=None):
    """The model file through its kind's front-end (and passes): (model, passes log)."""
    return kinds.of_file(path).load(path, name, environment)


def generate(model, outdir, *, name=None, shape=kinds.DEFAULT_SHAPE, precision=None,
             storage="const", input_range=None, environment=None, passes_log=None):
    """The C of `model` (a file path, or a model from load_model) in outdir."""
    if isinstance(model, (str, os.PathLike)):
        model, passes_log = load_model(model, name, environment)
    kind = kinds.of_model(model)
    precision = kinds.default_precision(kind, precision)
    kinds.check(kind, shape, precision, None, model)
    return codegen.generate(model, outdir, shape=kinds.resolve_shape(kind, shape), precision=precision,
                            storage=storage, passes_log=list(passes_log or []), input_range=input_range)


def build_check_program(model, board, workdir, *, name=None, shape=kinds.DEFAULT_SHAPE,
                        precision=None, opt=None, input_range=None, environment=None,
                        passes_log=None):
    """Generate, compile and link the check program for `board` outside SCons: (program, harness).
    The generated files (with the flow facts) stay in workdir/gen; the harness is None unless the
    board's runner needs one (then the runner's cached default harness)."""
    board = boards.load_board(board)
    if isinstance(model, (str, os.PathLike)):
        model, passes_log = load_model(model, name, environment)
    kind = kinds.of_model(model)
    precision = kinds.default_precision(kind, precision)
    workdir = Path(workdir)
    files = steps.generate(model, workdir / "gen", shape=shape, precision=precision, passes_log=passes_log,
                           target=board, input_range=input_range)   # refuses v3 code the flash cannot hold
    runs_on = runners.check_program_parts(board)
    sources = [f for f in files if f.suffix == ".c"] + [kind.check_main(), *runs_on.get("sources", [])]
    program = board.compiler.build_executable(board, sources, workdir / f"check{board.program_suffix}",
                                              include_dirs=[workdir / "gen"], opt=opt,
                                              defines=[f"{k}={v}" for k, v in kind.check_defines(model.name)],
                                              **runners.script_option(runs_on.get("ldscript")))
    harness = None
    if board.runner is not None and getattr(board.runner, "NEEDS_HARNESS", False):
        harness = board.runner.default_harness()   # one per user and harness source, not per check
    return program, harness


def run_cases(board, program, inputs, n_out, *, entry=None, harness=None, kind="nn"):
    """Run a check program on the board's runner: (outputs decoded by the kind, cycles or None)."""
    board = boards.load_board(board)
    kind = kinds.get(kind)
    if board.runner is None:
        raise NNBuildError(f"board '{board.name}' has no simulator nnbuild can run")
    outputs, cycles = board.runner.run(board, program, inputs, n_out, io=kind.IO, entry=entry, harness=harness)
    return kind.decode(outputs, program), cycles


# --------------------------------------------------------------------------- CMake export

#: nnbuild's CMake module (nnbuild.cmake) and toolchain files, shipped in the package
CMAKE_DIR = Path(__file__).resolve().parent / "cmake"
#: plan() arguments a CMake model export takes (saved beside the export for nnbuild_add_firmware)
CMAKE_PLAN_ARGS = ("name", "model", "board", "shape", "precision", "opt", "tolerance", "count", "seed", "input_range",
                   "deadline", "deadline_origin", "environment", "data", "wcet")
#: where a deadline given to nnbuild_add_model comes from, in report.json's deadline_origin
CMAKE_DEADLINE_ORIGIN = "DEADLINE of nnbuild_add_model"
#: the interface name the gate step's hints speak (DEADLINE none, WCET skip)
CMAKE_INTERFACE = "cmake"


def cmake_dir():
    """The folder of nnbuild.cmake (CMAKE_MODULE_PATH) and the toolchain files."""
    return str(CMAKE_DIR)


#: static libraries archived without timestamps (ar D, ranlib -D), as SCons does: two build
#: folders give the same bytes (set in the scope of the CMakeLists calling nnbuild_add_model, whose
#: function includes this code: the archive rules apply to that directory's static libraries)
CMAKE_DETERMINISTIC_ARCHIVES = ('set(CMAKE_C_ARCHIVE_CREATE "<CMAKE_AR> qcD <TARGET> <LINK_FLAGS> <OBJECTS>" PARENT_SCOPE)\n'
                                'set(CMAKE_C_ARCHIVE_APPEND "<CMAKE_AR> qD <TARGET> <LINK_FLAGS> <OBJECTS>" PARENT_SCOPE)\n'
                                'set(CMAKE_C_ARCHIVE_FINISH "<CMAKE_RANLIB> -D <TARGET>" PARENT_SCOPE)\n')


def _cmake_path_map(board, have=()):
    """The compiler family's reproducibility flags (those not in `have`) with CMake's source and
    build folders mapped to '.' (quoted, the variables expanded by CMake)."""
    flags = board.compiler.reproducible_flags(("${CMAKE_SOURCE_DIR}", "${CMAKE_BINARY_DIR}"))
    return " ".join(f'"{f}"' for f in flags if f not in have)


def _cm(text):
    """One quoted CMake argument; generator expressions ($<...>) pass through."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return f'"{text}"'


def _code_files(step_name):
    base = Path(__file__).resolve().parent
    files = [base / f for f in ("cli.py", "steps.py", "names.py", "errors.py", "options.py", "pipeline.py")]
    subs = steps.STEPS[step_name].code if step_name in steps.STEPS else ()
    for sub in subs:
        files += [p for p in (base / sub).glob("**/*") if p.suffix in (".py", ".j2", ".c", ".h", ".json")]
    return sorted(str(p) for p in files)


def _speaks_cmake(the_plan):
    """The gate and select tasks' hints in CMake's syntax (DEADLINE none, WCET skip)."""
    for task in the_plan.tasks:
        if task.step in ("gate", "select") and any(a.dest == "interface" for a in steps.STEPS[task.step].args):
            task.options["interface"] = CMAKE_INTERFACE
    return the_plan


#: tasks of a model's plan that run as one `python -m nnbuild` process (STEP_SEPARATOR, cli.run_steps): the same
#: inputs (the generated C; the check programs) and the same reruns, one interpreter start-up instead
#: of several. The model's WCET, report and gate are one more (a firmware leaves them out of `all`).
CMAKE_MODEL_GROUPS = {"program": "programs", "size": "checks", "run": "checks", "compare": "checks",
                      "wcet": "analysis", "report": "analysis", "gate": "analysis", "select": "analysis"}


def _model_group(task):
    return CMAKE_MODEL_GROUPS.get(task.step)


def _firmware_group(task):
    """A firmware's checks of one model (memory, WCET, report, gate) in one process; its images in one."""
    return "images" if task.step == "image" else f"model:{task.role.split('/')[0]}"


def _cmake_commands(the_plan, build_dir, tools_dir, extra_depends=(), label_base=None, stale=None, group=_model_group):
    """add_custom_command()s running `python -m nnbuild <step>` for every task of a plan: the same
    step table and argument lists as the SCons actions (program tasks run the `program` step).

    Every command runs through ${NNBUILD_STEP_COMMAND} (nnbuild.cmake: the board folders of the
    cache in its environment), names the plan's board by its file (a board given by path works in
    every step), and first removes what `stale(task, targets)` lists (CMake arguments: the gate.json
    and release images the step's outputs would otherwise sit beside, stale until the gates rerun).
    Tasks of one `group(task)` key run in one command, one process (in dependency order, the first
    failure stopping it): its outputs are every task's, its dependencies those from outside."""
    build_dir = Path(build_dir)

    def where(path):
        path = str(path)
        if path.startswith(HARNESS_DIR):
            return str(Path(tools_dir) / path[len(HARNESS_DIR) + 1:])
        return path if os.path.isabs(path) or path.startswith("$<") else str(build_dir / path)

    board_file = str(Path(the_plan.board.path or boards.board_path(the_plan.board.name)).resolve())

    def by_file(value):   # the plan's board by name or reference (Board.ref: relative to configure's cwd)
        return board_file if value in (the_plan.board.name, getattr(the_plan.board, "ref", None)) else value

    commands, made = {}, {}   # group key (or the task) -> [one entry per task]
    for task in the_plan.tasks:
        depends = [board_file, *extra_depends]
        if task.step == "program":
            sources = [where(s) for s in task.sources["sources"]]
            defines = [f"{k}={v}" for pairs in task.options["defines"].values() for k, v in pairs]
            values = dict(sources=sources, board=task.options["board"], include=[where(d) for d in task.options["include"]],
                          define=defines, opt=task.options["opt"], ldscript=task.options.get("ldscript"),
                          output=where(task.targets[0]))
            depends += sources + [where(task.options["header"])] + ([task.options["ldscript"]]
                                                                     if task.options.get("ldscript") else [])
        else:
            values = dict(task.options)
            if values.get("discard"):
                values["discard"] = [where(p) for p in values["discard"]]
            for role, value in task.sources.items():
                if value is None:
                    continue
                if isinstance(value, dict):
                    values[role] = [f"{k}={where(v)}" for k, v in value.items()]
                    depends += [where(v) for v in value.values()]
                else:
                    values[role] = where(value)
                    depends.append(where(value))
                    if role == "model":
                        from nnbuild import frontends
                        depends += [str(p) for p in frontends.implicit_dependencies(str(value))]
            if task.options.get("environment"):
                depends.append(str(task.options["environment"]))
            arg = next(a.dest for a in steps.STEPS[task.step].args if a.dest in ("output", "outdir"))
            values[arg] = str(Path(where(task.targets[0])).parent) if arg == "outdir" else where(task.targets[0])
        for key in ("board", "target"):
            if key in values:
                values[key] = by_file(values[key])
        depends += [where(p) for p in task.after] + _code_files(task.step)
        argv = steps.arguments(task.step, **{k: v for k, v in values.items() if v is not None})
        targets = [where(t) for t in task.targets]
        label = steps.STEPS[task.step].label if task.step in steps.STEPS else "Building"
        removed = list(stale(task, targets)) if stale and task.step != "harness" else []
        entry = dict(targets=targets, argv=argv, depends=depends, removed=removed,
                     comment=f"{label} {os.path.relpath(targets[0], label_base or build_dir)}")
        key = None if task.step == "harness" else group(task)
        commands.setdefault(key if key is not None else id(task), []).append(entry)
        if task.step == "harness":
            commands[id(task)][0]["harness"] = True
        for t, path in zip(task.targets, targets):
            made[t] = path
    out = []
    for entries in commands.values():
        entries = _in_dependency_order(entries)
        targets = [t for e in entries for t in e["targets"]]
        depends = [d for e in entries for d in e["depends"] if d not in targets]
        removed = list(dict.fromkeys(r for e in entries for r in e["removed"]))
        argv = [word for i, e in enumerate(entries) for word in ([STEP_SEPARATOR] if i else []) + e["argv"]]
        command = (f"add_custom_command(OUTPUT {' '.join(map(_cm, targets))}\n"
                   + (f"  COMMAND \"${{CMAKE_COMMAND}}\" -E rm -f {' '.join(removed)}\n" if removed else "")
                   + f"  COMMAND ${{NNBUILD_STEP_COMMAND}} -m nnbuild {' '.join(map(_cm, argv))}\n"
                   f"  DEPENDS {' '.join(map(_cm, dict.fromkeys(depends)))}\n"
                   f"  COMMENT {_cm('[nnbuild] ' + '; '.join(e['comment'] for e in entries))}\n"
                   + ("  COMMAND_EXPAND_LISTS\n" if any("$<" in r for r in removed) else "")
                   + "  VERBATIM)\n")
        if entries[0].get("harness"):  # one harness per build tree, whichever model comes first
            guard = "nnbuild_tool_" + Path(targets[0]).name
            command = (f"if(NOT TARGET {guard})\n{command}add_custom_target({guard} DEPENDS {_cm(targets[0])})\n"
                       "endif()\n")
            made["harness"] = guard
        out.append(command)
    return "".join(out), made


#: between the steps of one `python -m nnbuild` command (nnbuild.cli runs them in order)
STEP_SEPARATOR = "--then"


def _in_dependency_order(entries):
    """The tasks of one command, each after those of the command whose outputs it reads (the memory
    report before the target's run); otherwise in the plan's order."""
    ordered, left = [], list(entries)
    while left:
        produced_later = {t for e in left for t in e["targets"]}
        ready = next((e for e in left if not (set(e["depends"]) & produced_later) - set(e["targets"])), left[0])
        ordered.append(ready)
        left.remove(ready)
    return ordered


def _model_stale(target, build_dir):
    """What a model's step removes before it runs: the model's gate.json; the model's report
    (report.json, report.html) unless the step writes or reads it (report, select, gate): a report
    of an earlier run never sits beside a failed step's outputs; and the release images and
    firmware checks of every firmware holding the model (nnbuild_add_firmware appends them to the
    target's NNBUILD_STALE property, read when the build files are generated), except by the
    model's own WCET, report and gate where a firmware's checks stand for them (CMAKE_FIRMWARE_CHECKS:
    the images do not wait for those, so `ninja <target>_checks` leaves the release alone)."""
    gate, reports = Path(build_dir) / "gate.json", [Path(build_dir) / "report.json", Path(build_dir) / "report.html"]
    firmware = f"$<TARGET_PROPERTY:{target},NNBUILD_STALE>"
    unless_redone = f"$<$<NOT:$<BOOL:$<TARGET_PROPERTY:{target},{CMAKE_FIRMWARE_CHECKS}>>>:{firmware}>"

    def stale(task, targets):
        own = [] if task.step == "gate" or str(reports[0]) in targets else reports
        return [*map(_cm, [gate, *own]), _cm(unless_redone if task.step in FIRMWARE_REDOES else firmware)]
    return stale


#: the steps of a model's own plan a firmware's checks over its linked image do again (as NNFirmware's)
FIRMWARE_REDOES = ("wcet", "report", "gate")


#: the model library's property nnbuild_add_firmware sets: the firmware's checks over the linked image
#: stand for the model's own WCET, report and gate, which leave `all` (as NNFirmware's, FIRMWARE_REDOES)
CMAKE_FIRMWARE_CHECKS = "NNBUILD_FIRMWARE_CHECKS"


def _library(target, board, roles, opt, gate, harnesses):
    """The generated C (`roles`: each generated file by its role, codegen.output_roles) as a static
    library built after the model's gate (`<target>_checks`, in `all`), or, once a firmware holds
    the model (CMAKE_FIRMWARE_CHECKS), built without it and `<target>_checks` left out of `all`:
    each analysis runs once per build, over the linked image."""
    flags = board.compiler.compile_flags(board, opt)
    board_file = Path(board.path or boards.board_path(board.name)).resolve()
    sources = [roles[r] for r in codegen.C_SOURCE_ROLES if r in roles]
    text = (f"set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS {_cm(board_file)})\n"
            f"add_library({target} STATIC {' '.join(map(_cm, sources))})\n"
            f"target_include_directories({target} PUBLIC {_cm(str(Path(roles['header']).parent))})\n"
            f"target_compile_options({target} PRIVATE {' '.join(map(_cm, flags))} {_cmake_path_map(board, flags)})\n"
            + CMAKE_DETERMINISTIC_ARCHIVES +
            f"target_link_libraries({target} INTERFACE {' '.join(map(_cm, board.compiler.libs(board)))})\n"
            f"add_custom_target({target}_checks ALL DEPENDS {_cm(gate)})\n"
            # the library waits for the model's own gate, unless a firmware redoes its analyses
            f"add_custom_target({target}_gated DEPENDS "
            f"{_cm(f'$<$<NOT:$<BOOL:$<TARGET_PROPERTY:{target},{CMAKE_FIRMWARE_CHECKS}>>>:{gate}>')})\n"
            f"add_dependencies({target} {target}_gated)\n")
    for guard in dict.fromkeys(harnesses):
        text += f"add_dependencies({target}_checks {guard})\n"
    return text


def cmake_model(target, build_dir, tools_dir, **plan_args):
    """CMake code for one model: its plan's commands, the generated C as a static library target
    `target` (the board's flags, -Werror included) and `<target>_checks` (built by `all`, and before
    the library) whose last output is the gate. precision="auto": cmake_auto_model."""
    plan_args = {k: v for k, v in plan_args.items() if v is not None}
    if plan_args.get("deadline") and not plan_args.get("deadline_origin"):
        plan_args["deadline_origin"] = CMAKE_DEADLINE_ORIGIN
    if plan_args.get("precision") == "auto":
        return cmake_auto_model(target, build_dir, tools_dir, **plan_args)
    board = boards.load_board(plan_args["board"])
    the_plan = _speaks_cmake(plan(kind=kinds.of_file(plan_args["model"]), path=os.environ.get("PATH"), **plan_args))
    text, made = _cmake_commands(the_plan, build_dir, tools_dir, label_base=Path(build_dir).parent,
                                 stale=_model_stale(target, build_dir))
    roles = {role: made[p] for role, p in the_plan.nodes["generated_roles"].items()}
    text += _library(target, board, roles, plan_args.get("opt"), made[the_plan.nodes["gate"]],
                     [made["harness"]] if "harness" in made else [])
    steps.save_json(Path(build_dir) / "plan.json", {"target": target, "args": plan_args})
    return text


def cmake_auto_model(target, build_dir, tools_dir, **plan_args):
    """precision=auto under CMake: every candidate (auto_candidates) as its own plan in
    candidates/<precision>/ (no gate: a candidate that breaks one is just not chosen), sharing one
    reference; the select step choosing by the rule of checks.select and copying the chosen
    candidate's C, semantic check and target runs to the fixed names of the model folder (gen/...,
    which the library compiles: its sources are known at configure time); the gate over the
    chosen report. TOLERANCE judges every candidate; without it each precision's documented
    default (options.DEFAULT_TOLERANCES)."""
    build_dir = Path(build_dir)
    board = boards.load_board(plan_args["board"])
    kind = kinds.of_file(plan_args["model"])
    shape = plan_args.get("shape", kinds.DEFAULT_SHAPE)
    tolerance = plan_args.get("tolerance")
    candidates = auto_candidates(plan_args["model"], board, target=plan_args["board"], shape=shape,
                                 environment=plan_args.get("environment"),
                                 tolerances=None if tolerance is not None else
                                 {p: options.default_tolerance(p)[0] for p in kind.PRECISIONS
                                  if _has_default_tolerance(p)},
                                 tolerance=tolerance if tolerance is not None else 1e-4)
    reference = reference_task(plan_args["model"], "inputs.npz", data=plan_args.get("data"),
                               count=plan_args.get("count", 32), seed=plan_args.get("seed", 1),
                               input_range=plan_args.get("input_range", (-1.0, 1.0)),
                               environment=plan_args.get("environment"))
    stale = _model_stale(target, build_dir)
    text, _ = _cmake_commands(Plan([reference], plan_args["name"], board), build_dir, tools_dir,
                              label_base=build_dir.parent, stale=stale)
    reports, harnesses, first = {}, [], None
    for precision, candidate_tolerance in candidates.items():
        args = dict(plan_args, precision=precision, tolerance=candidate_tolerance)
        candidate = plan(kind=kind, path=os.environ.get("PATH"), inputs=str(build_dir / "inputs.npz"),
                         record_wcet_errors=True, **args)
        candidate.tasks = [t for t in candidate.tasks if t.step != "gate"]
        folder = build_dir / "candidates" / precision
        code, made = _cmake_commands(candidate, folder, tools_dir, label_base=build_dir.parent, stale=stale)
        text += code
        harnesses += [made["harness"]] if "harness" in made else []
        reports[precision] = str(folder / candidate.nodes["report"])
        first = first or candidate
    report_task = next(t for t in first.tasks if t.step == "report")
    chosen_files = (list(first.nodes["generated"]) + [first.nodes["semantic"]]
                    + [r for r in (report_task.sources.get("run"), *(report_task.sources.get("entry_runs") or {}).values())
                       if r])
    # PRECISION=REPORT:FILE...: the select step copies the winner's files to the --install paths, in order
    specs = [":".join([report, *(str(Path(report).parent / f) for f in chosen_files)])
             for report in reports.values()]
    select = Task("select", ["report.json", "report.html", *chosen_files], role="report",
                  options={"candidates": [f"{p}={spec}" for p, spec in zip(reports, specs)],
                           "install": [str(build_dir / f) for f in chosen_files]},
                  after=[f for spec in specs for f in spec.split(":")])
    gate_task = Task("gate", ["gate.json"], {"report": "report.json"}, role="gate")
    final = _speaks_cmake(Plan([select, gate_task], plan_args["name"], board))
    code, made = _cmake_commands(final, build_dir, tools_dir, label_base=build_dir.parent, stale=stale)
    text += code
    roles = {role: str(build_dir / p) for role, p in first.nodes["generated_roles"].items()}
    text += _library(target, board, roles, plan_args.get("opt"), made["gate.json"], harnesses)
    # nnbuild_add_firmware checks the chosen C at the fixed names: any candidate's plan names them
    steps.save_json(build_dir / "plan.json", {"target": target, "auto": sorted(candidates),
                                              "args": dict(plan_args, precision=next(iter(candidates)),
                                                           tolerance=candidates[next(iter(candidates))])})
    return text


def _has_default_tolerance(precision):
    try:
        options.default_tolerance(precision)
    except NNBuildError:
        return False
    return True


def cmake_firmware(target, elf, build_dir, model_dirs):
    """CMake code for a user's executable `target` (linked image `elf`, a generator expression) with
    the models exported in `model_dirs`: per model memory, WCET and gates over the image, then its
    .hex/.bin, built by `all` through `<target>_nnbuild`.

    The images are the release: their commands depend on every gate (the models' and the image's);
    any step of the image's checks first removes them and its own gate.json (and, before the
    report, its report), the link removes them all (PRE_LINK), and each model's steps remove them
    through the model target's NNBUILD_STALE. A failed gate therefore leaves no .hex, no .bin and
    no gate.json, also after a rerun.

    Each analysis runs once per build, as under NNFirmware: the checks over the image stand for a
    model's own WCET, report and gate (over its check program), which leave `all`
    (CMAKE_FIRMWARE_CHECKS; `ninja <model>_checks` still builds them). A precision=auto model keeps
    its own: its candidates' analyses choose the C the image holds."""
    models, model_gates, targets_of, dirs_of, auto = [], [], {}, {}, set()
    for d in model_dirs:
        saved = steps.read_json(Path(d) / "plan.json")
        args = saved["args"]
        models.append((plan(kind=kinds.of_file(args["model"]), path=os.environ.get("PATH"), **args), d))
        targets_of[models[-1][0].name] = saved["target"]
        dirs_of[models[-1][0].name] = d
        if saved.get("auto"):   # its own gate (over the chosen candidate) stays in the build: the images wait for it
            auto.add(models[-1][0].name)
            model_gates.append(str(Path(d) / "gate.json"))
    board = models[0][0].board
    the_plan = _speaks_cmake(firmware_plan(firmware=elf, stem=target, board=board, models=models,
                                           path=os.environ.get("PATH")))
    build_dir = Path(build_dir)
    gates = [str(build_dir / g) for g in the_plan.nodes["gates"].values()]
    images = [str(build_dir / the_plan.nodes[k]) for k in sorted(the_plan.nodes) if k.startswith("image")]
    for task in the_plan.tasks:
        if task.step == "image":
            task.after = list(dict.fromkeys([*task.after, *gates, *model_gates]))
        if task.step == "report" and task.role.split("/")[0] in auto:   # chosen at build time (as NNFirmware)
            task.options["precision"] = "auto"

    def stale(task, targets):   # the images, and the model's checks of the image from the report on
        folder = Path(targets[0]).parent
        own = [folder / "gate.json"] + ([] if task.step in ("report", "gate") else
                                        [folder / "report.json", folder / "report.html"])
        name = task.role.split("/")[0]
        if task.step in ("report", "gate") and name in dirs_of and name not in auto:
            # the model's own gate and report (out of `all`, built on demand) of earlier options go too
            own += [Path(dirs_of[name]) / f for f in ("gate.json", "report.json", "report.html")]
        return [] if task.step == "image" else list(map(_cm, dict.fromkeys(images + [str(p) for p in own])))

    text, made = _cmake_commands(the_plan, build_dir, build_dir, extra_depends=[elf], stale=stale,
                                 group=_firmware_group)
    outs = [made[the_plan.nodes[k]] for k in sorted(the_plan.nodes) if k.startswith("image")]
    outs += [made[v] for v in the_plan.nodes["gates"].values()]
    text = (f"set_target_properties({target} PROPERTIES SUFFIX {_cm(board.program_suffix)})\n"
            f"target_compile_options({target} PRIVATE {_cmake_path_map(board)})\n" + text)
    checks = [str(Path(g).with_name(f)) for g in gates for f in ("gate.json", "report.json", "report.html")]
    text += (f"add_custom_command(TARGET {target} PRE_LINK\n"
             f"  COMMAND \"${{CMAKE_COMMAND}}\" -E rm -f {' '.join(map(_cm, images + checks))}\n  VERBATIM)\n")
    for name, model_target in targets_of.items():
        checks = build_dir / f"{target}.checks" / name
        mine = images + [str(checks / f) for f in ("gate.json", "report.json", "report.html")]
        text += f"set_property(TARGET {model_target} APPEND PROPERTY NNBUILD_STALE {' '.join(map(_cm, mine))})\n"
        if name not in auto:   # a precision=auto model's candidates' analyses choose its precision: kept
            text += (f"set_property(TARGET {model_target} PROPERTY {CMAKE_FIRMWARE_CHECKS} TRUE)\n"
                     f"set_property(TARGET {model_target}_checks PROPERTY EXCLUDE_FROM_ALL TRUE)\n")
    text += (f"add_custom_target({target}_nnbuild ALL DEPENDS {' '.join(map(_cm, outs))})\n"
             f"add_dependencies({target}_nnbuild {target})\n")
    return text


def cmake_board(board):
    """CMake toolchain settings of a board: compiler, target flags (no optimisation, no warning
    policy: the user's CMAKE_C_FLAGS and build type decide those), link flags, program suffix."""
    board = boards.load_board(board)
    target_flags = [f for f in board.get("cflags", []) + board.clock_flags() if not is_policy_flag(f)]
    lines = [f"set(CMAKE_C_COMPILER {_cm(board['cc'])})",
             f"set(CMAKE_C_FLAGS_INIT {_cm(' '.join(target_flags))})",
             f"set(CMAKE_EXE_LINKER_FLAGS_INIT {_cm(' '.join(board.get('ldflags', [])))})",
             f"set(CMAKE_EXECUTABLE_SUFFIX {_cm(board.program_suffix)})",
             f"set(NNBUILD_BOARD_FILE {_cm(Path(board.path or boards.board_path(board.name)).resolve())})"]
    return "\n".join(lines) + "\n"


def _seed(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        raise NNBuildError(f"'{text}' is not an integer") from None


def _shape(text):
    if text not in codegen.SHAPES:
        import difflib
        near = difflib.get_close_matches(text, sorted(codegen.SHAPES), n=1)
        raise NNBuildError(f"'{text}' is not one of {', '.join(sorted(codegen.SHAPES))}"
                           + (f" (did you mean {near[0]}?)" if near else ""))
    return text


def cmake_model_values(args):
    """nnbuild_add_model's keywords as plan() arguments, each checked by the parser every interface
    uses (options.*); one NNBuildError line, led by the keyword, for the first bad value."""
    from nnbuild.checks import deadline as deadlines

    def parsed(keyword, parse, text):
        if text is None:
            return None
        try:
            return parse(text)
        except NNBuildError as error:
            raise NNBuildError(f"{keyword}: {error}") from None

    def wcet_mode(text):
        if text not in deadlines.WCET_MODES:
            raise NNBuildError(f"'{text}' is not one of {', '.join(deadlines.WCET_MODES)}")
        return text

    def deadline(text):
        return deadlines.NO_DEADLINE if text.strip().lower() == deadlines.NO_DEADLINE else \
            f"{options.deadline_ms(text)!r}ms"

    model = str(Path(args.model).resolve())
    board = parsed("BOARD", boards.load_board, args.board)
    wcet = parsed("WCET", wcet_mode, args.wcet) or "auto"
    spec, origin = deadlines.deadline_spec(parsed("DEADLINE", deadline, args.deadline), board, None, wcet)
    values = dict(name=parsed("NAME", options.model_name, args.name), model=model, board=str(board.path.resolve()),
                  shape=parsed("SHAPE", _shape, args.shape),
                  precision=parsed("PRECISION", lambda t: options.precision(t, auto=True), args.precision),
                  opt=parsed("OPT", options.opt, args.opt), tolerance=parsed("TOLERANCE", options.tolerance, args.tolerance),
                  count=parsed("COUNT", options.count, args.count), seed=parsed("SEED", _seed, args.seed),
                  input_range=parsed("RANGE", lambda t: list(options.input_range(t)), args.range),
                  deadline=spec, deadline_origin=CMAKE_DEADLINE_ORIGIN if origin == "command line" else origin,
                  environment=args.environment, data=args.data, wcet=wcet if wcet != "auto" else None)
    if values["data"] and not Path(values["data"]).is_file():
        raise NNBuildError("DATA: check data file not found", path=values["data"])
    if values["name"] is None:
        values["name"] = kinds.of_file(model).load(model, None, args.environment)[0].name
    return values


def nearest_keyword(word, keywords):
    """The keyword `word` most likely meant (case aside), or None."""
    import difflib
    upper = {k.upper(): k for k in keywords}
    near = difflib.get_close_matches(str(word).upper(), list(upper), n=1, cutoff=0.6)
    return upper[near[0]] if near else None


def cmake_main(argv=None):
    """`python -m nnbuild.pipeline cmake-model|cmake-firmware|cmake-board|cmake-dir|cmake-nearest ...`:
    what nnbuild.cmake calls at configure time; one line and exit 2 on an error."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="nnbuild-cmake")
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("cmake-model")
    for flag in ("--target", "--build-dir", "--tools-dir", "--model", "--board", "-o"):
        m.add_argument(flag, required=True)
    for flag in ("--name", "--shape", "--precision", "--opt", "--tolerance", "--count", "--seed", "--range",
                 "--deadline", "--wcet", "--environment", "--data"):
        m.add_argument(flag, default=None)
    f = sub.add_parser("cmake-firmware")
    for flag in ("--target", "--elf", "--build-dir", "-o"):
        f.add_argument(flag, required=True)
    f.add_argument("--model-dir", action="append", required=True)
    b = sub.add_parser("cmake-board")
    b.add_argument("--board", required=True)
    sub.add_parser("cmake-dir")
    n = sub.add_parser("cmake-nearest")
    n.add_argument("word")
    n.add_argument("keywords", nargs="*")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.what == "cmake-dir":
            print(cmake_dir())
            return 0
        if args.what == "cmake-nearest":
            print(nearest_keyword(args.word, args.keywords) or "")
            return 0
        if args.what == "cmake-board":
            print(cmake_board(args.board), end="")
            return 0
        if args.what == "cmake-model":
            text = cmake_model(args.target, str(Path(args.build_dir).resolve()), str(Path(args.tools_dir).resolve()),
                               **cmake_model_values(args))
        else:
            text = cmake_firmware(args.target, args.elf, str(Path(args.build_dir).resolve()), args.model_dir)
        Path(args.o).parent.mkdir(parents=True, exist_ok=True)
        Path(args.o).write_text(text)
    except NNBuildError as error:
        where = {"cmake-model": "nnbuild_add_model", "cmake-firmware": "nnbuild_add_firmware"}.get(args.what)
        print(f"nnbuild: error: {where}({args.target}): {error}" if where else f"nnbuild: error: {error}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(cmake_main())
