"""SCons tool `nnbuild_tool`: builders, emitter, scanner and the NNFirmware pseudo-builder.

Thin by design: every step is a command-line action running `python -m nnbuild <step>`, so the
library holds the logic, actions stay parallel-safe, and each step's signature is its command line.
"""

import atexit
import os
import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Scanner
import SCons.Script

from nnbuild import codegen, frontends, wcet
from nnbuild.errors import NNBuildError

PACKAGE_DIR = Path(__file__).resolve().parent

STEP_LABELS = {
    "NNGEN": "Generating C",
    "NNREF": "Reference",
    "NNRUN": "Running",
    "NNCMP": "Semantic check",
    "NNSIZE": "Memory report",
    "NNREPORT": "Report",
    "NNWCET": "WCET analysis",
    "NNGATE": "Gates",
    "NNSELECT": "Choosing precision",
    "NNHARNESS": "Building harness",
    "CC": "Compiling",
    "LINK": "Linking",
}


def package_files(*subpackages):
    """Sorted sources of the given subpackages: a step reruns when the code behind it changes."""
    files = []
    for sub in subpackages:
        base = PACKAGE_DIR / sub if sub else PACKAGE_DIR
        pattern = "**/*" if sub else "*.py"
        files += [p for p in base.glob(pattern) if p.suffix in (".py", ".j2", ".c", ".h")]
    return sorted(str(p) for p in files)


def scan_model(node, env, path):
    """Implicit dependencies of a model file (the Keras2C pair's weights.h5), never opening binaries."""
    try:
        return [env.File(p) for p in frontends.implicit_dependencies(str(node.srcnode().abspath))]
    except (NNBuildError, OSError, ValueError):
        return []


def emit_generated(target, source, env):
    """Every generated file, from the one list the generator itself checks (codegen.outputs)."""
    outdir = target[0].dir
    return [outdir.File(n) for n in codegen.outputs(env.subst("$NNGEN_NAME"))], source


def purge_failed_targets():
    """Delete every target of each failed action, so no failed output ever counts as up to date."""
    for failure in SCons.Script.GetBuildFailures():
        for node in failure.node.get_executor().get_all_targets():
            if node.exists() and not node.isdir():
                try:
                    os.unlink(node.get_abspath())
                except OSError:
                    pass


def comstr(env, key, verbose):
    return None if verbose else f"[nnbuild] {STEP_LABELS[key]:<17} $TARGET"


def generate(env, **kw):
    env.SetDefault(NNBUILD_PYTHON=sys.executable, NNBUILD_VERBOSE=False)
    # the user's PATH exactly: toolchains are found (or not) where the user's shell finds them
    env["ENV"]["PATH"] = os.environ.get("PATH", env["ENV"].get("PATH", ""))
    env.PrependENVPath("PYTHONPATH", str(PACKAGE_DIR.parent))
    env.SetDefault(NN="$( $NNBUILD_PYTHON $) -m nnbuild")
    verbose = bool(env["NNBUILD_VERBOSE"])
    model_scanner = SCons.Scanner.Scanner(function=scan_model, name="nnmodel")
    builders = {
        "NNGenerate": SCons.Builder.Builder(
            action=SCons.Action.Action(
                "$NN generate $SOURCE -o ${TARGET.dir} --name $NNGEN_NAME --shape $NNGEN_SHAPE "
                "--precision $NNGEN_PRECISION --storage $NNGEN_STORAGE --range=$NN_RANGE $NN_ENVIRONMENT",
                comstr(env, "NNGEN", verbose)),
            emitter=emit_generated, source_scanner=model_scanner),
        "NNReference": SCons.Builder.Builder(
            action=SCons.Action.Action(
                "$NN reference $SOURCE -o $TARGET --count $NN_COUNT --seed $NN_SEED --range=$NN_RANGE $NN_ENVIRONMENT "
                "$NN_CHECK_DATA",
                comstr(env, "NNREF", verbose)),
            source_scanner=model_scanner),
    }
    env.Append(BUILDERS=builders)
    env.AddMethod(nn_firmware, "NNFirmware")
    if not env.get("_NNBUILD_PURGE"):
        atexit.register(purge_failed_targets)
        env["_NNBUILD_PURGE"] = True


def exists(env):
    return True


def fail(message):
    raise SCons.Errors.StopError(f"nnbuild: {message}")


def cross_env(env, board, opt, verbose):
    """A compile/link environment for one board, from its data file (compiler family gcc)."""
    from nnbuild.compilers import family
    compilers = family(board)
    try:
        compilers.require_tool(board, path=env["ENV"]["PATH"])
    except NNBuildError as error:
        fail(str(error))
    xenv = env.Clone()
    xenv.Replace(CC=board["cc"], LINK=board["cc"], CCFLAGS=compilers.compile_flags(board, opt),
                 CFLAGS=[], LINKFLAGS=[f.replace("{output}", "$TARGET") for f in compilers.link_flags(board, opt)], LIBS=compilers.libs(board),
                 CPPPATH=[], CPPDEFINES=[], PROGSUFFIX=board.get("program_suffix", ""))
    if not verbose:
        xenv.Replace(CCCOMSTR=comstr(env, "CC", verbose), LINKCOMSTR=comstr(env, "LINK", verbose))
    return xenv


def nn_firmware(env, name, model, target, build_dir, *, precision="float32", **options):
    """The whole pipeline for one precision, or for precision=auto every candidate the board
    supports plus a select step that keeps the smallest WCET meeting tolerance and deadline."""
    if precision != "auto":
        return firmware_pipeline(env, name, model, target, build_dir, precision=precision, **options)
    from nnbuild import boards
    from nnbuild.checks import select
    try:
        board = boards.load_board(target)
    except NNBuildError as error:
        fail(str(error))
    runs = {p: firmware_pipeline(env, name, model, target, f"{build_dir}/candidates/{p}", precision=p,
                                 gated=False, record_wcet_errors=True, **options)
            for p in select.candidates(board)}
    bdir = env.Dir(build_dir)
    sources, specs = [], []
    for p, nodes in runs.items():
        spec = f"{p}=${{SOURCES[{len(sources)}]}}"
        sources.append(nodes["report"])
        if nodes["firmware"]:
            spec += f":${{SOURCES[{len(sources)}]}}"
            sources.append(nodes["firmware"])
        specs.append(spec)
    with_firmware = all(n["firmware"] for n in runs.values())
    suffix = ".elf" if board.get("simulator") != "native" else ""
    targets = [bdir.File("report.json")] + ([bdir.File(f"firmware{suffix}")] if with_firmware else [])
    chosen = step(env, targets, sources,
                  "$NN select " + " ".join(specs) + " -o ${TARGETS[0]}"
                  + (" --firmware-output ${TARGETS[1]}" if with_firmware else ""), "NNSELECT")
    env.Depends(chosen, package_files("checks") + [str(PACKAGE_DIR / "cli.py")])
    env.NoCache(chosen)
    return {"generated": [n["generated"] for n in runs.values()], "check": [n["check"] for n in runs.values()],
            "firmware": chosen[1] if with_firmware else None, "report": chosen[0], "gate": chosen[0],
            "candidates": runs, "board": board}


def firmware_pipeline(env, name, model, target, build_dir, *, main=None, shape="mlp", precision="float32",
                      opt=None, tolerance=1e-4, count=32, seed=1, input_range=(-1.0, 1.0),
                      deadline=None, deadline_origin=None, gated=True, record_wcet_errors=False,
                      environment=None, check_data=None):
    """model file -> C -> objects -> firmware + check program -> runs -> semantic gate -> report.

    Returns a dict of the main nodes (generated files, firmware, report) for aliases and tests.
    """
    from nnbuild import boards, pipeline, runners
    verbose = bool(env["NNBUILD_VERBOSE"])
    try:
        board = boards.load_board(target)
        host = boards.load_board("host")
        codegen.check_precision(precision, board)
    except NNBuildError as error:
        fail(str(error))
    bdir = env.Dir(build_dir)
    model_node = env.File(model)

    input_range_arg = f"{input_range[0]!r},{input_range[1]!r}"
    gen = env.NNGenerate(bdir.Dir("gen").File(f"{name}.c"), model_node, NNGEN_NAME=name, NNGEN_SHAPE=shape,
                         NNGEN_PRECISION=precision, NNGEN_STORAGE=board.get("weights_storage", "const"),
                         NN_RANGE=input_range_arg, NN_ENVIRONMENT=environment_flag(environment))
    env.Depends(gen, package_files("codegen", "frontends", "ir", "passes") + [str(PACKAGE_DIR / "cli.py")])
    if environment:
        env.Depends(gen, environment)
    header, code, _, weights_c = gen[:4]
    trace = gen[5]

    inputs = env.NNReference(bdir.File("inputs.npz"), model_node, NN_COUNT=count, NN_SEED=seed, NN_CHECK_DATA=check_data_flag(check_data),
                             NN_RANGE=input_range_arg, NN_ENVIRONMENT=environment_flag(environment))
    env.Depends(inputs, package_files("frontends", "ir", "passes", "checks"))
    if environment:
        env.Depends(inputs, environment)
    if check_data:
        env.Depends(inputs, check_data)

    def programs(penv, pboard, sub):
        """Objects and the check program (and the firmware when there is a main.c) for one board."""
        odir = bdir.Dir(sub) if sub else bdir
        xenv = cross_env(penv, pboard, opt if pboard is board else None, verbose)
        xenv.Append(CPPPATH=[header.dir])
        objects = [xenv.Object(odir.Dir("obj").File(f"{Path(str(s)).stem}.o"), s)[0] for s in (code, weights_c)]
        check_o = xenv.Object(odir.Dir("obj").File("check_main.o"), env.File(str(check_main_source(model))),
                              CPPDEFINES=check_defines(name, model))
        xenv.Depends(check_o, header)
        suffix = ".elf" if pboard.get("simulator") != "native" else ""
        check = xenv.Program(odir.File(f"check{suffix}"), check_o + objects)
        firmware = None
        if main:
            main_o = xenv.Object(odir.Dir("obj").File("main.o"), env.File(main))
            firmware = xenv.Program(odir.File(f"firmware{suffix}"), main_o + objects)
        return check[0], (firmware[0] if firmware else None)

    check, firmware = programs(env, board, None)
    runs = {}
    run_deps = package_files("runners") + [str(PACKAGE_DIR / "pipeline.py")]
    if board.get("simulator") == "native":
        runs[board["name"]] = step(env, bdir.File(f"run_{board['name']}.npz"), [check, inputs],
                                          f"$NN run ${{SOURCES[0]}} --board {board['name']} --inputs ${{SOURCES[1]}} -o $TARGET", "NNRUN")
    else:
        host_check, _ = programs(env, host, "host")
        runs["host"] = step(env, bdir.File("run_host.npz"), [host_check, inputs],
                                   "$NN run ${SOURCES[0]} --board host --inputs ${SOURCES[1]} -o $TARGET", "NNRUN")
        simulator = board.get("simulator")
        if simulator == "simavr":
            harness = step(env, env.Dir("#build/tools").File("simavr_run"), env.File(str(runners.SIMAVR_RUN_SRC)),
                           "$( $NNBUILD_PYTHON $) -m nnbuild.runners.simavr build-harness -o $TARGET", "NNHARNESS")
            runs["simavr"] = step(
                env, bdir.File("run_simavr.npz"), [check, inputs, harness],
                f"$NN run ${{SOURCES[0]}} --board {board['name']} --inputs ${{SOURCES[1]}} "
                f"--entry {name}_infer --harness ${{SOURCES[2]}} -o $TARGET", "NNRUN")
        elif simulator in pipeline.EMULATORS:
            runs[simulator] = step(env, bdir.File(f"run_{simulator}.npz"), [check, inputs],
                                   f"$NN run ${{SOURCES[0]}} --board {board['name']} --inputs ${{SOURCES[1]}} -o $TARGET",
                                   "NNRUN")
    for run in runs.values():
        env.Depends(run, run_deps)

    labels = sorted(runs)
    semantic = step(env, bdir.File("semantic.json"), [inputs] + [runs[k] for k in labels],
                           "$NN compare --reference ${SOURCES[0]} "
                           + " ".join(f"{k}=${{SOURCES[{i + 1}]}}" for i, k in enumerate(labels))
                           + f" --tolerance {tolerance!r} -o $TARGET", "NNCMP")
    image = firmware or check
    entries = ("--entry main " if firmware else "") + f"--entry {name}_infer"
    size = step(env, bdir.File("size.json"), [image, trace, gen[4]],
                f"$NN size ${{SOURCES[0]}} --board {board['name']} {entries} --trace ${{SOURCES[1]}} "
                "--flowfacts ${SOURCES[2]} -o $TARGET", "NNSIZE")
    env.Depends(size, package_files("wcet"))
    # the memory gate first: nothing runs on a simulator of a board the image does not fit
    for label, run in runs.items():
        if label != "host":
            env.Depends(run, size)
    target_run = runs.get(board.get("simulator")) or runs.get(board["name"])
    wcet_node = None
    if not wcet.unavailable_reason(board, env["ENV"]["PATH"]):
        wcet_node = step(env, bdir.File("wcet.json"), [check, gen[4]],
                                f"$NN wcet ${{SOURCES[0]}} --board {board['name']} --entry {name}_infer "
                                "--flowfacts ${SOURCES[1]} -o $TARGET"
                                + (" --record-errors" if record_wcet_errors else ""), "NNWCET")
        env.Depends(wcet_node, package_files("wcet"))
    report_sources = [semantic, size, trace, target_run, wcet_node]
    flags = {"run": 3, "wcet": 4}
    report = step(
        env,         bdir.File("report.json"), [s for s in report_sources if s is not None],
        f"$NN report -o $TARGET --model {name} --board {board['name']} --precision {precision} "
        f"--shape {shape} " + (f"--opt={opt} " if opt else "")
        + (f"--deadline {deadline} --deadline-origin '{deadline_origin}' " if deadline else "")
        + "--semantic ${SOURCES[0]} --size ${SOURCES[1]} --trace ${SOURCES[2]}"
        + "".join(f" --{key} ${{SOURCES[{sum(1 for x in report_sources[:pos] if x is not None)}]}}"
                  for key, pos in flags.items() if report_sources[pos] is not None), "NNREPORT")
    gate = step(env, bdir.File("gate.json"), report, "$NN gate $SOURCE -o $TARGET", "NNGATE") if gated else None
    env.Depends([n for n in (semantic, size, report, gate) if n is not None],
                package_files("checks") + [str(PACKAGE_DIR / "cli.py")])
    env.Depends([check] + ([firmware] if firmware else []) + [size, report],
                str(boards.board_path(board["name"])))
    for node in (semantic, size, report, gate):
        if node is not None:
            env.NoCache(node)
    return {"generated": gen, "inputs": inputs, "check": check, "firmware": firmware, "runs": runs,
            "semantic": semantic, "size": size, "wcet": wcet_node, "report": report, "gate": gate,
            "board": board}


def step(env, target, sources, command, key):
    """One pipeline step as a command action with its short progress line."""
    return env.Command(target, sources, SCons.Action.Action(command, comstr(env, key, bool(env["NNBUILD_VERBOSE"]))))


def check_defines(name, model=None):
    """Bind the generic check main to one model; sizes come from the generated header's macros,
    so nothing opens the model file while SCons reads the build description."""
    if model is not None and frontends.kind_of(str(model)) == "tpg":
        return [("NN_HEADER", '\\"%s.h\\"' % name), ("NN_INFER_FLAT", f"{name.upper()}_INFER_FLAT"),
                ("NN_IN", f"{name.upper()}_INPUTS")]
    names = codegen.api(name)
    return [("NN_HEADER", '\\"%s\\"' % names["header"]), ("NN_INFER", names["infer"]),
            ("NN_IN", names["inputs_macro"]), ("NN_OUT", names["outputs_macro"])]


def check_main_source(model):
    """The check firmware main of the model's kind (known from the file format, never opened):
    check_main.c for networks, tpg_check_main.c (observations in, action ids out) for TPGs."""
    from nnbuild import runners
    if frontends.kind_of(str(model)) == "tpg":
        from nnbuild.runners import tpg_run
        return tpg_run.TPG_CHECK_MAIN
    return runners.CHECK_MAIN


def environment_flag(environment):
    """The --environment option of the generate/reference steps (a TPG's environment description)."""
    return f"--environment {environment}" if environment else ""


def check_data_flag(path):
    """The --data option of the reference step: check inputs from recorded observations."""
    return f"--data {path}" if path else ""
