"""Capture real owcet outputs for the adapter tests (tests/data/otawa/): `python3 tests/otawa_capture.py`.

Builds tests/data/otawa/dot.c with the arm board's flags, runs the OTAWA that nnbuild finds (set-up's
cache or PATH) on it in each case below, and stores stdout, stderr and the exit status verbatim except
for two path substitutions (the temporary directory -> <tmp>, the OTAWA and plugin cache prefixes ->
<cache>) so that the files do not depend on the machine. VERSION records owcet's and gcc's versions.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from nnbuild.runners import arm7tdmi_timing  # noqa: E402
from nnbuild.wcet import otawa, otawa_timing, tools  # noqa: E402

DATA = ROOT / "tests" / "data" / "otawa"
BOARD = json.loads((ROOT / "toolchains" / "arm.json").read_text())


def build(tmp):
    elf = tmp / "dot.elf"
    subprocess.run([BOARD["cc"], BOARD["opt"], *BOARD["cflags"], str(DATA / "dot.c"), "-o", str(elf),
                    *BOARD["ldflags"]], check=True)
    stripped = tmp / "dot.otawa.elf"
    subprocess.run([BOARD["objcopy"], "--strip-debug", str(elf), str(stripped)], check=True)
    return elf, stripped


def cases(tmp, elf):
    """{case: owcet arguments after the binary}: success under both scripts, then the failures."""
    text = otawa.disassembly(elf, BOARD)
    facts = {"loops": [{"function": "dot", "file": "dot.c", "line": 8, "max_iterations": 16}]}
    bounds, _ = otawa.map_loops(otawa.with_lines(otawa.parse_objdump(text), elf), facts["loops"])
    ff, empty = tmp / "dot.ff", tmp / "none.ff"
    ff.write_text(otawa.render_ff(bounds, "dot"))
    empty.write_text("// no loop bound\n")
    table, _ = arm7tdmi_timing.cost_table(text)
    costs, holed = tmp / "dot.costs", tmp / "holed.costs"
    costs.write_text(arm7tdmi_timing.render_table(table))
    first = min(a for a in table if a >= bounds[0].address)
    holed.write_text(arm7tdmi_timing.render_table({a: c for a, c in table.items() if a != first}))
    config = otawa.locate("otawa-config")
    script = otawa_timing.prepared_script("arm7tdmi", config, BOARD)
    return {"ok_trivial": ["-s", "trivial", "-f", ff, "dot"],
            "ok_arm7tdmi": ["-s", script, "-p", f"costs={costs}", "-f", ff, "dot"],
            "unbounded": ["-s", "trivial", "-f", empty, "dot"],
            "missing_cost": ["-s", script, "-p", f"costs={holed}", "-f", ff, "dot"],
            "no_such_entry": ["-s", "trivial", "-f", ff, "nosuch"]}


def main():
    owcet = otawa.locate()
    if owcet is None:
        sys.exit(f"owcet not found: {otawa.INSTALL_HINT}")
    cache = str(tools.cache_dir().resolve())
    with tempfile.TemporaryDirectory(prefix="nnbuild-otawa-capture-") as tmp:
        tmp = Path(tmp).resolve()
        elf, stripped = build(tmp)
        for name, args in cases(tmp, elf).items():
            head, tail = args[:-1], args[-1]
            done = subprocess.run([owcet, *map(str, head), str(stripped), tail], cwd=tmp, capture_output=True,
                                  text=True, timeout=120)
            for suffix, value in (("stdout", done.stdout), ("stderr", done.stderr), ("rc", f"{done.returncode}\n")):
                text = value.replace(str(tmp), "<tmp>").replace(cache, "<cache>")
                (DATA / f"{name}.{suffix}").write_text(text)
            print(f"{name}: exit {done.returncode}, {done.stdout.strip() or '(no stdout)'}")
    gcc = subprocess.run([BOARD["cc"], "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    version = tools.version([otawa.locate("otawa-config"), "--version"])
    (DATA / "VERSION").write_text(f"{version}\n{gcc}\n")


if __name__ == "__main__":
    main()
