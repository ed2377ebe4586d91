"""nnbuild's CMake module in a small user project (firmware_examples/xor: a 2-2-1 network and its
main.c), configured by real cmake and built by real ninja: every keyword checked at configure time,
a failed gate that leaves no gate.json and no release image (also after a rerun), boards by path,
the project's boards/ folder and NNBUILD_BOARDS kept in the cache, PRECISION auto, the waivers.
The fast checks of the same code (keyword suggestions, value parsing) are at the end, unmarked."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import cmake_tools
from conftest import REPO, have

CMAKE_DIR = REPO / "nnbuild" / "cmake"
XOR = REPO / "firmware_examples" / "xor"
needs_cmake = pytest.mark.skipif(not have("cmake", "ninja"), reason="cmake and ninja needed (pip install cmake ninja)")
needs_avr = pytest.mark.skipif(not have("avr-gcc", "avr-objcopy", "simavr"), reason="avr-gcc and simavr needed")


def environment(**extra):
    """This checkout's nnbuild for every step; no board folder from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def project(root, model_args, *, languages="C", firmware=True):
    """A user project in `root`: xor.h5 and main.c, one nnbuild_add_model(ctl ...) and the app."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(XOR / "xor.h5", root / "xor.h5")
    shutil.copy2(XOR / "main.c", root / "main.c")
    app = "add_executable(app main.c)\nnnbuild_add_firmware(app MODELS ctl)\n" if firmware else ""
    (root / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.20)\nproject(user {languages})\n"
        f'list(APPEND CMAKE_MODULE_PATH "{CMAKE_DIR}")\ninclude(nnbuild)\n'
        f"nnbuild_add_model(ctl MODEL xor.h5 {model_args})\n{app}")
    return root


def configure(root, *args, env=None, build="b"):
    return subprocess.run([cmake_tools.cmake(), "-G", "Ninja", "-S", str(root), "-B", str(root / build),
                           f"-DNNBUILD_PYTHON={sys.executable}", *args],
                          capture_output=True, text=True, env=env or environment())


def ninja(root, *targets, env=None, build="b"):
    return subprocess.run([cmake_tools.ninja(), "-C", str(root / build), *targets], capture_output=True, text=True,
                          env=env or environment())


def released(build):
    """Every gate.json and firmware image under a build folder (CMake's own probes aside)."""
    return sorted(str(p.relative_to(build)) for p in build.rglob("*")
                  if (p.name == "gate.json" or p.suffix in (".hex", ".bin")) and "CMakeFiles" not in p.parts)


def one_line_error(result):
    """The CMake error's message, joined from CMake's wrapped lines."""
    text = result.stderr
    match = re.search(r"CMake Error at [^\n]*:\n(.*?)\n(?:Call Stack|\n)", text, re.S)
    assert match, text
    return " ".join(match.group(1).split())


@needs_cmake
@pytest.mark.e2e
@pytest.mark.parametrize("args, expected", [
    ("DEADLNE 1ms", "nnbuild_add_model(ctl): unknown keyword 'DEADLNE'; did you mean DEADLINE?"),
    ("PRECSION q8", "nnbuild_add_model(ctl): unknown keyword 'PRECSION'; did you mean PRECISION?"),
    ("deadline 1ms", "nnbuild_add_model(ctl): unknown keyword 'deadline'; did you mean DEADLINE?"),
    ("PRECISION q8 q16", "nnbuild_add_model(ctl): unexpected argument 'q16': each keyword takes one value"),
    ("PRECISION q8 DEADLINE", "nnbuild_add_model(ctl): keyword DEADLINE is given without a value"),
    ("PRECISION q9", "nnbuild_add_model(ctl): PRECISION: precision 'q9'"),
    ("DEADLINE 5", "nnbuild_add_model(ctl): DEADLINE: deadline '5' is not a duration with its unit"),
    ("SHAPE v9", "nnbuild_add_model(ctl): SHAPE: 'v9' is not one of"),
    ("WCET off", "nnbuild_add_model(ctl): WCET: 'off' is not one of auto, skip"),
    ("SEED one", "nnbuild_add_model(ctl): SEED: 'one' is not an integer"),
    ("BOARD avrr", "nnbuild_add_model(ctl): BOARD: unknown target 'avrr'"),
])
def test_a_bad_keyword_or_value_fails_configuration_in_one_line(tmp_path, args, expected):
    result = configure(project(tmp_path, args, languages="NONE", firmware=False))
    assert result.returncode != 0
    assert expected in one_line_error(result), result.stderr
    assert not (tmp_path / "b" / "build.ninja").exists()


@needs_cmake
@pytest.mark.e2e
def test_a_misspelled_firmware_keyword_fails_configuration(tmp_path):
    # no language: the call stops the configuration before CMake would need a compiler for app
    root = project(tmp_path, "PRECISION float32", languages="NONE", firmware=False)
    with open(root / "CMakeLists.txt", "a") as f:
        f.write("add_executable(app main.c)\nnnbuild_add_firmware(app MODLES ctl)\n")
    result = configure(root)
    assert result.returncode != 0
    assert "nnbuild_add_firmware(app): unknown keyword 'MODLES'; did you mean MODELS?" in one_line_error(result)


@needs_cmake
@needs_avr
@pytest.mark.e2e
def test_a_failed_gate_leaves_no_gate_and_no_image_on_a_board_given_by_path(tmp_path):
    """The board given as a file relative to the source folder (through nnbuild-board.cmake);
    a passing deadline releases app.hex/.bin; a failing one, after a reconfigure, fails the build
    and leaves no gate.json and no image, and a rerun of ninja fails again with still none."""
    root = project(tmp_path, "PRECISION float32 TOLERANCE 1e-5 RANGE 0,1 COUNT 4 DEADLINE 5ms")
    (root / "hw").mkdir()
    board = json.loads((REPO / "toolchains" / "avr.json").read_text())
    board["name"] = "myavr"
    (root / "hw" / "myavr.json").write_text(json.dumps(board, indent=1))
    toolchain = [f"-DCMAKE_TOOLCHAIN_FILE={CMAKE_DIR / 'nnbuild-board.cmake'}", "-DNNBUILD_BOARD=hw/myavr.json"]
    assert configure(root, *toolchain).returncode == 0
    first = ninja(root)
    build = root / "b"
    assert first.returncode == 0, first.stdout[-3000:]
    # each analysis once, over the linked image (as NNFirmware): the model's own WCET, report and gate
    # over its check program are not in `all`
    assert released(build) == ["app.bin", "app.checks/xor/gate.json", "app.hex"]
    assert not (build / "nnbuild-models/ctl/wcet.json").exists()
    report = json.loads((build / "app.checks/xor/report.json").read_text())
    assert report["target"] == "myavr" and report["wcet"]["met"] is True
    assert report["deadline_origin"] == "DEADLINE of nnbuild_add_model"
    lines = [l for l in first.stdout.splitlines() if l.startswith("[")]
    assert len([l for l in lines if "WCET analysis" in l]) == 1, lines
    images = [i for i, l in enumerate(lines) if "Writing image" in l]
    gates = [i for i, l in enumerate(lines) if "Gates " in l]
    assert images and gates and min(images) > max(gates), lines    # the images come after every gate
    own = ninja(root, "ctl_checks")   # the model's own gate, on demand
    assert own.returncode == 0, own.stdout[-3000:]
    assert released(build) == ["app.bin", "app.checks/xor/gate.json", "app.hex", "nnbuild-models/ctl/gate.json"]
    assert "Writing image" not in own.stdout and "app.checks" not in own.stdout, own.stdout

    text = (root / "CMakeLists.txt").read_text().replace("DEADLINE 5ms", "DEADLINE 0.1ms")
    (root / "CMakeLists.txt").write_text(text)
    failed = ninja(root)   # ninja reconfigures: the CMakeLists.txt changed
    assert failed.returncode != 0 and "> deadline 0.1 ms" in failed.stdout, failed.stdout[-3000:]
    assert released(build) == []
    assert (build / "app.checks/xor/report.json").exists()  # the new report, alone
    assert not (build / "nnbuild-models/ctl/report.json").exists()   # the model's own, of the earlier run: removed
    again = ninja(root)
    assert again.returncode != 0 and "> deadline 0.1 ms" in again.stdout, again.stdout[-3000:]
    assert released(build) == []


@pytest.fixture(scope="module")
def boards_project(tmp_path_factory):
    """One host project configured three ways: b with -DNNBUILD_BOARD=mine/host2.json (built), c
    with the boards/ folder's host3 (configured), d with host4 found through NNBUILD_BOARDS given
    at configure time only (its checks built by a ninja without it). test_waivers_in_cmake_syntax
    goes on from d's checks: (root, {build: CompletedProcess of its configure or ninja})."""
    if not have("cmake", "ninja"):
        pytest.skip("cmake and ninja needed (pip install cmake ninja)")
    root = project(tmp_path_factory.mktemp("boards"), "PRECISION float32 TOLERANCE 1e-5 RANGE 0,1 COUNT 4")
    host = json.loads((REPO / "toolchains" / "host.json").read_text())
    for folder, name in (("mine", "host2"), ("boards", "host3"), ("shared", "host4")):
        (root / folder).mkdir()
        (root / folder / f"{name}.json").write_text(json.dumps(dict(host, name=name), indent=1))
    done = {"b configure": configure(root, "-DNNBUILD_BOARD=mine/host2.json")}
    done["b"] = ninja(root)
    done["c configure"] = configure(root, "-DNNBUILD_BOARD=host3", build="c")
    done["d configure"] = configure(root, "-DNNBUILD_BOARD=host4", build="d", env=environment(NNBUILD_BOARDS="shared"))
    done["d"] = ninja(root, "ctl_checks", build="d")        # no NNBUILD_BOARDS in ninja's environment
    return root, done


@needs_cmake
@pytest.mark.e2e
def test_boards_by_path_from_the_boards_folder_and_from_the_cached_nnbuild_boards(boards_project):
    """-DNNBUILD_BOARD=<relative file> builds the firmware; the project's boards/ folder is found
    without a variable; NNBUILD_BOARDS given at configure time only is enough for ninja."""
    root, done = boards_project
    assert done["b configure"].returncode == 0, done["b configure"].stderr
    assert done["b"].returncode == 0, done["b"].stdout[-3000:]
    assert "app.hex" in released(root / "b")
    assert json.loads((root / "b/app.checks/xor/report.json").read_text())["target"] == "host2"

    # the boards/ folder is searched at configure time; every step then names the board by its file
    # (build.ninja), so the build of "c" would run the same chain as "d" below, which builds it
    assert done["c configure"].returncode == 0, done["c configure"].stderr
    assert f"--board {root / 'boards' / 'host3.json'} " in (root / "c/build.ninja").read_text()

    assert done["d configure"].returncode == 0, done["d configure"].stderr
    assert "NNBUILD_BOARDS:STRING=shared" in (root / "d/CMakeCache.txt").read_text()
    assert done["d"].returncode == 0, done["d"].stdout[-3000:]
    assert json.loads((root / "d/nnbuild-models/ctl/report.json").read_text())["target"] == "host4"


@needs_cmake
@pytest.mark.e2e
def test_precision_auto_builds_the_candidates_and_compiles_the_chosen_one(tmp_path):
    """PRECISION auto on a Gravity program (firmware_examples/gravity_digits: two candidates on the
    host, float32 and float64, the cheapest real choice; NNModel(precision="auto") builds the same
    program and chooses the same, test_user_edge.py): every candidate built, the library compiles the
    chosen one's C, and nnbuild_add_firmware checks the app holding the Gravity program (the gravity
    firmware test of test_gravity_scons.py, merged here). The whole precision=auto build of an MLP
    (every fixed-point candidate, a WCET ranking):
    test_scons_e2e.py::test_precision_auto_picks_the_fastest_qualifying_candidate."""
    example = REPO / "firmware_examples" / "gravity_digits"
    shutil.copy2(example / "main.c", tmp_path / "main.c")
    (tmp_path / "CMakeLists.txt").write_text(
        f'cmake_minimum_required(VERSION 3.20)\nproject(gdemo C)\nlist(APPEND CMAKE_MODULE_PATH "{CMAKE_DIR}")\n'
        f"include(nnbuild)\nnnbuild_add_model(digits MODEL {example / 'gravity_digits.g'} NAME gravity_digits "
        "PRECISION auto RANGE 0,1 COUNT 4)\nadd_executable(app main.c)\nnnbuild_add_firmware(app MODELS digits)\n")
    root = tmp_path
    assert configure(root).returncode == 0
    built = ninja(root)
    assert built.returncode == 0, built.stdout[-3000:]
    model = root / "b/nnbuild-models/digits"
    report = json.loads((model / "report.json").read_text())
    chosen = report["auto"]["chosen"]
    candidates = {row["precision"] for row in report["auto"]["candidates"]}
    assert candidates == {"float32", "float64"} and chosen == "float32" and report["precision"] == chosen
    assert {p.name for p in (model / "candidates").iterdir()} == candidates
    for name in ("gravity_digits.c", "gravity_digits.h"):   # the library compiles the chosen candidate's C
        assert (model / "gen" / name).read_bytes() == (model / "candidates" / chosen / "gen" / name).read_bytes()
    assert "app.hex" in released(root / "b") and (model / "gate.json").exists()
    firmware = json.loads((root / "b/app.checks/gravity_digits/report.json").read_text())   # over the chosen C
    assert firmware["max_abs_error"] == report["max_abs_error"] and firmware["precision"] in ("auto", chosen)
    assert firmware["kind"] == "gravity" and firmware["blob"]["memory_hard_bytes"] == 4944
    assert (root / "b/app.checks/gravity_digits/gate.json").exists()
    assert "no work to do" in ninja(root).stdout


@needs_cmake
@pytest.mark.e2e
def test_waivers_in_cmake_syntax(boards_project):
    """On a host board (no WCET analyzer) a DEADLINE cannot be checked and fails; DEADLINE none and
    WCET skip are CMake's waivers, and the hint names them in that syntax. On boards_project's
    build d (host4), whose chain is built: a deadline reconfigures it and reruns its report and gate
    (ninja reconfigures with the cached NNBUILD_BOARDS)."""
    root, done = boards_project
    assert done["d"].returncode == 0, done["d"].stdout[-3000:]

    def checks_of_d():
        return ninja(root, "ctl_checks", build="d")

    text = (root / "CMakeLists.txt").read_text()
    text = re.sub(r"COUNT 4( DEADLINE [^\s)]+( WCET skip)?)?\)", "COUNT 4 DEADLINE 5ms)", text)
    (root / "CMakeLists.txt").write_text(text)
    failed = checks_of_d()
    assert failed.returncode != 0 and "deadline 5 ms cannot be checked" in failed.stdout, failed.stdout[-3000:]
    from nnbuild import steps
    if any(a.dest == "interface" for a in steps.STEPS["gate"].args):
        assert "waive it with DEADLINE none or WCET skip" in failed.stdout, failed.stdout[-3000:]
    for waiver, line in (("DEADLINE 5ms WCET skip", "wcet=skip"), ("DEADLINE none", None)):
        text = re.sub(r"DEADLINE [^\s)]+( WCET skip)?", waiver, (root / "CMakeLists.txt").read_text())
        (root / "CMakeLists.txt").write_text(text)
        passed = checks_of_d()
        assert passed.returncode == 0, passed.stdout[-3000:]
        report = json.loads((root / "d/nnbuild-models/ctl/report.json").read_text())
        assert report["deadline_ms"] is None and (root / "d/nnbuild-models/ctl/gate.json").exists()
        if line:
            assert any(line in w for w in report.get("waivers", [])), report.get("waivers")


def test_every_keyword_of_the_module_is_documented():
    module = (CMAKE_DIR / "nnbuild.cmake").read_text()
    keywords = set()
    for match in re.finditer(r"set\(_NNBUILD_\w+_KEYWORDS ([^)]*)\)", module):
        keywords |= set(match.group(1).split())
    assert {"MODEL", "DEADLINE", "PRECISION", "WCET", "MODELS"} <= keywords
    docs = [REPO / "docs" / "using.md"]
    text = "\n".join(p.read_text() for p in docs)
    missing = [k for k in sorted(keywords) if f"`{k}`" not in text]
    assert docs and not missing, missing


def test_the_nearest_keyword_ignores_case_and_knows_when_there_is_none():
    from nnbuild import pipeline
    keywords = ["MODEL", "BOARD", "PRECISION", "DEADLINE", "WCET"]
    assert pipeline.nearest_keyword("DEADLNE", keywords) == "DEADLINE"
    assert pipeline.nearest_keyword("precison", keywords) == "PRECISION"
    assert pipeline.nearest_keyword("q16", keywords) is None


def test_cmake_model_values_use_the_shared_parsers(tmp_path):
    """What the CMake export does with each value: the same parsers (options.*) every interface
    uses, a waiver in the report step's spelling, the deadline's origin named."""
    from types import SimpleNamespace

    from nnbuild import pipeline
    from nnbuild.errors import NNBuildError
    base = dict(model=str(XOR / "xor.h5"), board="avr", name=None, shape=None, precision=None, opt=None,
                tolerance=None, count=None, seed=None, range=None, deadline=None, wcet=None, environment=None,
                data=None)
    values = pipeline.cmake_model_values(SimpleNamespace(**dict(base, deadline="5ms", precision="auto")))
    assert values["deadline"] == "5.0ms" and values["deadline_origin"] == pipeline.CMAKE_DEADLINE_ORIGIN
    assert values["precision"] == "auto" and values["board"].endswith("avr.json") and values["name"] == "xor"
    skipped = pipeline.cmake_model_values(SimpleNamespace(**dict(base, deadline="5ms", wcet="skip")))
    assert skipped["deadline"] == "unchecked:5.0ms" and skipped["wcet"] == "skip"
    assert pipeline.cmake_model_values(SimpleNamespace(**dict(base, deadline="None")))["deadline"] is None
    with pytest.raises(NNBuildError, match="COUNT: check inputs"):
        pipeline.cmake_model_values(SimpleNamespace(**dict(base, count="0")))


def test_one_nnbuild_run_takes_several_steps_in_order_and_stops_at_the_first_failure(tmp_path, capsys):
    """CMake's grouped commands (`nnbuild STEP ... --then STEP ...`): each step as its own run would
    do it, in order; the first failing one ends the run with its status, the steps after it do not run."""
    from nnbuild import cli
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"tolerance": 1e-4, "max_abs_error_by_run": {"host": 0.0}}))
    bad.write_text(json.dumps({"tolerance": 1e-4, "max_abs_error_by_run": {"host": 1.0}}))
    outs = [tmp_path / f"gate{i}.json" for i in range(3)]
    assert cli.main(["gate", str(good), "-o", str(outs[0]), "--then", "gate", str(good), "-o", str(outs[1])]) == 0
    assert outs[0].is_file() and outs[1].is_file()
    for out in outs:
        out.unlink(missing_ok=True)
    assert cli.main(["gate", str(good), "-o", str(outs[0]), "--then", "gate", str(bad), "-o", str(outs[1]),
                     "--then", "gate", str(good), "-o", str(outs[2])]) == 2
    assert outs[0].is_file() and not outs[1].exists() and not outs[2].exists()
    assert "host run vs float64 reference" in capsys.readouterr().err
    assert cli.main(["boards", "--then", "gate", str(good), "-o", str(outs[2])]) == 2   # pipeline steps only
    assert "'--then' separates pipeline steps (got 'boards')" in capsys.readouterr().err and not outs[2].exists()


def test_a_firmware_build_runs_each_analysis_once_in_few_processes(tmp_path):
    """The firmware's CMake code (cmake_firmware over a model's export): per model one command for
    its memory report, WCET bound, report and gate over the image, one for both images; the model's
    own analysis (over its check program) leaves `all` and the images no longer wait for it."""
    from nnbuild import pipeline
    model_dir = tmp_path / "m"
    text = pipeline.cmake_model("ctl", str(model_dir), str(tmp_path / "tools"), model=str(XOR / "xor.h5"),
                                name="xor", board="avr", precision="float32", wcet=None)
    assert text.count("-m nnbuild") == 6   # generate, reference, programs, checks (runs...), analysis
    firmware = pipeline.cmake_firmware("app", "$<TARGET_FILE:app>", str(tmp_path), [str(model_dir)])
    assert firmware.count("-m nnbuild") == 2 and firmware.count('"--then"') == 4, firmware
    assert "PROPERTY NNBUILD_FIRMWARE_CHECKS TRUE" in firmware and "ctl_checks PROPERTY EXCLUDE_FROM_ALL TRUE" in firmware
    assert str(model_dir / "gate.json") not in firmware.split("Writing image")[0].rsplit("add_custom_command", 1)[1]
