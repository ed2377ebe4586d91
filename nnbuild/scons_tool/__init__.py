"""SCons tool `nnbuild_tool`: builders from the step table, the model scanner, and the pseudo-builders
that turn plans (nnbuild.pipeline.plan, firmware_plan) into build nodes:

- `env.NNModel(name, model, ...)`: a model's generated C as a static library for the board, with
  the check program, runs, semantic check, memory report, WCET, report and gates of its plan;
- `env.NNFirmware(target, sources, models=[...])`: the user's own sources (compiled with the user's
  flags plus the board's target flags) linked with the models' libraries into `.elf`, `.hex`,
  `.bin`, with memory, stack, WCET and gates per model over that linked image;
- `env.NNExample(name, model, target, build_dir, main=...)`: the repository's examples (also reached
  as NNFirmware with those arguments).

From any project: `Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()])`
or `toolpath=[PyPackageDir("nnbuild.scons_tool")]` (the tool file is nnbuild_tool.py beside this one).

Thin by design: every step is an action running `python -m nnbuild <step>` as an argument list,
without a shell (StepAction), so the library holds the logic, actions stay parallel-safe, no file
name is ever read by a shell, and each step's signature is its argument list. C programs are
compiled and linked by SCons itself, with the board's compiler and flags, through a spawn that
runs the argument list without a shell too (no_shell_spawn).
"""

import atexit
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Node
import SCons.Scanner
import SCons.Script
import SCons.Subst
import SCons.Util

from nnbuild import boards, codegen, frontends, kinds, names, options, pipeline, steps
from nnbuild.checks import deadline as deadlines
from nnbuild.errors import NNBuildError

PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: variables of the user's shell that the steps read (board directories); passed into env['ENV']
PASSED_ENV = tuple(getattr(boards, "ENV_VARS", ("NNBUILD_BOARDS", "NNBUILD_TOOLCHAINS")))


def toolpath():
    """The directory holding the `nnbuild_tool` SCons tool of this installed package."""
    return str(Path(__file__).resolve().parent)

#: progress labels: one per step of the table, and SCons' own compile and link
STEP_LABELS = {**{name: step.label for name, step in steps.STEPS.items()}, "CC": "Compiling", "LINK": "Linking",
               "AR": "Archiving"}
#: files every step's action depends on besides its own code
PIPELINE_FILES = [str(PACKAGE_DIR / f) for f in ("cli.py", "steps.py", "names.py", "errors.py", "options.py")]


def package_files(*subpackages):
    """Sorted sources of the given subpackages: a step reruns when the code behind it changes."""
    files = []
    for sub in subpackages:
        base = PACKAGE_DIR / sub
        files += [p for p in base.glob("**/*") if p.suffix in (".py", ".j2", ".c", ".h", ".json")]
    return sorted(str(p) for p in files)


def scan_model(node, env, path):
    """Implicit dependencies of a model file (the Keras2C pair's weights.h5), never opening binaries."""
    try:
        return [env.fs.File(p) for p in frontends.implicit_dependencies(str(node.srcnode().abspath))]
    except (NNBuildError, OSError, ValueError):
        return []


#: gate.json and firmware image nodes of this build: a failed build leaves none it did not make
RELEASE_NODES = []


def purge_failed_targets():
    """Delete every target of each failed action, so no failed output ever counts as up to date;
    and every gate.json and release image (.hex, .bin) the failed build did not reach (a sibling
    gate the stop left behind still said "passed" for the previous sources)."""
    failures = SCons.Script.GetBuildFailures()
    doomed = [node for failure in failures for node in failure.node.get_executor().get_all_targets()]
    if failures:
        done = (SCons.Node.executed, SCons.Node.up_to_date)
        doomed += [node for node in RELEASE_NODES if node.get_state() not in done]
    for node in doomed:
        if node.exists() and not node.isdir():
            try:
                os.unlink(node.get_abspath())
            except OSError:
                pass


def comstr(env, key, verbose):
    return None if verbose else f"[nnbuild] {STEP_LABELS[key]:<17} $TARGET"


# --------------------------------------------------------------------------- running without a shell

#: how a step's argument names one of its nodes; every other `$` of an argument is written `$$`
_NODE_REF = re.compile(r"\$\{(SOURCES|TARGETS)\[(\d+)\]\}|\$\{TARGET\.dir\}|\$TARGET(?!\w)|\$\$")


def literal(value):
    """A step option's value as a StepAction argument: its `$` doubled, so it is never read as a
    node reference (or by SCons' substitution)."""
    if isinstance(value, (list, tuple)):
        return type(value)(literal(v) for v in value)
    if isinstance(value, (str, os.PathLike)):
        return str(value).replace("$", "$$")
    return value


def resolve_argument(template, targets, sources, text):
    """One argument of a step: its node references replaced by `text(node)`, `$$` by `$`."""
    def one(match):
        whole, kind = match.group(0), match.group(1)
        if whole == "$$":
            return "$"
        if kind:
            return text((sources if kind == "SOURCES" else targets)[int(match.group(2))])
        return text(targets[0].dir if whole == "${TARGET.dir}" else targets[0])
    out, rest = [], 0
    for match in _NODE_REF.finditer(template):
        if "$" in template[rest:match.start()]:
            raise ValueError(f"step argument {template!r}: '$' outside a node reference")
        out += [template[rest:match.start()], one(match)]
        rest = match.end()
    if "$" in template[rest:]:
        raise ValueError(f"step argument {template!r}: '$' outside a node reference")
    return "".join(out + [template[rest:]])


def node_path(node):
    """A node as a program argument: its path from the top directory (never read as an option)."""
    path = str(node)
    return f".{os.sep}{path}" if path.startswith("-") else path


class StepAction(SCons.Action._ActionAction):
    """A step of the table run as `python -m nnbuild <step> ...` from the argument list in
    $NN_STEP_ARGV, by subprocess without a shell: no file name is ever read by `sh`. The signature
    is that list with each node as its name (Node.for_signature, the same for every checkout path),
    so changing an option reruns the step and CacheDir keys stay path-independent."""

    def __init__(self, cmdstr):
        super().__init__(cmdstr=cmdstr)

    def __str__(self):
        return "$NNBUILD_PYTHON -m nnbuild $NN_STEP_ARGV"

    @staticmethod
    def _nodes(target, source, executor):
        if executor:
            target, source = executor.get_all_targets(), executor.get_all_sources()
        return list(target), [s.rfile() if hasattr(s, "rfile") else s for s in source]

    def argv(self, target, source, env, executor=None):
        target, source = self._nodes(target, source, executor)
        return [env.subst("$NNBUILD_PYTHON"), "-m", "nnbuild",
                *(resolve_argument(a, target, source, node_path) for a in env["NN_STEP_ARGV"])]

    def get_presig(self, target, source, env, executor=None):
        target, source = self._nodes(target, source, executor)
        args = [resolve_argument(a, target, source, lambda n: n.for_signature()) for a in env["NN_STEP_ARGV"]]
        return "\0".join(["python -m nnbuild", *args])

    def get_implicit_deps(self, target, source, env, executor=None):
        if not env.get("IMPLICIT_COMMAND_DEPENDENCIES", True):
            return []
        python = env.subst("$NNBUILD_PYTHON")
        return [env.fs.File(python)] if os.path.isabs(python) else []

    def strfunction(self, target, source, env, executor=None, overrides=None):
        if self.cmdstr is None:
            return shlex.join(self.argv(target, source, env, executor))
        target, source = self._nodes(target, source, executor)
        return env.subst(self.cmdstr, SCons.Subst.SUBST_RAW, target, source)

    def execute(self, target, source, env, executor=None):
        argv = self.argv(target, source, env, executor)
        target, source = self._nodes(target, source, executor)
        status = run_step(argv, action_env(env, target, source), env.get("NNBUILD_STEP_SERVER", True))
        if status:
            return SCons.Errors.BuildError(errstr=f"Error {status}", status=status, action=self,
                                           command=shlex.join(argv))
        return 0


def action_env(env, target, source):
    """The environment of an action's process: env['ENV'], every value a string (as SCons' spawn)."""
    out = {}
    for key, value in SCons.Action._resolve_shell_env(env, target, source).items():
        if SCons.Util.is_List(value):
            value = os.pathsep.join(map(str, SCons.Util.flatten_sequence(value)))
        out[str(key)] = str(value)
    return out


def run_step(argv, env, use_server=True):
    """A step's `python -m nnbuild STEP ...`: forked from this run's step server (stepserver: the
    interpreter and nnbuild's imports paid once per SCons run), else as a process of its own."""
    if use_server and argv[1:3] == ["-m", "nnbuild"]:
        from nnbuild.scons_tool import stepserver
        server = stepserver.server_for(argv[0], env)
        status = server and server.run(argv[3:], env, os.getcwd())
        if status is not None:
            return status
    return run_argv(argv, env)


def run_argv(argv, env):
    """Run a program from its argument list, no shell; its exit status (127: not found)."""
    try:
        returncode = subprocess.run([str(a) for a in argv], env=env).returncode
    except OSError as error:
        sys.stderr.write(f"nnbuild: cannot run {argv[0]}: {error.strerror}\n")
        return 127
    return returncode if returncode >= 0 else 128 - returncode


def shell_words(args):
    """SCons' command line words back as the program's arguments: SCons wraps a word holding a blank
    in double quotes for `sh` (SCons.Subst.quote_spaces, and `escape_for_argv` below as ESCAPE); undone."""
    return [a[1:-1] if len(a) >= 2 and a[0] == a[-1] == '"' and (" " in a or "\t" in a) else a for a in args]


def escape_for_argv(arg):
    """ESCAPE for no_shell_spawn: the same wrapping as a plain word with blanks, undone by shell_words."""
    return f'"{arg}"' if " " in arg or "\t" in arg else arg


def no_shell_spawn(sh, escape, cmd, args, env):
    """SCons' SPAWN for the compile, archive and link commands nnbuild makes: the argument list is run
    as it is, without `sh`, so a path with backticks, `$(...)`, `;`, quotes or newlines stays a path."""
    return run_argv(shell_words(args), env)


def include_flags(paths, env):
    """`-I DIR` as two words, DIR a node: SCons passes a node whole (a newline or `$(` in a folder's
    name stays in the path) and signs it by its name, where a `-IDIR` string would be split at a
    newline and read for `$(`. The include path of the commands without a shell."""
    flags = []
    for path in SCons.Util.flatten(paths):
        flags += ["-I", path if isinstance(path, SCons.Node.Node) else env.fs.Dir(str(path))]
    return flags


def without_shell(env):
    """An environment whose SCons commands (CCCOM, LINKCOM, ARCOM, ...) run without a shell."""
    env.Replace(SPAWN=no_shell_spawn, ESCAPE=escape_for_argv, NNBUILD_INCLUDE_FLAGS=include_flags,
                _CPPINCFLAGS="${NNBUILD_INCLUDE_FLAGS(CPPPATH, __env__)}")
    return env


def generate(env, **kw):
    env.SetDefault(NNBUILD_PYTHON=sys.executable, NNBUILD_VERBOSE=False)
    # toolchains are found where the user's shell finds them, after any folder the environment was
    # given on purpose (never SCons' platform default, which would find tools the shell does not)
    env["ENV"]["PATH"] = extended_path(env["ENV"].get("PATH", ""), os.environ.get("PATH", ""))
    for var in PASSED_ENV:
        if var in os.environ and var not in env["ENV"]:
            env["ENV"][var] = os.environ[var]
    env.PrependENVPath("PYTHONPATH", str(PACKAGE_DIR.parent))
    verbose = bool(env["NNBUILD_VERBOSE"])
    scanner = SCons.Scanner.Scanner(function=scan_model, name="nnmodel")
    env.Append(BUILDERS={builder_name(name): SCons.Builder.Builder(
        action=StepAction(comstr(env, name, verbose)),
        source_scanner=scanner if step.args[0].dest == "model" and step.args[0].positional else None)
        for name, step in steps.STEPS.items()})
    env.AddMethod(nn_firmware, "NNExample")
    env.AddMethod(nn_model, "NNModel")
    env.AddMethod(nn_user_firmware, "NNFirmware")
    if not env.get("_NNBUILD_PURGE"):
        atexit.register(purge_failed_targets)
        env["_NNBUILD_PURGE"] = True


def exists(env):
    return True


def extended_path(given, shell):
    """PATH for the actions: the folders an environment was given beyond SCons' platform default
    (a toolchain the user added), then the shell's PATH; no folder twice."""
    import SCons.Platform
    default = SCons.Environment.Base(tools=[])["ENV"].get("PATH", "").split(os.pathsep)
    own = [d for d in str(given).split(os.pathsep) if d and d not in default]
    out = []
    for d in own + shell.split(os.pathsep):
        if d and d not in out:
            out.append(d)
    return os.pathsep.join(out)


def builder_name(step_name):
    return f"NNStep_{step_name}"


def fail(message):
    raise SCons.Errors.StopError(f"nnbuild: {message}")


def board_env(env, board):
    """A clone of `env` that compiles and links with the board's compiler (found on its PATH, else
    one line)."""
    try:
        board.compiler.require_tool(board, path=env["ENV"]["PATH"])
    except NNBuildError as error:
        fail(str(error))
    clone = env.Clone()
    clone.Replace(CC=board["cc"], LINK=board["cc"], PROGSUFFIX=board.program_suffix)
    return clone


def link_flags(board, opt=None):
    """The board's link flags, its `{output}` placeholder as SCons' $TARGET."""
    return [f.replace("{output}", "$TARGET") for f in board.compiler.link_flags(board, opt)]


def path_map(env, board):
    """The compiler family's flags that write the project's root as '.' into debug info, kept out of
    the command's signature ($( $)): two checkouts at different paths compile to the same objects
    under the same signatures, so a shared CacheDir serves both."""
    flags = board.compiler.path_map_flags(env.Dir("#").abspath)
    return ["$(", *(f.replace("$", "$$") for f in flags), "$)"]   # a `$` in the path is a character


def cross_env(env, board, opt, verbose):
    """A compile/link environment for one board, from its data file and compiler family; its
    commands run without a shell (the generated code's and nnbuild's own programs)."""
    compilers = board.compiler
    xenv = without_shell(board_env(env, board))
    xenv.Replace(CCFLAGS=compilers.compile_flags(board, opt) + path_map(env, board), CFLAGS=[], LINKFLAGS=link_flags(board, opt),
                 LIBS=compilers.libs(board), CPPPATH=[], CPPDEFINES=[])
    if not verbose:
        xenv.Replace(CCCOMSTR=comstr(env, "CC", verbose), LINKCOMSTR=comstr(env, "LINK", verbose))
    return xenv


def nn_firmware(env, name, model, target, build_dir, *, precision=kinds.DEFAULT_PRECISION, tolerance=1e-4,
                tolerances=None, **options):
    """The whole pipeline for one precision, or for precision=auto every candidate the kind, shape
    and board allow (pipeline.auto_candidates) plus a select step that keeps the smallest WCET
    meeting tolerance and deadline. `tolerances` ({precision: tolerance}) overrides `tolerance` per
    candidate: a 16-bit format cannot hold a float tolerance, and auto must judge each candidate by
    its own."""
    try:
        multi = kinds.of_file(str(model)).NAME == "multiitem" or bool(options.get("split"))
    except NNBuildError as error:
        fail(str(error))
    if multi:
        return multiitem_pipeline(env, name, model, target, build_dir, precision=precision, tolerance=tolerance,
                                  **options)
    if "sync" in options:
        fail("sync= applies to multi-item systems only")
    if precision != "auto":
        return firmware_pipeline(env, name, model, target, build_dir, precision=precision, tolerance=tolerance,
                                 **options)
    try:
        board = boards.load_board(target)
        candidates = pipeline.auto_candidates(model, board, target=target,
                                              shape=options.get("shape", kinds.DEFAULT_SHAPE),
                                              environment=options.get("environment"), tolerance=tolerance,
                                              tolerances=tolerances)
    except NNBuildError as error:
        fail(str(error))
    bdir = env.Dir(build_dir)
    inputs = shared_inputs(env, bdir, model, options)
    runs = {p: firmware_pipeline(env, name, model, target, f"{build_dir}/candidates/{p}", precision=p,
                                 tolerance=t, gated=False, record_wcet_errors=True, inputs=inputs, **options)
            for p, t in candidates.items()}
    sources, specs = [], []
    for p, nodes in runs.items():
        spec = f"{p}=${{SOURCES[{len(sources)}]}}"
        sources.append(nodes["report"])
        if nodes["firmware"]:
            spec += f":${{SOURCES[{len(sources)}]}}"
            sources.append(nodes["firmware"])
        specs.append(spec)
    with_firmware = all(n["firmware"] for n in runs.values())
    targets = ([bdir.File("report.json")] + ([bdir.File(f"firmware{board.program_suffix}")] if with_firmware else [])
               + [bdir.File("report.html")])
    chosen = step_node(env, "select", targets, sources,
                       candidates=specs, output="${TARGETS[0]}",
                       firmware_output="${TARGETS[1]}" if with_firmware else None)
    print(f"nnbuild: precision=auto candidates for {name} on {target}: {', '.join(candidates)}")
    return {"generated": [n["generated"] for n in runs.values()], "check": [n["check"] for n in runs.values()],
            "firmware": chosen[1] if with_firmware else None, "report": chosen[0], "gate": chosen[0],
            "candidates": runs, "board": board}


def multiitem_pipeline(env, name, model, target, build_dir, *, precision, shape=kinds.DEFAULT_SHAPE, deadline=None,
                       tolerance=1e-4, count=8, seed=1, sync="flags", split=None, **_pipeline_options):
    """A multi-item system: the tasks of pipeline.multiitem_plan (a single-graph model's split when
    `split` (("items", N) or ("map", file), options.items) is given, its checks, each with its own C
    and programs, the report, the gate) as SCons nodes, so a change re-runs only what it touches."""
    kind = kinds.get("multiitem")
    precision = kinds.default_precision(kind, precision)
    if precision not in kind.PRECISIONS:
        fail(f"multi-item systems are generated in {', '.join(kind.PRECISIONS)} only (precision '{precision}' asked)")
    try:
        board = boards.load_board(target)
        document = frontends.model_file(str(model)) or model
        split = dict([split]) if split else {}
        item_map = env.fs.File(split["map"]) if "map" in split else None
        the_plan = pipeline.multiitem_plan(name=name, model=str(document), board=board, shape=shape,
                                           precision=precision, sync=sync, deadline=deadline, tolerance=tolerance,
                                           count=count, seed=seed, items=split.get("items"),
                                           item_map=item_map.abspath if item_map else None)
    except NNBuildError as error:
        fail(str(error))
    nodes = Nodes(env, the_plan, env.Dir(build_dir).abspath, document, None, None).build()
    if item_map:
        env.Depends(nodes["split"], item_map)   # not a source: the .json scanner would take it for a Keras model
    return {"generated": [], "check": list(nodes["checks"].values()), "firmware": None, "report": nodes["report"],
            "gate": nodes["gate"], "board": board}


def shared_inputs(env, bdir, model, options):
    """precision=auto: one reference task (check inputs and float64 outputs) for every candidate."""
    task = pipeline.reference_task(str(model), "inputs.npz", data=options.get("check_data"),
                                   count=options.get("count", 32), seed=options.get("seed", 1),
                                   input_range=options.get("input_range", (-1.0, 1.0)),
                                   environment=options.get("environment"))
    Nodes(env, pipeline.Plan([task], "inputs", None), bdir.abspath, model, options.get("environment"),
          options.get("check_data")).step(task)
    return bdir.File("inputs.npz").abspath


def firmware_pipeline(env, name, model, target, build_dir, *, main=None, shape=kinds.DEFAULT_SHAPE,
                      precision=kinds.DEFAULT_PRECISION, opt=None, tolerance=1e-4, count=32, seed=1,
                      input_range=(-1.0, 1.0), deadline=None, deadline_origin=None, gated=True,
                      record_wcet_errors=False, environment=None, check_data=None, inputs=None, wcet="auto",
                      interface="scons"):
    """model file -> C -> objects -> firmware + check program -> runs -> semantic gate -> report,
    as the nodes of pipeline.plan. Returns a dict of the main nodes for aliases and tests."""
    try:
        the_plan = pipeline.plan(
            name=name, model=str(model), board=target, kind=kinds.of_file(str(model)), shape=shape,
            precision=precision, opt=opt, main=main, tolerance=tolerance, count=count, seed=seed,
            input_range=input_range, deadline=deadline, deadline_origin=deadline_origin, environment=environment,
            data=check_data, record_wcet_errors=record_wcet_errors, path=env["ENV"]["PATH"], inputs=inputs,
            wcet=wcet, interface=interface)
    except NNBuildError as error:
        fail(str(error))
    if not gated:
        the_plan.tasks = [t for t in the_plan.tasks if t.step != "gate"]
        the_plan.nodes.pop("gate", None)
    return Nodes(env, the_plan, build_dir, model, environment, check_data).build()


# --------------------------------------------------------------------------- in the user's project


class Built(list):
    """What NNModel and NNFirmware return: a list of their main nodes (for Default, Alias, Depends)
    with each role also as an attribute (model.library, firmware.hex, firmware.reports, ...)."""

    def __init__(self, main, **roles):
        super().__init__(n for n in main if n is not None)
        self.__dict__.update(roles)


#: NNModel's keywords and what they mean (docs/using.md lists them; anything else is refused with
#: the nearest one)
NNMODEL_KEYWORDS = {
    "board": "the board: a name (shipped, $NNBUILD_BOARDS, the project's boards/) or a board file's path; "
             "default env['NNBOARD']",
    "build_dir": "where the model's build goes; default build/<board>/<name>",
    "precision": f"{', '.join(codegen.PRECISIONS)}, fixedW.F, or auto; default {kinds.DEFAULT_PRECISION}",
    "shape": f"code shape, one of {', '.join(sorted(codegen.SHAPES))}; default {kinds.DEFAULT_SHAPE}",
    "opt": "optimisation flag of the generated code, e.g. -O2; default the board's",
    "tolerance": "max |C - float64 reference| over the check inputs; default 1e-4",
    "tolerances": "{precision: tolerance} for precision=auto's candidates (overrides tolerance per precision)",
    "count": "number of check inputs; default 32",
    "seed": "seed of the random check inputs; default 1",
    "input_range": "declared input range (lo, hi) of the check inputs and of fixed-point formats; default (-1, 1)",
    "deadline": 'WCET deadline, e.g. "5ms" or "800us"; "none" waives any; default none set',
    "deadline_origin": "where the deadline came from, for report.json; default \"NNModel deadline in the SConstruct\"",
    "wcet": '"auto" (bound the WCET, check the deadline) or "skip" (no analysis; the deadline is a waiver); '
            'default "auto"',
    "environment": "environment description of a TPG (.dot): JSON file or shipped name",
    "check_data": "take the check inputs from this file (.npz x[, y]) instead of random ones",
}
#: NNFirmware's keywords besides the target and the sources
NNFIRMWARE_KEYWORDS = {
    "models": "the results of env.NNModel(...) linked into the firmware",
    "board": "the board; default the first model's",
}
#: NNExample's (the repository's examples) keywords besides name, model, target, build_dir
NNEXAMPLE_KEYWORDS = ("main", "shape", "precision", "opt", "tolerance", "tolerances", "count", "seed", "input_range",
                      "deadline", "deadline_origin", "wcet", "environment", "check_data", "sync", "split")


def refuse_unknown(given, known, where):
    try:
        options.refuse_unknown(given, known, where)
    except NNBuildError as error:
        fail(str(error))


def _board_of(env, board):
    if isinstance(board, boards.Board):
        return board
    board = board or env.get("NNBOARD")
    if not board:
        fail("no board: pass board=... or set env['NNBOARD'] (a name: shipped, in $NNBUILD_BOARDS or the project's "
             "boards/ folder; or a board file's path)")
    board = env.subst(str(board))
    if board.endswith(".json"):   # a path, relative to the calling SConscript's directory (SCons' rule)
        board = env.File(board).srcnode().abspath
    try:
        return boards.load_board(board)
    except NNBuildError as error:
        fail(str(error))


def interface_of(env):
    """Whose syntax the hints speak: NNModel's, unless a front running NNModel for the user says
    otherwise (env['NNBUILD_INTERFACE']: `nnbuild check --precision auto` sets cli)."""
    return env.get("NNBUILD_INTERFACE") or "nnmodel"


def model_deadline(env, name, keywords):
    """NNModel's deadline= and wcet= as the report step's deadline spec and its origin: "none" waives
    the deadline, wcet="skip" turns it into a waiver (not checked, said in report.json)."""
    given, wcet = keywords.pop("deadline", None), keywords.get("wcet", "auto")
    origin = keywords.pop("deadline_origin", None)
    try:
        spec, _ = deadlines.deadline_spec(given, None, None, wcet)
    except NNBuildError as error:
        fail(f"NNModel('{name}'): {error}")
    front = "command line" if interface_of(env) == "cli" else "NNModel deadline in the SConstruct"
    return spec, (origin or front) if spec else None


def nn_model(env, name, model, **keywords):
    """A model for the board: its plan's nodes (generated C, check program, runs, semantic check,
    memory report, WCET, report, gates) and a static library of the generated code (compiled with
    the board's flags, -Werror included), for NNFirmware or the user's own Program. With
    precision="auto": every candidate precision built and bounded, the library of the one the select
    step chooses (pipeline.auto_candidates, checks.select)."""
    refuse_unknown(keywords, NNMODEL_KEYWORDS, f"NNModel('{name}')")
    board = _board_of(env, keywords.pop("board", None))
    build_dir = keywords.pop("build_dir", None)
    precision = keywords.pop("precision", None)   # None: the kind's default (int8 for a full-integer model)
    try:
        name = codegen.check_model_name(name)
    except NNBuildError as error:
        fail(str(error))
    keywords["deadline"], keywords["deadline_origin"] = model_deadline(env, name, keywords)
    for key in ("check_data", "environment"):   # files named from the calling SConscript's folder
        if keywords.get(key) and env.fs.File(str(keywords[key])).exists():
            keywords[key] = env.fs.File(str(keywords[key])).abspath
    # the model and build_dir are file names, taken as written (no `$` substitution)
    build_dir = env.fs.Dir(str(build_dir or f"build/{board.name}/{name}"))
    model_node = model if isinstance(model, SCons.Node.Node) else env.fs.File(str(model))
    if precision == "auto":
        return auto_model(env, name, model_node, board, build_dir, **keywords)
    keywords.pop("tolerances", None)
    nodes = firmware_pipeline(env, name, model_node.abspath, board, build_dir, precision=precision,
                              interface=interface_of(env), **keywords)
    made = nodes.pop("_nodes")
    gen = nodes["generated_roles"]
    library = made.library([gen[r] for r in codegen.C_SOURCE_ROLES if r in gen], name)
    the_plan = made.plan
    roles = {k: v for k, v in nodes.items() if k != "board"}
    roles.update(library=library, header=gen["header"], include=made.bdir.Dir("gen"), plan=the_plan, dir=made.bdir,
                 board=board, name=name)
    return Built([library, nodes["gate"]], **roles)


def auto_model(env, name, model_node, board, build_dir, *, tolerance=1e-4, tolerances=None, **options):
    """NNModel(precision="auto"): each candidate precision a model build of its own under
    candidates/<precision> (independent targets: parallel under -j, cached), sharing one reference
    task; the select step keeps the one with the smallest WCET meeting tolerance and deadline (the
    repository SConstruct's rule) and installs its library, header and the files NNFirmware's
    checks read into the model's directory; gate.json judges the chosen report."""
    try:
        candidates = pipeline.auto_candidates(model_node.abspath, board, target=board.ref,
                                              shape=options.get("shape", kinds.DEFAULT_SHAPE),
                                              environment=options.get("environment"), tolerance=tolerance,
                                              tolerances=tolerances)
    except NNBuildError as error:
        fail(f"NNModel('{name}'): {error}")
    bdir = build_dir
    inputs = shared_inputs(env, bdir, model_node.abspath, options)
    chosen, sources, specs, last = None, [], [], None
    for precision, tol in candidates.items():
        nodes = firmware_pipeline(env, name, model_node.abspath, board, bdir.Dir(f"candidates/{precision}"),
                                  precision=precision, tolerance=tol, gated=False, record_wcet_errors=True,
                                  inputs=inputs, interface=interface_of(env), **options)
        made = nodes.pop("_nodes")
        gen = nodes["generated_roles"]
        last = made.plan
        report_task = next(t for t in last.tasks if t.step == "report")
        run = made.node(report_task.sources["run"]) if report_task.sources.get("run") else None
        files = [made.library([gen[r] for r in codegen.C_SOURCE_ROLES if r in gen], name), gen["header"],
                 gen["flowfacts"], gen["trace"], made.node(last.nodes["semantic"])]
        files += [run] if run is not None else []
        spec = f"{precision}=${{SOURCES[{len(sources)}]}}"
        sources.append(nodes["report"])
        for node in files:
            spec += f":${{SOURCES[{len(sources)}]}}"
            sources.append(node)
        specs.append(spec)
        chosen = (report_task, run)
    report_task, run = chosen
    roles = last.nodes["generated_roles"]
    header, flowfacts, trace = roles["header"], roles["flowfacts"], roles["trace"]
    installed = [f"lib{name}.a", header, flowfacts, trace, "semantic.json"] + ([run.name] if run is not None else [])
    targets = [bdir.File("report.json"), bdir.File("report.html")] + [bdir.File(f) for f in installed]
    selected = step_node(env, "select", targets, sources, candidates=specs, output="${TARGETS[0]}",
                         install=[f"${{TARGETS[{i + 2}]}}" for i in range(len(installed))],
                         interface=interface_of(env))
    env.Depends(selected, [env.fs.File(f) for f in package_files(*steps.STEPS["select"].code) + PIPELINE_FILES])
    env.NoCache(selected)
    # the chosen build, as NNFirmware reads a model's plan: its files installed in the model's directory
    the_plan = pipeline.Plan(
        [pipeline.Task("report", ["report.json"], {"run": installed[5] if run is not None else None},
                       options=dict(report_task.options, precision="auto"), role="report"),
         pipeline.Task("gate", ["gate.json"], {"report": "report.json"}, options={"interface": interface_of(env)},
                       role="gate")],
        name, board, {"generated": [header, flowfacts, trace],
                      "generated_roles": {"header": header, "flowfacts": flowfacts, "trace": trace},
                      "semantic": "semantic.json", "report": "report.json",
                      "wcet": last.nodes.get("wcet"), "gate": "gate.json"}, last.entries)
    gate_nodes = Nodes(env, the_plan, bdir.abspath, model_node, None, None)
    gate_nodes.made.update({"report.json": targets[0]})
    gate = gate_nodes.step(the_plan.tasks[1])
    RELEASE_NODES.extend(gate)
    print(f"nnbuild: precision=auto candidates for {name} on {board.ref}: {', '.join(candidates)}")
    return Built([targets[2], gate[0]], library=targets[2], header=targets[3], include=targets[3].dir,
                 plan=the_plan, dir=bdir, board=board, name=name, report=targets[0], gate=gate[0],
                 candidates=list(candidates))


def nn_user_firmware(env, target, sources=None, *example_args, models=None, **keywords):
    """The user's firmware with its models: `.elf` (the board's program suffix), `.hex`, `.bin`, and
    per model size/stack, WCET and gates over this linked image. Without `models`, the call is the
    repository's example form NNExample(name, model, target, build_dir, ...)."""
    if models is None:
        if example_args:
            refuse_unknown(keywords, NNEXAMPLE_KEYWORDS, f"NNExample('{target}')")
            return nn_firmware(env, target, sources, *example_args, **keywords)
        refuse_unknown(keywords, NNFIRMWARE_KEYWORDS, f"NNFirmware('{target}')")
        fail(f"NNFirmware('{target}'): models= takes the results of env.NNModel(...)")
    refuse_unknown(keywords, NNFIRMWARE_KEYWORDS, f"NNFirmware('{target}')")
    board = keywords.get("board")
    models = list(models) if isinstance(models, (list, tuple)) else [models]
    if not models or not all(isinstance(m, Built) and hasattr(m, "library") for m in models):
        fail("NNFirmware: models= takes the results of env.NNModel(...)")
    board = _board_of(env, board or models[0].board)
    for m in models:
        refuse_shell_characters(m.dir, f"NNFirmware: model '{m.name}' is built in")
    fenv = user_env(env, board, [m.include for m in models])
    target = env.File(env.subst(str(target)))
    stem = target.name
    sources = env.Flatten([sources]) if sources is not None else []
    objects = []
    for src in sources:
        node = env.File(src) if isinstance(src, str) else src
        if str(node).endswith(fenv.subst("$OBJSUFFIX")):
            objects.append(node)
            continue
        rel = node.srcnode().get_path()
        rel = node.name if rel.startswith("..") or os.path.isabs(rel) else rel
        objects += fenv.Object(target.dir.File(f"{stem}.obj/{os.path.splitext(rel)[0]}{fenv.subst('$OBJSUFFIX')}"),
                               node)
    program = fenv.Program(target.dir.File(f"{stem}{board.program_suffix}"), objects + [m.library for m in models])
    env.Depends(program, env.fs.File(str(board.path or boards.board_path(board.name))))
    try:
        the_plan = pipeline.firmware_plan(firmware=program[0].abspath, stem=stem, board=board,
                                          models=[(m.plan, m.dir.abspath) for m in models], path=env["ENV"]["PATH"],
                                          interface=interface_of(env))
    except NNBuildError as error:
        fail(str(error))
    made = Nodes(env, the_plan, target.dir.abspath, None, None, None)
    nodes = made.build()
    nodes.pop("_nodes", None)
    for m in models:
        leave_model_analysis_out_of_the_default(env, m)
    images = [nodes[k] for k in sorted(nodes) if k.startswith("image")]
    gates = nodes["gates"]
    return Built([program[0], *images, *gates.values()], elf=program[0], hex=nodes.get("image.hex"),
                 bin=nodes.get("image.bin"), gates=gates, reports=nodes["reports"], board=board)


#: the steps of a model's own plan that a firmware build does again over its linked image
FIRMWARE_REDOES = ("wcet", "report", "gate")


def leave_model_analysis_out_of_the_default(env, model):
    """Each analysis runs once per build: in a firmware build the models' WCET, report and gates run
    over the linked image, so a model's own WCET analysis, report and gate (over its check program)
    leave the default targets. `scons` with the model's gate named (or in Default) still builds them.
    A precision=auto model keeps its candidates' analyses: they choose the precision."""
    if getattr(model, "candidates", None):
        return
    for task in model.plan.tasks:
        if task.step in FIRMWARE_REDOES:
            for output in task.targets:
                node = model.dir.Entry(output)
                env.Ignore(node.dir, node)


#: what `sh` reads in a word SCons passes in double quotes (or unquoted, without blanks)
SHELL_CHARACTERS = frozenset("`$\\\"'\n\r;&|<>(){}*?[]!#~")


def refuse_shell_characters(node, what):
    """The user's firmware is compiled and linked by the user's own environment, whose commands SCons
    runs through `sh`: a model folder those commands name must hold no character `sh` reads."""
    path = str(node)
    found = sorted(set(path) & SHELL_CHARACTERS)
    if found:
        fail(f"{what} {names.one_line(path)!r}, whose name holds {' '.join(map(repr, found))}: your firmware's "
             "compile and link commands run through SCons' shell; give NNModel a build_dir without them")


def user_env(env, board, include_dirs):
    """The user's environment for the board: the board's compiler, target flags and link flags
    before the user's own (CCFLAGS, CFLAGS, CPPPATH, CPPDEFINES, LINKFLAGS, LIBS are extended, never
    replaced); the generated code's warning policy stays with the generated code."""
    fenv = board_env(env, board)
    fenv.Prepend(CCFLAGS=pipeline.user_compile_flags(board) + path_map(env, board), LINKFLAGS=link_flags(board))
    fenv.Append(CPPPATH=list(include_dirs), LIBS=board.compiler.libs(board))
    if not bool(env["NNBUILD_VERBOSE"]):
        fenv.SetDefault(CCCOMSTR=comstr(env, "CC", False), LINKCOMSTR=comstr(env, "LINK", False))
    return fenv


class Nodes:
    """The SCons nodes of one plan."""

    def __init__(self, env, the_plan, build_dir, model, environment, check_data):
        self.env, self.plan = env, the_plan
        # paths are file names, never SCons expressions (a checkout path may hold a `$`)
        self.bdir = build_dir if isinstance(build_dir, SCons.Node.Node) else env.fs.Dir(str(build_dir))
        self.verbose = bool(env["NNBUILD_VERBOSE"])
        # a model path is a file name, never an SCons expression: no substitution of its `$`
        self.extra = {"model": model if isinstance(model, SCons.Node.Node) else env.fs.File(str(model)),
                      "environment": environment, "data": check_data}
        self.made = {}      # plan path -> node
        self.objects = {}   # object path -> node (shared by the programs of one board)

    def node(self, path):
        if path is None:
            return None
        if path in self.made:
            return self.made[path]
        path = str(path)
        if path.startswith("#") or os.path.isabs(path):
            return self.env.fs.File(path)
        return self.bdir.File(path)

    def build(self):
        board_file = str(self.plan.board.path or boards.board_path(self.plan.board.name))
        for task in self.plan.tasks:
            made = self.program(task) if task.step == "program" else self.step(task)
            for path, node in zip(task.targets, made):
                self.made[path] = node
            if task.step in ("program", "size", "report"):
                self.env.Depends(made, self.env.fs.File(board_file))
            if task.step in ("gate", "multiitem_gate", "image"):
                RELEASE_NODES.extend(made)
        for task in self.plan.tasks:
            for path in task.after:
                self.env.Depends(self.made[task.targets[0]], self.made.get(path) or self.node(path))
        nodes = {}
        for role, value in self.plan.nodes.items():
            if isinstance(value, list):
                nodes[role] = [self.made[v] for v in value]
            elif isinstance(value, dict):
                nodes[role] = {k: self.made[v] for k, v in value.items()}
            else:
                nodes[role] = self.made.get(value) if value else None
        nodes["board"] = self.plan.board
        nodes["_nodes"] = self
        return nodes

    def library(self, sources, name):
        """A static library of the generated code's objects (the check program's own objects)."""
        board = self.plan.board
        xenv = cross_env(self.env, board, None, self.verbose)
        objs = [self.objects[f"obj/{Path(str(p)).stem}.o"] for p in sources]
        if not self.verbose:
            xenv["ARCOMSTR"] = comstr(self.env, "AR", False)
            xenv["RANLIBCOMSTR"] = ""   # one "Archiving" line per library (ranlib finishes that step)
        for tool in ("AR", "RANLIB"):
            xenv[tool] = binutil(board, tool.lower())
        # deterministic archives (zero timestamps, uids and modes): two checkouts give the same bytes
        xenv.Replace(ARFLAGS="rcD", RANLIBFLAGS="-D")
        return xenv.StaticLibrary(self.bdir.File(f"lib{name}.a"), objs)[0]

    def step(self, task):
        """One step as a StepAction `python -m nnbuild <step> ...` with its sources as ${SOURCES[i]}."""
        sources, values = [], {k: literal(v) for k, v in task.options.items()}
        for role, value in task.sources.items():
            if value is None:
                continue
            if isinstance(value, dict):
                values[role] = []
                for label, path in value.items():
                    values[role].append(f"{label}=${{SOURCES[{len(sources)}]}}")
                    sources.append(self.node(path))
            else:
                values[role] = f"${{SOURCES[{len(sources)}]}}"
                # the model: the build's own, or one an earlier task made (a multi-item split)
                sources.append(self.extra["model"] if role == "model" and value not in self.made
                               else self.node(value))
        if values.get("discard"):   # release images a failing gate removes: paths from the top (the actions' cwd)
            values["discard"] = [self.node(p).get_path() for p in values["discard"]]
        out = next(a.dest for a in steps.STEPS[task.step].args if a.dest in ("output", "outdir"))
        values[out] = "${TARGET.dir}" if out == "outdir" else "$TARGET"
        targets = [self.node(t) for t in task.targets]
        made = step_node(self.env, task.step, targets, sources, **values)
        step = steps.STEPS[task.step]
        self.env.Depends(made, [self.env.fs.File(f) for f in package_files(*step.code) + PIPELINE_FILES])
        if self.extra["environment"] and task.step in ("generate", "reference"):
            self.env.Depends(made, self.env.fs.File(str(self.extra["environment"])))
        if not step.cacheable:
            self.env.NoCache(made)
        return made

    def program(self, task):
        """Objects (shared per board and object directory) and the linked program."""
        board = boards.load_board(task.options["board"])
        xenv = cross_env(self.env, board, task.options["opt"], self.verbose)
        xenv.Append(CPPPATH=[self.bdir.Dir(d) for d in task.options["include"]])
        objects = []
        for source in task.sources["sources"]:
            src = self.node(source)
            obj_path = f"{task.options['objdir']}/{Path(str(source)).stem}.o"
            if obj_path not in self.objects:
                defines = task.options["defines"].get(source, [])
                obj = xenv.Object(self.bdir.File(obj_path), src, CPPDEFINES=list(defines))
                if defines:
                    xenv.Depends(obj, self.node(task.options["header"]))
                self.objects[obj_path] = obj[0]
            objects.append(self.objects[obj_path])
        target = self.node(task.targets[0])
        if task.options.get("ldscript"):   # the linker script of the machine the board's runner runs it on
            xenv.Append(LINKFLAGS=board.compiler.script_flags(task.options["ldscript"]))
            xenv.Depends(target, self.env.File(task.options["ldscript"]))
        return xenv.Program(target, objects, SPAWN=explaining_spawn(board, xenv["SPAWN"], str(target),
                                                                    task.options.get("model"), task.options.get("hint")))


def explaining_spawn(board, spawn, output, model, hint):
    """SCons' spawn for a link (no shell): the linker's output passes through, but a program that
    outgrows a memory region fails with the compiler family's one line (output, model, bytes needed
    vs the board's)."""
    def run(sh, escape, cmd, args, env):
        if model is None:
            return spawn(sh, escape, cmd, args, env)
        def link(extra=()):
            return subprocess.run([*shell_words(args), *extra], env=env, capture_output=True, text=True)
        result = link()
        line = result.returncode and board.compiler.link_failure(board, result.stderr, output=output, model=model,
                                                                 hint=hint or "",
                                                                 relink=lambda extra: link(extra).returncode)
        sys.stdout.write(result.stdout)
        sys.stderr.write(f"nnbuild: {line}\n" if line else result.stderr)
        return result.returncode
    return run


def binutil(board, tool):
    """ar/ranlib beside the board's gcc-named compiler (avr-gcc -> avr-ar); the plain name else."""
    cc = Path(board["cc"]).name
    return board["cc"][:-3] + tool if cc.endswith("gcc") else tool


def step_node(env, step_name, targets, sources, **values):
    """One step's build node(s): the action's argument list is the step table's (steps.arguments)."""
    builder = getattr(env, builder_name(step_name))
    if env.get("NNBUILD_STEP_SERVER", True):
        from nnbuild.scons_tool import stepserver
        stepserver.fork_server()
    return builder(targets, sources, NN_STEP_ARGV=steps.arguments(step_name, **values))
