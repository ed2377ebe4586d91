"""Reproducible across checkouts: the same build in two copies of the project at different paths
gives the same bytes in every output (objects, libraries, ELF, .hex, reports), and a shared SCons
CacheDir serves another checkout every cacheable step, simulator runs and WCET bounds included."""

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


def with_cache(app, cache):
    """The user's SConstruct with a shared CacheDir: the one line a user adds for it."""
    sconstruct = app / "SConstruct"
    sconstruct.write_text(sconstruct.read_text() + f"CacheDir({str(cache)!r})\n")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A user's firmware project (examples/scons_project: two models, NNFirmware: app.elf, app.hex,
    app.bin, per-model reports over the image) built for avr in two checkouts at different paths,
    each on its own (the second has no cache); the first also fills a shared CacheDir, which a third
    checkout then builds from (test_a_third_checkout_takes_every_cacheable_step_from_a_shared_cache).
    Returns (cache, [{output: bytes} of the first, of the second])."""
    root = tmp_path_factory.mktemp("checkouts")
    cache = root / "cache"
    builds = []
    for where in (root / "a", root / "second" / "clone-with-a-longer-path"):
        project, env = checkout(where)
        app = project / "examples" / "scons_project"
        if not builds:
            with_cache(app, cache)
        result = scons(app, "board=avr", env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        builds.append(outputs(app / "build"))
    return cache, builds


def test_two_checkouts_at_different_paths_build_byte_identical_outputs(built):
    """Every output file of the two independent builds is the same."""
    _, (first, second) = built
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


def test_a_third_checkout_takes_every_cacheable_step_from_a_shared_cache(built, tmp_path):
    """The first checkout filled a shared CacheDir; a third at another path builds the same project:
    it compiles, links, runs and analyses nothing; it retrieves every one of those outputs from the
    cache and runs only the steps that are never cached (memory report, semantic check, report,
    gates); its outputs are the first's. (The repository SConstruct's `cache=DIR` sets the same
    CacheDir: test_cortexm.py builds through it.)"""
    cache, (first, _) = built
    project, env = checkout(tmp_path / "b" / "other")
    app = project / "examples" / "scons_project"
    with_cache(app, cache)
    result = scons(app, "board=avr", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    retrieved = set(re.findall(r"Retrieved `([^']+)' from cache", result.stdout))
    ran = set(re.findall(r"^\[nnbuild\] (\S.*?)\s{2,}\S", result.stdout, re.M))
    assert ran <= UNCACHED, f"the third checkout ran {sorted(ran - UNCACHED)}"
    assert {"build/avr/xor/run_simavr.npz", "build/avr/xor/run_host.npz", "build/avr/xor/check.elf",
            "build/avr/xor/gen/xor.c", "build/avr/xor/obj/xor.o", "build/avr/app.elf",
            "build/avr/app.checks/xor/wcet.json", "build/avr/app.checks/steer/wcet.json"} <= retrieved, sorted(retrieved)
    assert "WCET[" not in result.stdout and "builtin-avr:" not in result.stdout
    other = outputs(app / "build")
    assert {"avr/app.elf", "avr/app.hex", "avr/app.checks/xor/gate.json"} <= set(other)
    for path, data in other.items():
        assert first[path] == data, f"{path} differs"
