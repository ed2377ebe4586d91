"""Reproducible across checkouts: the same build in two copies of the project at different paths
gives the same bytes in every output (objects, libraries, ELF, .hex, reports), and a shared SCons
CacheDir (`scons ... cache=DIR`) serves a second checkout every cacheable step, simulator runs and
WCET bounds included."""

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import copy_project, have, scons
from nnbuild.checks import report as reports

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("avr-gcc", "avr-objcopy", "simavr"), reason="avr toolchain/simavr missing")]

#: progress labels of steps that are never taken from a cache (machine-dependent verdicts, summaries)
UNCACHED = {"Memory report", "Semantic check", "Report", "Gates"}


def checkout(dest):
    """A copy of the project (with the examples) whose steps import its own nnbuild."""
    Path(dest).mkdir(parents=True)
    project = copy_project(dest)
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples", project / "examples",
                    ignore=shutil.ignore_patterns("build", ".sconsign*", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")}
    env["PYTHONPATH"] = str(project)
    return project, env


def outputs(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_checkouts_at_different_paths_build_byte_identical_outputs(tmp_path):
    """A user's firmware project (two models, NNFirmware: app.elf, app.hex, app.bin, per-model
    reports over the image) built for avr in two checkouts: every output file is the same."""
    built = []
    for project, env in [checkout(where) for where in (tmp_path / "a", tmp_path / "second" / "clone-with-a-longer-path")]:
        app = project / "examples" / "scons_project"
        result = scons(app, "board=avr", env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        built.append(outputs(app / "build"))
    first, second = built
    assert sorted(first) == sorted(second)
    assert {"avr/app.elf", "avr/app.hex", "avr/xor/check.elf", "avr/xor/libxor.a",
            "avr/app.checks/xor/report.json"} <= set(first)
    differ = [path for path in first if first[path] != second[path]]
    assert differ == [], f"differ between the two checkouts: {differ}"
    # the report speaks of the image it gates: the ELF's and the written .hex's sha256, and where
    # the deadline came from
    report = json.loads(first["avr/app.checks/xor/report.json"])
    reports.validate(report)
    elf = next(f for f in report["files"] if f["role"] == "elf:firmware")
    assert elf["file"] == "build/avr/app.elf"
    assert elf["sha256"] == hashlib.sha256(first["avr/app.elf"]).hexdigest()
    assert elf["ihex_sha256"] == hashlib.sha256(first["avr/app.hex"]).hexdigest()
    assert report["deadline_ms"] == 5.0 and report["deadline_origin"] == "NNModel deadline in the SConstruct"
    assert report["timing"]["assumptions"].startswith("Every instruction takes the clock cycles of the ATmega1284")
    assert "-DF_CPU=20000000UL" in report["compiler"]["compile_flags"] and report["passed"] is True


def test_a_second_checkout_takes_every_cacheable_step_from_a_shared_cache(tmp_path):
    """`scons target=avr model=xor cache=DIR` in one checkout, then in another at another path:
    the second compiles, links, runs and analyses nothing; it retrieves every one of those outputs
    from the cache and runs only the steps that are never cached (memory report, semantic check,
    report, gates); its outputs are the first's."""
    cache = tmp_path / "cache"
    logs, built = [], []
    for project, env in [checkout(where) for where in (tmp_path / "a", tmp_path / "b" / "other")]:
        result = scons(project, "target=avr", "model=xor", f"cache={cache}", env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        logs.append(result.stdout)
        built.append(outputs(project / "build" / "avr" / "xor"))
    second = logs[1]
    retrieved = set(re.findall(r"Retrieved `([^']+)' from cache", second))
    ran = set(re.findall(r"^\[nnbuild\] (\S.*?)\s{2,}\S", second, re.M))
    assert ran <= UNCACHED, f"the second checkout ran {sorted(ran - UNCACHED)}"
    assert {"build/avr/xor/wcet.json", "build/avr/xor/run_simavr.npz", "build/avr/xor/run_host.npz",
            "build/avr/xor/check.elf", "build/avr/xor/firmware.elf", "build/avr/xor/gen/xor.c",
            "build/tools/simavr_run", "build/avr/xor/obj/xor.o"} <= retrieved, sorted(retrieved)
    assert "WCET[" not in second and "builtin-avr:" not in second
    first, other = built
    for path, data in other.items():
        assert first[path] == data, f"{path} differs"
