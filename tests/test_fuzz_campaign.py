"""The standing hostile-input campaign over every format nnbuild reads (the cases are in
tests/fuzz_campaign.py). Each case runs as a user runs nnbuild, in its own process, under strace,
with a canary folder beside the case's folder. It must end in its time with exit 0 (and, for
`generate`, C that compiles under -Wall -Wextra -Werror -pedantic) or with one line naming the
problem: never a traceback, a recursion or memory failure. And it must not act outside its folder:
no path of the canary folder or /proc/*/environ in any system call, no file written outside the
case's folder, no program run but the toolchain's.

NNBUILD_FUZZ_SEED=N runs the seeded random mutations with another seed (the hand-made attacks
are the same for every seed). The first mutated file of each format runs as every other case;
the format's further mutated files run the same command in this process (cli.main: the same
outcome checks, without strace and the process limits: a random byte edit does not aim outside
the folder, the first mutation and the hand-made attacks check that), and each in its own process
under strace with NNBUILD_SLOW_TESTS=1."""

import functools
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fuzz_campaign as campaign
from conftest import REPO, SLOW_TIER, have

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("strace"), reason="strace not installed (bash scripts/setup.sh)")]

SEED = int(os.environ.get("NNBUILD_FUZZ_SEED", "1"))
#: one case's whole run under strace on a loaded two-core machine; refusals take seconds
TIMEOUT_S = 120
MEMORY_BYTES = 4 << 30
#: the programs a case may start (the toolchain's parts, the simulator harness, the check program)
PROGRAMS = re.compile(r"^(python3(\.\d+)?|scons|gcc|cc|cc1|as|ld|collect2|lto-wrapper|ldconfig(\.real)?|"
                      r"avr-[\w+.-]+|arm-none-eabi-[\w+.-]+|simavr_run|check(\.elf)?|stdbuf|ar|ranlib|uname|g\+\+|c\+\+)$")
TRACED = "execve,open,openat,creat,unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,symlink,symlinkat,link,linkat"
CALL = re.compile(r'^(\d+)\s+(\w+)\((?:AT_FDCWD, |-?\d+, )?"((?:[^"\\]|\\.)*)"(.*)$')
WRITES = ("creat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "symlink",
          "symlinkat", "link", "linkat")


def further_mutation(case):
    """A seeded random mutation of a format beyond its first (name <format>-mutated-<k>, k > 0)."""
    found = re.search(r"-mutated-(\d+)$", case.name)
    return bool(found) and int(found.group(1)) > 0


def cases(in_process=False):
    """The cases run each in its own process under strace (in_process: those run in this process)."""
    for fmt, make in campaign.FORMATS.items():
        for case in make(SEED):
            if in_process == (further_mutation(case) and not SLOW_TIER):
                yield pytest.param(case, id=f"{fmt}:{case.name}")


@functools.cache
def seccomp_filter():
    """strace's --seccomp-bpf where this strace has it: the kernel stops a traced process at the
    traced calls only (the same log), not at each of the interpreter's other system calls."""
    probe = subprocess.run(["strace", "--seccomp-bpf", "-f", "-qq", "-e", "trace=execve", "-o", os.devnull, "true"],
                           capture_output=True)
    return ["--seccomp-bpf"] if probe.returncode == 0 else []


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The nnbuild the cases run: a copy of the checkout's package with its bytecode compiled, as an
    installed nnbuild has it (a case writes no bytecode: without it, each case's interpreter would
    compile every module of nnbuild from its source again), the boards and examples beside it."""
    import compileall
    root = tmp_path_factory.mktemp("installed")
    shutil.copytree(REPO / "nnbuild", root / "nnbuild", ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(root / "nnbuild", quiet=1)
    shutil.copytree(REPO / "toolchains", root / "toolchains")
    (root / "firmware_examples").symlink_to(REPO / "firmware_examples")
    return root


def run_case(case, root, installed):
    """(arguments, completed process, seconds, strace lines) of one case in root/case, the canary in
    root/outside, nnbuild from `installed`."""
    folder = root / "case"
    folder.mkdir()
    (folder / "tmp").mkdir()
    args = case.make(folder)
    package = installed
    if case.scons:   # a copy of the project (its examples are found beside its package)
        package = project = folder / "project"
        for part in ("SConstruct", "site_scons", "toolchains"):
            (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(
                REPO / part, project / part, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                               if (REPO / part).is_dir() else {}))
        shutil.copytree(installed / "nnbuild", project / "nnbuild")   # its bytecode too (copied with its times)
        command, cwd = [sys.executable, "-m", "SCons", *args], project
    else:
        command, cwd = [sys.executable, "-m", "nnbuild", *args], folder
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")},
           "TMPDIR": str(folder / "tmp"), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(folder),
           "PYTHONPATH": str(package)}
    log = root / "strace.log"
    start = time.monotonic()
    done = subprocess.run(["strace", *seccomp_filter(), "-f", "-qq", "-s", "4096", "-e", f"trace={TRACED}", "-o", str(log), *command],
                          cwd=cwd, env=env, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S,
                          preexec_fn=limited)
    return args, done, time.monotonic() - start, log.read_text(errors="replace").splitlines()


def trespasses(lines, root, cwd_of_case):
    """What the traced processes did outside the case's folder, one description each."""
    folder, outside = (root / "case").resolve(), (root / campaign.OUTSIDE).resolve()
    found = []
    for line in lines:
        call = CALL.match(line)
        if not call:
            continue
        _, name, raw, rest = call.groups()
        path = Path(os.path.normpath(cwd_of_case / raw.encode().decode("unicode_escape", errors="replace")))
        if path == outside or outside in path.parents:
            found.append(f"touched the canary: {line}")
        elif re.match(r"^/proc/[^/]+/environ$", str(path)):
            found.append(f"read the environment: {line}")
        elif name == "execve":
            if " = 0" in rest and not PROGRAMS.match(path.name):
                found.append(f"ran a program: {line}")
        elif " = -1 " in rest:
            continue
        elif name in WRITES or (name in ("open", "openat") and re.search(r"O_WRONLY|O_RDWR|O_CREAT", rest)):
            if not (path == folder or folder in path.parents or str(path) in ("/dev/null", "/dev/tty")):
                found.append(f"wrote outside its folder: {line}")
    return found


def compiles(out, target):
    sources = sorted(out.glob("*.c"))
    cc = ["avr-gcc", "-mmcu=atmega1284"] if target == "avr" else ["gcc"]
    done = subprocess.run([*cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only",
                           f"-I{out}", *map(str, sources)], capture_output=True, text=True)
    return done.returncode == 0, done.stderr[-2000:]


def check_outcome(args, done, out, seconds):
    """Exit 0 (and, for `generate`, C that compiles) or 2 with one line naming the problem, in
    time, with no partial outputs; never a traceback, a recursion or memory failure."""
    said = done.stdout + done.stderr
    for word in ("Traceback", "RecursionError", "MemoryError", "out of memory", "Fatal Python error"):
        assert word not in said, said[-3000:]
    assert done.returncode in (0, 2), f"exit {done.returncode}: {said[-3000:]}"
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if "error" in line or line.startswith("scons: *** ")]
        assert errors and "nnbuild" in errors[0] and len(errors[0]) < 1000, done.stderr[-3000:]
        if args[0] == "generate":   # no partial outputs
            assert not out.is_dir() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
        assert seconds < TIMEOUT_S / 2, f"refused after {seconds:.0f} s"
    elif args[0] == "generate":
        target = args[args.index("--target") + 1] if "--target" in args else "host"
        ok, why = compiles(out, target)
        assert ok, why


@pytest.mark.parametrize("case", list(cases()))
def test_hostile_input_is_refused_in_one_line_and_stays_in_its_folder(case, tmp_path, installed):
    args, done, seconds, lines = run_case(case, tmp_path, installed)
    cwd = tmp_path / "case" / ("project" if case.scons else "")
    found = trespasses(lines, tmp_path, cwd)
    assert not found, "\n".join(found[:5])
    check_outcome(args, done, tmp_path / "case" / "out", seconds)


@pytest.mark.parametrize("case", list(cases(in_process=True)))
def test_further_mutated_files_are_refused_in_one_line_or_compile(case, tmp_path, run_cli):
    """The further seeded mutations of each format, through `nnbuild` in this process: an
    exception other than a refusal escapes cli.main and fails the test as a traceback would."""
    folder = tmp_path / "case"
    (folder / "tmp").mkdir(parents=True)
    args = case.make(folder)
    start = time.monotonic()
    done = run_cli(*args, cwd=folder)
    check_outcome(args, done, folder / "out", time.monotonic() - start)
