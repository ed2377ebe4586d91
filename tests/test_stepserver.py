"""The step server (nnbuild.scons_tool.stepserver): SCons' steps forked from one process that
imported nnbuild once behave as `python -m nnbuild STEP` in a process of their own: the same exit
status, the same one-line error, the action's environment and folder; and the server leaves with
its SCons run, removing its socket folder."""

import os
import sys
from pathlib import Path

import pytest

from nnbuild.scons_tool import run_argv, stepserver

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(capfd):
    """A step server started on first use in the test (under capfd: its children write where a step
    process would)."""
    env, made = dict(os.environ, PYTHONPATH=str(REPO)), []

    class Lazy:
        def run(self, *args):
            if not made:
                made.append(stepserver.StepServer(sys.executable, env))
            return made[0].run(*args)

    yield Lazy(), env
    for started in made:
        started.close()


#: steps whose every outcome is compared, served one after the other by one server (a server start
#: is an interpreter importing nnbuild: one per test, not one per step)
ARGVS = [
    ["image", "missing.elf", "--board", "no_such_board", "--output", "out.hex"],   # one-line error, status 2
    ["gate", "--help"],                                                              # argparse's exit 0
    ["gate", "report.json", "--output", "gate.json", "--interface", "cobol"],        # a refused choice
]


def test_a_step_in_the_server_is_the_step_in_its_own_process(server, tmp_path, capfd):
    started, env = server
    for argv in ARGVS:
        alone = run_argv([sys.executable, "-m", "nnbuild", *argv], env)
        own = capfd.readouterr()
        served = started.run(argv, env, str(tmp_path))
        assert (served, capfd.readouterr()) == (alone, own), argv
        assert not list(tmp_path.iterdir()), argv   # a failing step leaves nothing
    # the same server then: an uncaught exception is a traceback and status 1 (was a test of its own)
    status = started.run(["gate", "missing.json", "--output", "gate.json"], env, str(tmp_path))
    assert status == 1
    assert "FileNotFoundError" in capfd.readouterr().err


def test_a_step_runs_in_the_actions_folder_with_the_actions_environment(server, tmp_path, capfd):
    started, env = server
    for folder in ("boards", "mine"):   # the project's board folder (in the cwd), and $NNBUILD_BOARDS
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "host.json").write_bytes((REPO / "toolchains" / "host.json").read_bytes())
    assert started.run(["boards"], dict(env, NNBUILD_BOARDS=str(tmp_path / "mine")), str(tmp_path)) == 0
    line = capfd.readouterr().out.splitlines()[-1]
    assert line.startswith("board directories: ")
    assert str(tmp_path / "boards") in line and str(tmp_path / "mine") in line
    assert started.run(["boards"], env, str(REPO)) == 0   # the next step: no trace of the first one's
    assert str(tmp_path) not in capfd.readouterr().out


def test_the_server_leaves_with_its_scons_run():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = stepserver.StepServer(sys.executable, env)
    assert started.run(["gate", "--help"], env, str(REPO)) == 0
    started.close()   # SCons' exit closes the lifeline
    assert started.process.poll() is not None
    assert not os.path.exists(started.folder)


def test_a_forked_server_serves_only_steps_that_would_run_the_same():
    server = object.__new__(stepserver.ForkedStepServer)
    server.python, server.paths = sys.executable, {str(REPO)}
    server.env = {v: None for v in stepserver.STARTUP_VARIABLES}
    assert server.serves(sys.executable, {"PYTHONPATH": str(REPO), "LANG": "C"})
    assert not server.serves("/other/python", {"PYTHONPATH": str(REPO)})
    assert not server.serves(sys.executable, {"PYTHONPATH": f"{REPO}{os.pathsep}/elsewhere"})
    assert not server.serves(sys.executable, {"PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"})
