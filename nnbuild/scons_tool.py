"""SCons tool `nnbuild_tool`: builders from the step table, the model scanner, and the NNFirmware
pseudo-builder that turns a plan (nnbuild.pipeline.plan) into build nodes.

Thin by design: every step is a command-line action running `python -m nnbuild <step>`, so the
library holds the logic, actions stay parallel-safe, and each step's signature is its command line.
C programs are compiled and linked by SCons itself, with the board's compiler and flags.
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

from nnbuild import boards, codegen, frontends, kinds, pipeline, steps
from nnbuild.errors import NNBuildError

PACKAGE_DIR = Path(__file__).resolve().parent

#: progress labels: one per step of the table, and SCons' own compile and link
STEP_LABELS = {**{name: step.label for name, step in steps.STEPS.items()}, "CC": "Compiling", "LINK": "Linking"}
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
        return [env.File(p) for p in frontends.implicit_dependencies(str(node.srcnode().abspath))]
    except (NNBuildError, OSError, ValueError):
        return []


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
    scanner = SCons.Scanner.Scanner(function=scan_model, name="nnmodel")
    env.Append(BUILDERS={builder_name(name): SCons.Builder.Builder(
        action=SCons.Action.Action("$NN $NN_STEP_ARGS", comstr(env, name, verbose)),
        source_scanner=scanner if step.args[0].dest == "model" and step.args[0].positional else None)
        for name, step in steps.STEPS.items()})
    env.AddMethod(nn_firmware, "NNFirmware")
    if not env.get("_NNBUILD_PURGE"):
        atexit.register(purge_failed_targets)
        env["_NNBUILD_PURGE"] = True


def exists(env):
    return True


def builder_name(step_name):
    return f"NNStep_{step_name}"


def fail(message):
    raise SCons.Errors.StopError(f"nnbuild: {message}")


def cross_env(env, board, opt, verbose):
    """A compile/link environment for one board, from its data file and compiler family."""
    compilers = board.compiler
    try:
        compilers.require_tool(board, path=env["ENV"]["PATH"])
    except NNBuildError as error:
        fail(str(error))
    xenv = env.Clone()
    xenv.Replace(CC=board["cc"], LINK=board["cc"], CCFLAGS=compilers.compile_flags(board, opt),
                 CFLAGS=[], LINKFLAGS=[f.replace("{output}", "$TARGET") for f in compilers.link_flags(board, opt)],
                 LIBS=compilers.libs(board), CPPPATH=[], CPPDEFINES=[], PROGSUFFIX=board.program_suffix)
    if not verbose:
        xenv.Replace(CCCOMSTR=comstr(env, "CC", verbose), LINKCOMSTR=comstr(env, "LINK", verbose))
    return xenv


def nn_firmware(env, name, model, target, build_dir, *, precision=kinds.DEFAULT_PRECISION, **options):
    """The whole pipeline for one precision, or for precision=auto every candidate the kind, shape
    and board allow plus a select step that keeps the smallest WCET meeting tolerance and deadline."""
    if precision != "auto":
        return firmware_pipeline(env, name, model, target, build_dir, precision=precision, **options)
    try:
        board = boards.load_board(target)
        kind = kinds.of_file(str(model))
        shape = options.get("shape", kinds.DEFAULT_SHAPE)
        loaded = None
        if hasattr(codegen.shape_module(kinds.resolve_shape(kind, shape)), "choose"):
            loaded, _ = kind.load(str(model), None, options.get("environment"))  # its shape depends on the model
        candidates = kinds.precision_candidates(kind, shape, board, loaded)
    except NNBuildError as error:
        fail(str(error))
    if not candidates:
        fail(f"precision=auto: no precision of {kind.NAME} models can be generated in shape {shape} for {target}")
    runs = {p: firmware_pipeline(env, name, model, target, f"{build_dir}/candidates/{p}", precision=p,
                                 gated=False, record_wcet_errors=True, **options)
            for p in candidates}
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
    targets = [bdir.File("report.json")] + ([bdir.File(f"firmware{board.program_suffix}")] if with_firmware else [])
    chosen = step_node(env, "select", targets, sources,
                       candidates=specs, output="${TARGETS[0]}",
                       firmware_output="${TARGETS[1]}" if with_firmware else None)
    print(f"nnbuild: precision=auto candidates for {name} on {target}: {', '.join(candidates)}")
    return {"generated": [n["generated"] for n in runs.values()], "check": [n["check"] for n in runs.values()],
            "firmware": chosen[1] if with_firmware else None, "report": chosen[0], "gate": chosen[0],
            "candidates": runs, "board": board}


def firmware_pipeline(env, name, model, target, build_dir, *, main=None, shape=kinds.DEFAULT_SHAPE,
                      precision=kinds.DEFAULT_PRECISION, opt=None, tolerance=1e-4, count=32, seed=1,
                      input_range=(-1.0, 1.0), deadline=None, deadline_origin=None, gated=True,
                      record_wcet_errors=False, environment=None, check_data=None):
    """model file -> C -> objects -> firmware + check program -> runs -> semantic gate -> report,
    as the nodes of pipeline.plan. Returns a dict of the main nodes for aliases and tests."""
    try:
        the_plan = pipeline.plan(
            name=name, model=str(model), board=target, kind=kinds.of_file(str(model)), shape=shape,
            precision=precision, opt=opt, main=main, tolerance=tolerance, count=count, seed=seed,
            input_range=input_range, deadline=deadline, deadline_origin=deadline_origin, environment=environment,
            data=check_data, record_wcet_errors=record_wcet_errors, path=env["ENV"]["PATH"])
    except NNBuildError as error:
        fail(str(error))
    if not gated:
        the_plan.tasks = [t for t in the_plan.tasks if t.step != "gate"]
        the_plan.nodes.pop("gate", None)
    return Nodes(env, the_plan, build_dir, model, environment, check_data).build()


class Nodes:
    """The SCons nodes of one plan."""

    def __init__(self, env, the_plan, build_dir, model, environment, check_data):
        self.env, self.plan = env, the_plan
        self.bdir = env.Dir(build_dir)
        self.verbose = bool(env["NNBUILD_VERBOSE"])
        self.extra = {"model": env.File(str(model)), "environment": environment, "data": check_data}
        self.made = {}      # plan path -> node
        self.objects = {}   # object path -> node (shared by the programs of one board)

    def node(self, path):
        if path is None:
            return None
        if path in self.made:
            return self.made[path]
        path = str(path)
        if path.startswith("#") or os.path.isabs(path):
            return self.env.File(path)
        return self.bdir.File(path)

    def build(self):
        board_file = str(self.plan.board.path or boards.board_path(self.plan.board.name))
        for task in self.plan.tasks:
            made = self.program(task) if task.step == "program" else self.step(task)
            for path, node in zip(task.targets, made):
                self.made[path] = node
            if task.step in ("program", "size", "report"):
                self.env.Depends(made, board_file)
        for task in self.plan.tasks:
            for path in task.after:
                self.env.Depends(self.made[task.targets[0]], self.made[path])
        nodes = {}
        for role, value in self.plan.nodes.items():
            if isinstance(value, list):
                nodes[role] = [self.made[v] for v in value]
            elif isinstance(value, dict):
                nodes[role] = {k: self.made[v] for k, v in value.items()}
            else:
                nodes[role] = self.made.get(value) if value else None
        nodes["board"] = self.plan.board
        return nodes

    def step(self, task):
        """One step as a command action `$NN <step> ...` with its sources as ${SOURCES[i]}."""
        sources, values = [], dict(task.options)
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
                sources.append(self.extra["model"] if role == "model" else self.node(value))
        out = next(a.dest for a in steps.STEPS[task.step].args if a.dest in ("output", "outdir"))
        values[out] = "${TARGET.dir}" if out == "outdir" else "$TARGET"
        targets = [self.node(t) for t in task.targets]
        made = step_node(self.env, task.step, targets, sources, **values)
        step = steps.STEPS[task.step]
        self.env.Depends(made, package_files(*step.code) + PIPELINE_FILES)
        if self.extra["environment"] and task.step in ("generate", "reference"):
            self.env.Depends(made, self.extra["environment"])
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
                obj = xenv.Object(self.bdir.File(obj_path), src,
                                  CPPDEFINES=[(k, shell_define(v)) for k, v in defines])
                if defines:
                    xenv.Depends(obj, self.node(task.options["header"]))
                self.objects[obj_path] = obj[0]
            objects.append(self.objects[obj_path])
        return xenv.Program(self.node(task.targets[0]), objects)


def shell_define(value):
    """A -D value for SCons' shell command line (string literals keep their quotes)."""
    return value.replace('"', '\\"') if value.startswith('"') else value


def step_node(env, step_name, targets, sources, **values):
    """One step's build node(s): the action's command line is the step table's."""
    builder = getattr(env, builder_name(step_name))
    return builder(targets, sources, NN_STEP_ARGS=steps.command(step_name, **values))
