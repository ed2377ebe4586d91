"""nnbuild's OTAWA timing scripts: `otawa_script: arm7tdmi` on a board means the ARM7TDMI block-time
plugin (otawa_arm7tdmi/arm7tdmi.cpp) and its script, built here against the OTAWA that runs it.

OTAWA's pipeline XML gives an instruction kind one latency, which cannot say the ARM7TDMI's
register-list, PC-write and register-shift costs; so nnbuild writes the per-instruction clocks
(runners/arm7tdmi_timing.py, the same table the qemu-arm measurement charges) and the plugin sums
them per basic block of OTAWA's CFG; OTAWA's IPET solves the bound on the flow facts.
"""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional

from nnbuild.errors import NNBuildError
from nnbuild.runners import arm7tdmi_timing
from nnbuild.wcet import tools

SOURCES = Path(__file__).with_name("otawa_arm7tdmi")
#: script name on the board -> (plugin source, script template, cost-table maker)
SCRIPTS = {"arm7tdmi": ("arm7tdmi.cpp", "arm7tdmi.osx", arm7tdmi_timing.cost_table)}


def is_ours(script) -> bool:
    return script in SCRIPTS


def prepared_script(name, otawa_config, board) -> Path:
    """The `.osx` of script `name`, its plugin compiled against the OTAWA of `otawa_config` (its
    prefix), cached by the hash of the sources and of that OTAWA's library (a rebuilt OTAWA gets a
    rebuilt plugin)."""
    source, template, _ = SCRIPTS[name]
    prefix = Path(otawa_config).resolve().parent.parent
    libotawa = prefix / "lib" / "libotawa.so"
    digest = hashlib.sha256()
    for part in (SOURCES / source, SOURCES / template):
        digest.update(part.read_bytes())
    digest.update(str(prefix).encode() + (libotawa.read_bytes() if libotawa.is_file() else b""))
    home = tools.cache_dir() / f"otawa-plugin-{name}-{digest.hexdigest()[:16]}"
    script = home / template
    if not script.is_file():
        # built aside and renamed into place: parallel builds never load a half-written plugin
        home.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
        try:
            build_plugin(prefix, SOURCES / source, staging / "nnbuild" / f"{name}.so", board)
            text = (SOURCES / template).read_text().replace("@PLUGIN_DIR@", str(home))
            (staging / template).write_text(text)
            try:
                os.rename(staging, home)
            except OSError:
                if not script.is_file():   # not another build's win: a real failure
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return script


#: the plugin is built once per OTAWA build, not per analysis: the board's wcet_timeout_s (how long an
#: analysis may run) does not apply to it
PLUGIN_BUILD_TIMEOUT_S = 300.0


def build_plugin(prefix, source, out, board):
    """g++ -shared the plugin against OTAWA's headers and libraries (about a second)."""
    cxx = tools.which("g++", target=board.get("name"), hint="apt-get install g++ (builds nnbuild's OTAWA plugin)")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cxx, "-std=c++11", "-shared", "-fPIC", "-O1", f"-I{prefix / 'include'}", str(source),
           "-o", str(out), f"-L{prefix / 'lib'}", "-lotawa", "-lelm", f"-Wl,-rpath,{prefix / 'lib'}"]
    done = tools.run(cmd, timeout=PLUGIN_BUILD_TIMEOUT_S, what="g++")
    if done.returncode != 0:
        raise NNBuildError(f"building the OTAWA plugin failed: {tools.one_line(done.stderr)}", path=source)


def cost_file(name, objdump_text, workdir, entry) -> Path:
    """Write the per-address cost table owcet's block-time step reads; the path it takes as `costs`."""
    _, _, make = SCRIPTS[name]
    table, _unknown = make(objdump_text)
    path = Path(workdir) / f"{entry}.{name}.costs"
    path.write_text(arm7tdmi_timing.render_table(table))
    return path


def script_params(name, costs: Optional[Path]) -> List[str]:
    """The `-p` values owcet needs for our script."""
    return [f"costs={costs}"] if is_ours(name) and costs else []
