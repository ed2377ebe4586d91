"""Shared test helpers: where the repo and ../shared are, and how to run scons on a project copy."""

import os
import re
import resource
import shutil
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PROJECT_PARTS = ("SConstruct", "site_scons", "nnbuild", "toolchains", "firmware_examples")


def shared_file(*parts):
    """A file of ../shared (third-party data stays there); skip when this checkout has none."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is not beside this checkout)")
    return path


#: the slow tier: tests whose code path a faster test of the default run also covers (named in the
#: reason), skipped visibly unless NNBUILD_SLOW_TESTS=1, to keep the whole suite in its 15 minutes
SLOW_TIER = os.environ.get("NNBUILD_SLOW_TESTS") == "1"


def slow(covered_by):
    """Mark a test (or a pytest.param) for the slow tier; `covered_by` says what covers it by default."""
    return pytest.mark.skipif(not SLOW_TIER, reason=f"slow tier (NNBUILD_SLOW_TESTS=1): {covered_by}")


def error_of(path) -> str:
    """The one-line refusal of loading the model file `path`, checked to name that file."""
    from nnbuild import frontends
    from nnbuild.errors import NNBuildError
    with pytest.raises(NNBuildError) as info:
        frontends.load(path)
    msg = str(info.value)
    assert "\n" not in msg and Path(path).name in msg, msg
    return msg


def tflite_with_opcode(source, dest, builtin, code):
    """A copy of the .tflite `source` at `dest` with the operator code `builtin` rewritten to `code`
    in place (both the int field and the deprecated byte): a model whose operator nnbuild must refuse."""
    import struct

    import tflite
    data = bytearray(Path(source).read_bytes())
    model = tflite.Model.GetRootAsModel(data, 0)
    entry = next(c for c in (model.OperatorCodes(k) for k in range(model.OperatorCodesLength()))
                 if max(c.BuiltinCode(), c.DeprecatedBuiltinCode()) == builtin)
    struct.pack_into("<i", data, entry._tab.Pos + entry._tab.Offset(10), code)
    struct.pack_into("<b", data, entry._tab.Pos + entry._tab.Offset(4), code)
    Path(dest).write_bytes(bytes(data))
    return Path(dest)


def have(*tools):
    return all(shutil.which(t) for t in tools)


needs_avr = pytest.mark.skipif(not have("avr-gcc", "avr-nm", "avr-objdump"),
                               reason="avr-gcc/binutils-avr not installed (bash scripts/setup.sh)")


def _otawa_missing():
    from nnbuild.wcet import otawa
    return otawa.locate() is None


def needs_otawa(test):
    """A test that runs OTAWA's owcet: skipped with a reason where it is not built, and marked
    `otawa` so that the run's last lines count the OTAWA tests that ran (CI's log shows it)."""
    skip = pytest.mark.skipif(_otawa_missing(),
                              reason="OTAWA owcet neither on PATH nor built by `bash scripts/setup.sh --with-otawa`")
    return pytest.mark.otawa(skip(test))


def pytest_terminal_summary(terminalreporter):
    """One line: how many tests marked `otawa` passed, failed or were skipped, and which owcet ran."""
    outcomes = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "otawa" in getattr(report, "keywords", {}):
                outcomes.setdefault(outcome, set()).add(report.nodeid)
    if outcomes:
        from nnbuild.wcet import otawa
        counts = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in outcomes.items())
        terminalreporter.write_line(f"OTAWA tests: {counts} (owcet: {otawa.locate() or 'not built'})")


def copy_project(dest):
    """A private copy of the project so a test can edit models and build without touching the repo."""
    dest = Path(dest)
    for part in PROJECT_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__", "build"))
        else:
            shutil.copy2(src, dest / part)
    return dest


def scons(project, *args, env=None):
    """Run scons in `project` with --debug=explain; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", "--debug=explain", *args],
                          cwd=project, capture_output=True, text=True, env=env or os.environ.copy())


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory):
    """The run's shared SCons CacheDir, for `scons(project, ..., f"cache={build_cache}")`: a build
    that another test (of any worker) already made takes its cacheable steps (objects, programs,
    simulator runs, WCET bounds) from it instead of running them again; gates, size checks and the
    semantic check always run (NoCache). Under pytest's temporary base of this run only: every run
    starts empty, so nothing of an older nnbuild is ever served. SCons creates it (atomically) at its
    first use. A test that asserts what rebuilds, or what a failing step leaves, builds without it."""
    return _run_base(tmp_path_factory) / "scons-cache"


#: what a wheel of nnbuild is built from (a clean tree: no stale setuptools build/ of the checkout)
WHEEL_PARTS = ("nnbuild", "toolchains", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE")


def user_files(parts):
    """The files of `parts` (folders or files of the checkout) a user gets: tracked and new, not
    ignored (git's view; every file but __pycache__ where the checkout is no git work tree)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *parts], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [name for name in listed.stdout.splitlines() if (REPO / name).is_file()]
    return [str(p.relative_to(REPO)) for part in parts for p in ([REPO / part] if (REPO / part).is_file()
            else sorted((REPO / part).rglob("*"))) if p.is_file() and "__pycache__" not in p.parts]


def _run_base(tmp_path_factory):
    """This run's temporary base, the same for every xdist worker (each has base/popen-gwN)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def nnbuild_wheel(tmp_path_factory):
    """The nnbuild wheel of this checkout (`pip wheel --no-deps` of a copy of the files a user gets:
    user_files), built once per run and shared by the workers (a file lock: the first builds it, the
    others wait and read it)."""
    import fcntl
    root = _run_base(tmp_path_factory) / "nnbuild-wheel"
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = list((root / "dist").glob("nnbuild-*.whl"))
        if not wheels:
            src = root / "src"
            shutil.rmtree(src, ignore_errors=True)
            for name in user_files(WHEEL_PARTS):
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, src / name)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("NNBUILD_", "PYTHON"))}
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"),
                                    str(src)], cwd=root, env=env, capture_output=True, text=True)
            assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
            wheels = list((root / "dist").glob("nnbuild-*.whl"))
    wheel, = wheels
    return wheel


@pytest.fixture(scope="session")
def nnbuild_venv(tmp_path_factory, nnbuild_wheel):
    """(bin folder, environment) of a venv holding the run's nnbuild wheel, its dependencies taken
    from this interpreter's site-packages (system_site_packages), with the `scons` console script pip
    writes for that dependency: a user's install. Made once per run and shared by the workers (a file
    lock, as nnbuild_wheel), read only after. No pip of its own (ensurepip costs seconds): this
    interpreter's pip installs the wheel into it. The environment has its bin first on PATH and none
    of the caller's NNBUILD_ or PYTHON variables. (A venv without the system's packages, dependencies
    from the index: test_install.)"""
    import fcntl
    import venv
    root = _run_base(tmp_path_factory) / "nnbuild-venv"
    root.mkdir(exist_ok=True)
    bin_dir = root / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NNBUILD_", "PYTHON"))}
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            shutil.rmtree(root / "venv", ignore_errors=True)
            venv.create(root / "venv", system_site_packages=True, with_pip=False)
            installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q",
                                        "--no-deps", "--no-index", str(nnbuild_wheel)], env=env, capture_output=True,
                                       text=True)
            assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
            scons = bin_dir / "scons"
            scons.write_text(f"#!{bin_dir / 'python'}\nimport sys\nfrom SCons.Script.Main import main\nsys.exit(main())\n")
            scons.chmod(0o755)
            (root / "done").write_text("")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return bin_dir, env


#: the warnings a plain `python` prints (its default filters), so in-process runs see what a shell would
_SILENT_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@pytest.fixture
def run_cli(capfd, monkeypatch):
    """`python -m nnbuild ARGS` in this process (no interpreter start, imports done once): a
    CompletedProcess with the exit status and the fd-level stdout/stderr (a compiler's output
    counts), Python warnings appended to stderr as the interpreter would print them. The real
    command in its own process stays tested by test_cli's `nnbuild(...)` tests."""
    from nnbuild import cli

    def run(*args, cwd=REPO):
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for category in _SILENT_BY_DEFAULT:
                warnings.simplefilter("ignore", category)
            try:
                status = cli.main([str(a) for a in args])
            except SystemExit as exit_:  # argparse: --help, --version, a refused option
                status = exit_.code
                if isinstance(status, str):
                    print(status, file=sys.stderr)
                    status = 1
        out, err = capfd.readouterr()
        err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
        return subprocess.CompletedProcess(["nnbuild", *map(str, args)], status or 0, out, err)
    return run


#: a module whose `pytestmark` names e2e holds e2e tests only
_ALL_E2E = re.compile(rb"^pytestmark\s*=\s*\[?\s*pytest\.mark\.e2e\b", re.M)


def pytest_ignore_collect(collection_path, config):
    """The quick tier (`-m "not e2e"`) does not import the modules whose every test is e2e (each
    xdist worker would rewrite their asserts and import what they import, to deselect them all)."""
    if config.getoption("markexpr", "") == "not e2e" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_") and _ALL_E2E.search(collection_path.read_bytes()):
        return True
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On xdist workers: the test files heaviest first (CPU seconds of tests/suite_weights.tsv, the
    quick tier's column under `-m "not e2e"`), so that `--dist loadfile` (with addopts'
    --no-loadscope-reorder) starts the long files first and the two workers end together. Every
    worker orders the same way; within a file the order stays. A run without workers keeps pytest's."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not items:
        return
    import suite_weights
    quick = config.getoption("markexpr", "") == "not e2e"
    weights = suite_weights.load("quick" if quick else "all")
    counts = Counter(item.path.name for item in items)
    rank = {name: k for k, name in enumerate(suite_weights.order_files(dict(counts), weights))}
    items.sort(key=lambda item: rank[item.path.name])


class CpuLog:
    """NNBUILD_CPULOG=FILE: one line per test (nodeid, self CPU s, children CPU s, wall s, the xdist
    worker), appended by every worker; tests/suite_weights.py turns a whole run's into the table the order comes from."""

    def __init__(self, path):
        self.path = path

    @staticmethod
    def _cpu(who):
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self_cpu, children, wall = self._cpu(resource.RUSAGE_SELF), self._cpu(resource.RUSAGE_CHILDREN), time.time()
        yield
        line = (f"{item.nodeid}\t{self._cpu(resource.RUSAGE_SELF) - self_cpu:.3f}\t"
                f"{self._cpu(resource.RUSAGE_CHILDREN) - children:.3f}\t{time.time() - wall:.3f}\t"
                f"{os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")
        with open(self.path, "a") as log:
            log.write(line)


def pytest_configure(config):
    if os.environ.get("NNBUILD_CPULOG"):
        config.pluginmanager.register(CpuLog(os.environ["NNBUILD_CPULOG"]), "nnbuild-cpulog")
