"""The pipeline's steps, described once: name, progress label, arguments (inputs, outputs,
options), the library function that does it, and the code its output depends on.

Three users read this table: the CLI makes one subcommand per step (`python -m nnbuild <step>`),
the SCons tool and CMake make each build action from a step's argument list (`arguments`, run
without a shell), and
`nnbuild check` (pipeline.execute) calls the same functions in a temporary directory. A new step
is one entry here and one function.

Every function writes its outputs atomically (temp file + rename), so a failed step leaves nothing
a later run could take for up to date.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Tuple

from nnbuild import boards, codegen, files, kinds, options
from nnbuild.checks.deadline import INTERFACES
from nnbuild.errors import NNBuildError


# --------------------------------------------------------------------------- atomic outputs


def save_npz(path, **arrays):
    """np.savez, atomically: a failed step leaves no output behind."""
    import numpy as np
    with files.atomic(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)


def save_json(path, obj):
    files.write_text(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def npz_kind(data):
    """The model kind an .npz of the pipeline was written for ("nn" when it does not say)."""
    return str(data["kind"]) if "kind" in getattr(data, "files", data) else "nn"


# --------------------------------------------------------------------------- the step functions


def generate(model, outdir, *, name=None, shape=kinds.DEFAULT_SHAPE, precision=None,
             storage=None, target="host", input_range=None, environment=None, passes_log=None, dsp=None):
    """The C of `model` (a file, or a model already loaded) in outdir: codegen.outputs(name); the
    board's DSP capability unless `dsp` is given."""
    board = boards.load_board(target)
    if isinstance(model, (str, os.PathLike)):
        kind = kinds.of_file(model)
        model, passes_log = kind.load(model, name, environment)
    kind = kinds.of_model(model)
    precision = kinds.default_precision(kind, precision)
    kinds.check(kind, shape, precision, board, model)
    shape = kinds.resolve_shape(kind, shape)
    written = codegen.generate(model, outdir, shape=shape, precision=precision,
                               storage=storage or board.get("weights_storage", "const"),
                               passes_log=list(passes_log or []), input_range=input_range,
                               dsp=dsp or board.get("dsp"), soft_float=bool(board.get("soft_float")))
    try:
        _refuse_unfit_unrolled_code(board, outdir, model.name, shape)
    except NNBuildError:
        for path in written:   # no partial outputs: the C that cannot fit goes with the refusal
            Path(path).unlink(missing_ok=True)
        raise
    return written


def _refuse_unfit_unrolled_code(board, outdir, name, shape):
    """Unrolled code (shape v3) that cannot fit the board's flash stops after generation (seconds),
    not at link after minutes of compiling: the compiler family's line, with the flash it needs at least."""
    trace = Path(outdir) / f"{name}.trace.json"
    terms = read_json(trace).get("distinct_terms") if trace.exists() else None
    line = terms and board.compiler.flash_floor_failure(board, output=Path(outdir) / f"{name}.c", model=name,
                                                        terms=terms, hint=codegen.too_big_hint(shape))
    if line:
        raise NNBuildError(line)


def reference(model, output, *, count=32, seed=1, input_range=(-1.0, 1.0), environment=None, data=None):
    """inputs.npz: the check inputs and the float64 reference's outputs for them (kind-specific)."""
    if isinstance(model, (str, os.PathLike)):
        model, _ = kinds.of_file(model).load(model, None, environment)
    save_npz(output, **kinds.of_model(model).reference_arrays(model, count, seed, input_range, data))


def run(program, output, *, board, inputs, entry=None, harness=None):
    """run_<label>.npz: the outputs (and cycles, and the stack high-water mark of each call where the
    runner measures it) of a check program on the board's runner."""
    import numpy as np
    board = boards.load_board(board)
    runner = board.runner
    if runner is None:
        raise NNBuildError(f"board '{board.name}' has no simulator nnbuild can run")
    with np.load(inputs) as data:
        kind, x, n_out = kinds.get(npz_kind(data)), data["x"], data["y"].reshape(len(data["y"]), -1).shape[1]
    stack = None
    if hasattr(runner, "run_with_stack"):   # a runner whose check program reports its stack high-water mark
        outputs, cycles, stack = runner.run_with_stack(board, program, x, n_out, io=kind.IO, entry=entry,
                                                       harness=harness)
    else:
        outputs, cycles = runner.run(board, program, x, n_out, io=kind.IO, entry=entry, harness=harness)
    arrays = {"outputs": kind.decode(outputs, program)}
    if cycles is not None:
        arrays["cycles"] = np.asarray(cycles, dtype=np.int64)
    if stack is not None:
        arrays["stack"] = np.asarray(stack, dtype=np.int64)
        arrays["stack_entry"] = np.array(entry or "")
    save_npz(output, **arrays)


def compare(reference, output, *, runs, tolerance=1e-4):
    """semantic.json: each run against the reference, measured the way the model's kind measures."""
    import numpy as np
    labelled = dict(spec.partition("=")[::2] for spec in runs) if not isinstance(runs, dict) else runs
    with np.load(reference) as data:
        kind = kinds.get(npz_kind(data))
        expected = {k: data[k] for k in data.files}
    outputs = {}
    for label, path in labelled.items():
        with np.load(path) as run_data:
            outputs[label] = run_data["outputs"]
    results = kind.compare(outputs, expected, tolerance)
    save_json(output, results)
    print("\n".join(kind.describe(results)))
    return results


def size(elf, output, *, board, entry=(), trace=None, flowfacts=None, record_errors=False):
    """size.json: flash and RAM (with the static stack bound where the board has an analyzer); the
    memory gate fails here, before any simulator run. `record_errors` (a precision=auto candidate):
    an image that does not fit is written with its figures instead, and the report's gates refuse it."""
    from nnbuild.checks import memory
    board = boards.load_board(board)
    stack = memory.stack_bound(board, elf, entry, flowfacts)
    use = memory.usage(board, board.compiler.section_sizes(board, elf), stack["bytes"] if stack else None)
    use["stack"] = stack
    if trace:
        memory.check_near_flash(board, elf, trace)
    over = memory.over_capacity(use, board["name"])
    if over and not record_errors:
        raise NNBuildError(over)
    if over:
        print(f"memory: {over} (a candidate that does not fit)")
    save_json(output, use)


def wcet(elf, output, *, board, entry, flowfacts, record_errors=False):
    """wcet.json: the board's analyzer's bound on one call of `entry`."""
    import dataclasses

    from nnbuild import wcet as analyzers
    board = boards.load_board(board)
    workdir = Path(output).parent / "wcet"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = analyzers.analyze(board, elf, entry, flowfacts, workdir)
    except NNBuildError as error:
        if not record_errors:
            raise
        save_json(output, {"error": str(error), "analyzer": board.get("wcet_tool")})
        print(f"WCET[{entry}]: no bound ({error})")
        return
    save_json(output, dataclasses.asdict(result))
    print(f"WCET[{result.entry}] = {result.cycles} cycles ({result.analyzer})")


def labelled(specs):
    """{label: path} from a dict, or from LABEL=PATH strings (how SCons passes them)."""
    if not specs:
        return {}
    return dict(specs) if isinstance(specs, dict) else dict(spec.partition("=")[::2] for spec in specs)


def report(output, *, model, board, semantic, size, trace, precision=kinds.DEFAULT_PRECISION,
           shape=kinds.DEFAULT_SHAPE, opt=None, run=None, wcet=None, deadline=None, deadline_origin=None,
           entry_wcet=None, entry_runs=None, evidence=None, seed=None, count=None, input_range=None, data=None):
    """report.json: every step's result in one record, and a short printed summary; report.html
    beside it draws the record for a person. `entry_wcet`/`entry_runs`: the bound and the measured
    run of each further entry point (a Gravity program's train), gated like the first. `evidence`:
    {role: file} whose sha256 the report records (model, generated C, ELF; the model's companion
    files are found here); seed, count, range and data: how the check inputs were made."""
    from nnbuild.checks import report as reports
    from nnbuild.checks import report_html
    board = boards.load_board(board)
    runs_by_entry = labelled(entry_runs)
    entries = {entry: (read_json(path), runs_by_entry.get(entry)) for entry, path in labelled(entry_wcet).items()}
    summary = reports.build_report(
        model=model, board=board, semantic=read_json(semantic), size=read_json(size),
        trace=read_json(trace), run=run, wcet=read_json(wcet) if wcet else None, precision=precision,
        shape=shape, opt=opt, deadline=deadline, deadline_origin=deadline_origin, entries=entries,
        files=evidence_files(board, labelled(evidence), data),
        inputs={"count": count, "seed": seed, "range": list(input_range) if input_range else None,
                "data": reports.shown_path(data) if data else None})
    write_report(output, summary, report_html.save)
    print(reports.summary_text(summary))


def write_report(output, record, save_html):
    """report.json and report.html, once the record follows the shipped schema (report.schema.json):
    evidence that does not follow its published layout is not written."""
    import jsonschema

    from nnbuild.checks import report as reports
    record = json.loads(json.dumps(record))
    try:
        reports.validate(record)
    except jsonschema.ValidationError as error:   # one line, with where in the record
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise NNBuildError(f"report.json does not follow {reports.SCHEMA_FILE.name} at {where}: "
                           f"{error.message}") from None
    save_html(Path(output).with_suffix(".html"), record)
    save_json(output, record)


def evidence_files(board, files, data=None):
    """file_records of a report: the model and its companion files (Keras2C's weights.h5, ...), the
    check data, the generated C, the ELF with the sha256 of its Intel HEX (a cross-built program)."""
    from nnbuild import frontends
    from nnbuild.checks import report as reports
    ordered = {}
    for role, path in files.items():
        ordered[role] = path
        if role == "model" and Path(path).is_file():
            for companion in frontends.implicit_dependencies(path):
                ordered[f"model companion:{Path(companion).name}"] = companion
    if data:
        ordered["check data"] = data
    ihex = (lambda elf: ihex_sha256(board, elf)) if board.program_suffix == ".elf" else None
    return reports.file_records(ordered, ihex)


def ihex_sha256(board, elf):
    """sha256 of the Intel HEX the image step writes for `elf` (the same objcopy call), or None."""
    import hashlib
    import tempfile
    try:
        with tempfile.TemporaryDirectory() as scratch:
            hexfile = Path(scratch) / "image.hex"
            image(elf, hexfile, board=board)
            return hashlib.sha256(hexfile.read_bytes()).hexdigest()
    except NNBuildError:
        return None


def gate(report, output, *, interface=None, discard=()):
    """gate.json, written only when every gate (tolerance, deadline, bound soundness) holds. A gate
    that fails removes any earlier gate.json and the release images in `discard` (.hex, .bin of a
    firmware), so nothing "passed" outlives the failure; its hints speak `interface`'s syntax."""
    from nnbuild.checks import deadline, gates
    from nnbuild.checks import select as selection
    Path(output).unlink(missing_ok=True)
    record = read_json(report)
    broken = gates.violations(record, interface)
    if broken:
        hint = selection.known_to_meet(record, Path(report)) if deadline.deadline_violation(record.get("wcet") or {
            "deadline_ms": None}) else None
        removed = [Path(p) for p in discard or () if Path(p).exists()]
        for path in removed:
            path.unlink()
        images = [Path(p).name for p in discard or ()]
        release = (f"; no release image ({', '.join(images)} {'removed' if removed else 'not written'})"
                   if images else "")
        raise NNBuildError("; ".join(broken) + (f"; {hint}" if hint else "") + release)
    save_json(output, {"passed": True, "wcet": record.get("wcet")})   # the report printed the summary


def select(candidates, output, *, firmware_output=None, install=(), interface=None):
    """precision=auto: the candidate with the smallest WCET that meets every gate. Each candidate is
    PRECISION=REPORT[:FILE...]: the winner's files are copied to --firmware-output (the first) and
    to each --install in order (NNModel: its library, header, flow facts, ... for NNFirmware)."""
    from nnbuild.checks import select as selection
    from nnbuild.checks.report import summary_text
    reports, firmwares = {}, {}
    destinations = ([firmware_output] if firmware_output else []) + list(install or ())
    for spec in candidates:
        precision, _, rest = spec.partition("=")
        path, *files = rest.split(":")
        reports[precision], firmwares[precision] = read_json(path), files
    winner, table, why = selection.choose(reports, interface)
    print("precision=auto candidates:")
    bounded = any(r["wcet_cycles"] is not None for r in table)
    for r in table:
        wcet_text = f"{r['wcet_ms']:9.3f} ms" if r["wcet_ms"] is not None else "   no bound"
        err = f"{r['max_abs_error']:.3g}" if r["max_abs_error"] is not None else "-"
        verdict = ("ok" if not r["violations"] and (r["wcet_cycles"] is not None or not bounded)
                   else "; ".join(r["violations"]) or "no WCET bound")
        print(f"  {r['precision']:<10} WCET {wcet_text}  max error {err:<9}  flash {r['flash_bytes']:>7,}  {verdict}")
    if winner is None:
        raise NNBuildError(selection.refusal(table))
    final = dict(reports[winner], precision_auto={"winner": winner, "why": why, "candidates": table},
                 auto={"chosen": winner, "why": why, "candidates": table})
    for source, destination in zip(firmwares[winner], destinations):
        selection.install_winner(source, destination)
    from nnbuild.checks import report_html
    write_report(output, final, report_html.save)
    print(f"winner: {why}")
    print(summary_text(final))


def harness(output, *, board):
    """The host program that drives the board's simulator (simavr: simavr_run)."""
    runner = boards.load_board(board).runner
    if runner is None or not getattr(runner, "NEEDS_HARNESS", False):
        raise NNBuildError(f"board '{board}' needs no simulator harness")
    runner.build_harness(output)


def program(sources, output, *, board, include=(), define=(), opt=None, ldscript=None):
    """A C program for the board (compile and link in one compiler call), written atomically: the
    check programs of a plan when no build tool compiles them (CMake, `nnbuild check`). `ldscript`:
    the linker script of the machine the board's runner runs it on (qemu-system-arm)."""
    board = boards.load_board(board)
    with files.atomic(output, executable=True) as tmp:
        board.compiler.build_executable(board, list(sources), tmp, include_dirs=list(include or ()),
                                        defines=list(define or ()), opt=opt,
                                        **({"ldscript": ldscript} if ldscript else {}))


#: objcopy output formats of the image step, by file suffix
IMAGE_FORMATS = {".hex": "ihex", ".bin": "binary"}


def objcopy_tool(board):
    """The board's objcopy: its 'objcopy' key, else the one beside its gcc-named compiler
    (avr-gcc -> avr-objcopy, gcc -> objcopy); one line when there is neither."""
    tool = board.get("objcopy")
    if not tool:
        cc = Path(board["cc"]).name
        if not cc.endswith("gcc"):
            raise NNBuildError(f"board '{board.name}' has no 'objcopy' tool to write firmware images")
        tool = str(Path(board["cc"]).with_name(cc[:-3] + "objcopy")) if "/" in board["cc"] else cc[:-3] + "objcopy"
    return tool


def image(elf, output, *, board):
    """firmware.hex / firmware.bin: the linked image in the loader's format (Intel HEX, raw binary),
    by the board's objcopy; the format follows the output's suffix."""
    import shutil
    import subprocess
    board = boards.load_board(board)
    output = Path(output)
    fmt = IMAGE_FORMATS.get(output.suffix)
    if fmt is None:
        raise NNBuildError(f"image '{output.name}': suffix must be one of {', '.join(IMAGE_FORMATS)}")
    tool = objcopy_tool(board)
    found = shutil.which(tool)
    if not found:
        raise NNBuildError(f"'{tool}' not found on PATH for target={board.name}")
    with files.atomic(output) as tmp:
        result = subprocess.run([found, "-O", fmt, str(elf), tmp], capture_output=True, text=True)
        if result.returncode != 0:
            raise NNBuildError(f"{tool} failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}", path=elf)


def multiitem_split(model, output, *, target="host", shape="v2", items=None, item_map=None):
    """A single-graph model split into a multi-item system (nnbuild.kinds.multiitem.split): `output`
    is the graph.nnef of its `.nnef` folder (split.json beside it); items=N weighted by the target's
    per-layer WCET bound, or by a JSON map layer -> item."""
    from nnbuild.kinds import multiitem as kind
    record = kind.split(model, Path(output).parent, target=target, items=items, item_map=item_map, shape=shape)
    print(kind.split_summary(record))


def multiitem_check(model, output, *, target="host", shape="v2", precision="float32", sync="flags", runs=1000,
                    max_delay_us=200, sanitize=False, count=8, seed=1, data=None):
    """One check of a multi-item system (nnbuild.kinds.multiitem.check), its record in `output`; its
    C and programs in the directory named after it beside it. The build's gate.json beside it goes
    first, so a failing check leaves no gate a previous build passed."""
    from nnbuild.kinds import multiitem as kind
    kind.discard_gate(Path(output).parent)
    record = kind.check(model, Path(output).with_suffix(""), target=target, shape=shape, precision=precision,
                        sync=sync, runs=runs, max_delay_us=max_delay_us, sanitize=sanitize, cases=count, seed=seed,
                        data=data)
    save_json(output, record)


def multiitem_report(model, output, *, checks, target="host", shape="v2", precision="float32", sync="flags",
                     deadline=None, tolerance=1e-4, split=None):
    """report.json and report.html of a multi-item build from its checks' records (LABEL=CHECK.json)
    and, for a split model, the split's record (split.json)."""
    from nnbuild.checks.deadline import read_spec
    from nnbuild.kinds import multiitem as kind
    deadline_ms, waiver = read_spec(deadline)
    report = kind.report(model, {k: read_json(v) for k, v in labelled(checks).items()}, output, target=target,
                         shape=shape, precision=precision, sync=sync, deadline_ms=deadline_ms, tolerance=tolerance,
                         split_record=read_json(split) if split else None)
    for line in kind.summary(report) + ([waiver] if waiver else []):
        print(line)


def multiitem_gate(report, output):
    """gate.json of a multi-item build, written only when every gate of its report holds."""
    from nnbuild.kinds import multiitem as kind
    kind.gate(report, output)


# --------------------------------------------------------------------------- the table


#: the code a multi-item check or build depends on
MULTIITEM_CODE = ("frontends", "ir", "numerics", "codegen", "checks", "kinds", "runners", "wcet", "compilers")


@dataclass(frozen=True)
class Arg:
    """One argument of a step: argparse flags and options; `dest` is the function's parameter."""

    flags: Tuple[str, ...]
    dest: str
    kwargs: dict = field(default_factory=dict)

    @property
    def positional(self):
        return not self.flags[0].startswith("-")


def _a(*flags, dest=None, **kwargs):
    dest = dest or flags[-1].lstrip("-").replace("-", "_")
    return Arg(flags, dest, kwargs)


OUT = _a("-o", "--output", required=True)
#: how a single-graph model is split into a multi-item system (multiitem_split, multiitem)
SPLIT_ARGS = (_a("--items", type=options.argparse_type(options.item_count), default=None,
                 help="split a single-graph model into N items first (per-layer WCET costs of the target)"),
              _a("--map", dest="item_map", default=None, help="split a single-graph model by this JSON map layer -> item"))
BOARD = _a("--board", required=True, help="board name (toolchains/NAME.json) or board file")
RANGE_HELP = "declared input range lo,hi (fixed point proves its formats over it)"


@dataclass(frozen=True)
class Step:
    name: str
    label: str
    function: Callable
    args: Tuple[Arg, ...]
    help: str
    #: nnbuild subpackages whose code the output depends on (SCons reruns the step when they change)
    code: Tuple[str, ...] = ()
    #: False: never taken from a shared CacheDir (machine-dependent verdicts and summaries)
    cacheable: bool = True


def _model_options(storage=True):
    opts = [_a("--name", type=options.argparse_type(options.model_name), help="C prefix of the API (default: from the model file)"),
            _a("--environment", help="environment description of a TPG (.dot): JSON file or shipped name"),
            _a("--shape", default=kinds.DEFAULT_SHAPE, choices=sorted(codegen.SHAPES),
               help="code shape (auto: mlp for MLPs, v2 for other networks, switch for TPGs)"),
            _a("--precision", type=options.argparse_type(options.precision), default=None,
               help=f"{', '.join(codegen.PRECISIONS)} or fixedW.F (default float32; int8 for a full-integer model)"),
            _a("--range", dest="input_range", default=None, type=options.argparse_type(options.input_range), help=RANGE_HELP)]
    if storage:
        opts += [_a("--storage", default=None, choices=codegen.STORAGES,
                    help="weights storage (default: the --target board's)"),
                 _a("--dsp", default=None, choices=codegen.DSP_CAPABILITIES,
                    help="DSP-extension kernels of the fixed-point mlp and v2 shapes (default: the --target board's)"),
                 _a("--target", default="host", help="board whose weights storage and precisions apply")]
    return tuple(opts)


STEPS = {s.name: s for s in (
    Step("generate", "Generating C", generate,
         (_a("model", help="the model file (see docs/formats.md)"),
          _a("-o", "--outdir", required=True, help="folder of the generated C, flow facts and trace")) + _model_options(),
         "write the C code of a model", code=("codegen", "numerics", "frontends", "ir", "passes", "kinds")),
    Step("reference", "Reference", reference,
         (_a("model"), OUT, _a("--count", type=options.argparse_type(options.count), default=32), _a("--seed", type=int, default=1),
          _a("--range", dest="input_range", type=options.argparse_type(options.input_range), default=(-1.0, 1.0), help=RANGE_HELP),
          _a("--environment", help="environment description of a TPG (.dot): JSON file or shipped name"),
          _a("--data", help="take the check inputs from this file (.npz x[, y]; TPG: also .u8.gz bytes)")),
         "check inputs and the float64 reference outputs for them (.npz)",
         code=("frontends", "ir", "passes", "checks", "kinds")),
    Step("harness", "Building harness", harness, (OUT, BOARD), "build the board's simulator harness",
         code=("runners",)),
    Step("run", "Running", run,
         (_a("program"), BOARD, _a("--inputs", required=True, help=".npz with x (and y)"),
          _a("--entry", help="inference function (cycle measurement)"), _a("--harness", help="simulator harness"), OUT),
         "run a check program on the board's simulator", code=("runners", "kinds")),
    Step("compare", "Semantic check", compare,
         (_a("--reference", required=True), _a("runs", nargs="+", metavar="LABEL=RUN.npz"),
          _a("--tolerance", type=options.argparse_type(options.tolerance), default=1e-4), OUT),
         "semantic gate: each run against the reference", code=("checks", "kinds"), cacheable=False),
    Step("size", "Memory report", size,
         (_a("elf"), BOARD, _a("--entry", action="append", default=[],
                               help="function whose stack bound counts in RAM (first that can be bounded wins)"),
          _a("--trace", help="trace.json of the generated code (flash placement check)"),
          _a("--flowfacts", help="flow facts of the generated code (indirect call targets for the stack bound)"),
          _a("--record-errors", action="store_true",
             help="write an image that does not fit instead of failing; its report's gates refuse it (precision=auto)"),
          OUT),
         "memory report and gate of a linked image", code=("checks", "wcet", "compilers"), cacheable=False),
    Step("wcet", "WCET analysis", wcet,
         (_a("elf"), BOARD, _a("--entry", required=True), _a("--flowfacts", required=True),
          _a("--record-errors", action="store_true",
             help="write the analyzer's error into the output instead of failing (precision=auto)"), OUT),
         "static WCET bound of the inference function", code=("wcet",)),
    Step("report", "Report", report,
         (OUT, _a("--model", required=True), BOARD, _a("--precision", default=kinds.DEFAULT_PRECISION),
          _a("--shape", default=kinds.DEFAULT_SHAPE), _a("--opt", default=None),
          _a("--semantic", required=True), _a("--size", required=True), _a("--trace", required=True),
          _a("--run", default=None, help="the target run (.npz with cycles)"),
          _a("--wcet", default=None, help="wcet.json of the WCET step"),
          _a("--entry-wcet", action="append", default=[], metavar="ENTRY=WCET.json",
             help="the bound of each further entry point (Gravity: train)"),
          _a("--entry-runs", action="append", default=[], metavar="ENTRY=RUN.npz",
             help="the target run measuring each further entry point"),
          _a("--deadline", default=None, help="deadline, e.g. 100ms"),
          _a("--deadline-origin", default=None, help="where the deadline came from"),
          _a("--evidence", action="append", default=[], metavar="ROLE=FILE",
             help="a file whose sha256 report.json records (model, generated C, ELF)"),
          _a("--seed", type=int, default=None, help="the check inputs' seed"),
          _a("--count", type=int, default=None, help="how many check inputs"),
          _a("--range", dest="input_range", type=options.argparse_type(options.input_range), default=None,
             help="the check inputs' range lo,hi"),
          _a("--data", default=None, help="the file the check inputs came from")),
         "merge the step results into report.json and print a summary", code=("checks", "compilers"),
         cacheable=False),
    Step("gate", "Gates", gate,
         (_a("report"), OUT, _a("--interface", default=None, choices=INTERFACES,
                                help="the front that runs the build: its syntax in the hints (waivers)"),
          _a("--discard", action="append", default=[], help="a release image to remove when a gate fails")),
         "fail when report.json shows a broken tolerance, a missed deadline or an unsound bound",
         code=("checks",), cacheable=False),
    Step("program", "Building program", program,
         (_a("sources", nargs="+"), BOARD, _a("--include", action="append", default=[], help="include directory"),
          _a("--define", action="append", default=[], help="NAME=VALUE for the compiler"),
          _a("--opt", default=None, help="optimisation flag (default: the board's)"),
          _a("--ldscript", default=None, help="linker script (the board runner's machine)"), OUT),
         "compile and link a C program for the board (check programs outside SCons)", code=("compilers",)),
    Step("image", "Writing image", image, (_a("elf"), BOARD, OUT),
         "the firmware as Intel HEX (.hex) or raw binary (.bin), by the board's objcopy"),
    Step("multiitem_split", "Multi-item split", multiitem_split,
         (_a("model"), _a("--target", default="host"), _a("--shape", default="v2"), *SPLIT_ARGS, OUT),
         "a single-graph model split into a multi-item system (.nnef folder, split.json): items=N by the "
         "target's per-layer WCET bound, or a map", code=MULTIITEM_CODE + ("passes",), cacheable=False),
    Step("multiitem_check", "Multi-item check", multiitem_check,
         (_a("model"), _a("--target", default="host"), _a("--shape", default="v2"), _a("--precision", default="float32"),
          _a("--sync", default="flags"), _a("--runs", type=int, default=1000),
          _a("--max-delay-us", dest="max_delay_us", type=int, default=200), _a("--sanitize", action="store_true"),
          _a("--count", type=int, default=8), _a("--seed", type=int, default=1),
          _a("--data", default=None, help=".npz whose inputs x (and outputs y) the check runs on"), OUT),
         "one check of a multi-item system: host threads (bit-equality, firing sequences, timed net) or the "
         "static schedule on a board (runs, WCET)", code=MULTIITEM_CODE, cacheable=False),
    Step("multiitem_report", "Multi-item report", multiitem_report,
         (_a("checks", nargs="+", metavar="LABEL=CHECK.json"), _a("--model", required=True),
          _a("--target", default="host"),
          _a("--shape", default="v2"), _a("--precision", default="float32"), _a("--sync", default="flags"),
          _a("--deadline", default=None, help="deadline, e.g. 100ms"),
          _a("--tolerance", type=options.argparse_type(options.tolerance), default=1e-4),
          _a("--split", default=None, help="split.json of a system split from a single-graph model"), OUT),
         "report.json and report.html of a multi-item build: Petri net, checks, bounds, deadline",
         code=("frontends", "ir", "checks", "kinds"), cacheable=False),
    Step("multiitem_gate", "Multi-item gate", multiitem_gate, (_a("report"), OUT),
         "gate.json of a multi-item build, only when every gate holds", code=("kinds",), cacheable=False),
    Step("select", "Choosing precision", select,
         (_a("candidates", nargs="+", metavar="PRECISION=REPORT.json[:FILE...]"), OUT,
          _a("--firmware-output", help="where to copy the winner's firmware"),
          _a("--install", action="append", default=[],
             help="where to copy the winner's next file (in the order of the candidates' files)"),
          _a("--interface", default=None, choices=INTERFACES,
             help="the front that runs the build: its syntax in the hints (waivers)")),
         "precision=auto: pick the candidate with the smallest qualifying WCET", code=("checks",), cacheable=False),
)}

#: options whose value may start with '-' (`--opt -O0`, `--range -1,1`): written `--flag=value`
DASH_VALUE_OPTIONS = ("--opt", "--range", "--tolerance", "--deadline")


def arguments(step_name, **values):
    """The argument list (after `python -m nnbuild`) that runs a step with these values, in the
    table's argument order, one list item per argument and no quoting: the SCons tool and CMake
    run it without a shell. None and False values are left out."""
    step = STEPS[step_name]
    unknown = set(values) - {a.dest for a in step.args}
    if unknown:
        raise ValueError(f"step {step_name} has no argument(s) {sorted(unknown)}")
    parts = [step.name]
    for arg in step.args:
        value = values.get(arg.dest)
        if value is None or value is False or value == []:
            continue
        if arg.positional:
            parts += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        elif value is True:
            parts.append(arg.flags[-1])
        elif arg.kwargs.get("action") == "append":
            for v in value:
                parts += _option(arg.flags[-1], str(v))
        else:
            text = ",".join(repr(float(v)) for v in value) if arg.dest == "input_range" else str(value)
            parts += _option(arg.flags[-1], text)
    return parts


def _option(flag, text):
    """`--flag value`, or `--flag=value` where the value may start with '-' (`--opt=-O0`)."""
    return [f"{flag}={text}"] if flag in DASH_VALUE_OPTIONS or text.startswith("-") else [flag, text]


def command(step_name, **values):
    """The step's command line as one shell-quoted string, for people to read (logs, docs); the
    build tools run `arguments` as a list."""
    import shlex
    return shlex.join(arguments(step_name, **values))
