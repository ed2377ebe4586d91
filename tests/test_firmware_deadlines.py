"""One AVR firmware holding two models, each with its own deadline, built through SCons from a
user's SConstruct (NNModel per model, one NNFirmware): each model's deadline gate judges that
model's own WCET bound over the linked image. The deadlines are set between the two models' bounds,
so a gate that read the other model's bound would pass the one that misses and fail the one that
meets: the build fails naming the model that misses, leaves no gate.json for it and no release image
(.hex, .bin), and keeps the other model's gate. With both deadlines met (the first build) it passes
with both gates and the images. Two builds, about 12 CPU seconds."""

import json
import shutil

import pytest

from conftest import REPO, have
from test_user_edge import build, failure_lines, listing

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("avr-gcc", "avr-objcopy", "simavr"), reason="avr-gcc and simavr needed")]

#: two MLPs of different sizes: xor (2-2-1) and a 2-3-1 NNet network (its own input clamp and
#: normalisation, so more work per inference than xor)
SMALL_NNET = """// a 2-3-1 network for two deadlines in one firmware
2,2,1,3,
2,3,1,
0,
-1.0,0.0,
1.0,10.0,
0.5,5.0,2.0,
2.0,4.0,3.0,
1.0,-2.0,
0.5,0.25,
-1.0,1.0,
0.1,
-0.2,
0.3,
1.0,2.0,-3.0,
0.5,
"""

MAIN_C = """#include "xor.h"
#include "small.h"
int main(void) {
    float in[2] = {1.0f, 0.0f}, out[1], y[1];
    xor_infer(in, out);
    small_infer(in, y);
    return out[0] + y[0] > 0.5f ? 0 : 1;
}
"""

SCONSTRUCT = """import nnbuild.scons_tool
env = Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()], NNBOARD="avr")
xor = env.NNModel("xor", "models/xor.h5", tolerance=1e-5, input_range=(0.0, 1.0), count=4, deadline="{xor}")
small = env.NNModel("small", "models/small.nnet", tolerance=1e-4, input_range=(-1.0, 1.0), count=4,
                    deadline="{small}")
Default(env.NNFirmware("build/app", ["src/main.c"], models=[xor, small]))
"""

MODELS = ("xor", "small")


def project(root, **deadlines):
    """The user's project: two models, one firmware, each model's deadline as given."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    shutil.copy2(REPO / "firmware_examples" / "xor" / "xor.h5", root / "models" / "xor.h5")
    (root / "models" / "small.nnet").write_text(SMALL_NNET)
    (root / "src" / "main.c").write_text(MAIN_C)
    (root / "SConstruct").write_text(SCONSTRUCT.format(**deadlines))
    return root


def bounds(out):
    """Each model's WCET bound (cycles) over the linked image, and its report."""
    reports = {m: json.loads((out / "app.checks" / m / "report.json").read_text()) for m in MODELS}
    return {m: r["wcet_cycles"] for m, r in reports.items()}, reports


def test_each_model_of_a_firmware_is_held_to_its_own_deadline(tmp_path):
    root = project(tmp_path, xor="1s", small="1s")
    out = root / "build"
    both = build(root)
    assert both.returncode == 0, both.stdout[-3000:] + both.stderr
    assert {"app.elf", "app.hex", "app.bin"} <= set(listing(out))
    cycles, reports = bounds(out)
    assert all("gate.json" in listing(out / "app.checks" / m) for m in MODELS)
    assert all(r["passed"] and r["deadline_ms"] == 1000 for r in reports.values()), reports
    slow, fast = sorted(MODELS, key=cycles.get, reverse=True)
    assert cycles[slow] > cycles[fast], cycles
    # one deadline between the two bounds for both: the slow model misses its own, the fast one meets
    # its own (read against each other's bound, the verdicts would swap)
    hz = reports[slow]["clock_hz"]
    between = f"{(cycles[slow] + cycles[fast]) / 2 / hz * 1e6:.0f}us"
    (root / "SConstruct").write_text(SCONSTRUCT.format(**{slow: between, fast: between}))
    # -k: SCons (here -j2) stops starting steps at the first failure, so without it the fast model's
    # gate may not run at all; with it every gate gives its verdict
    failed = build(root, "-k")
    assert failed.returncode != 0
    lines = failure_lines(failed)
    missed = [l for l in lines if "> deadline" in l]
    assert len(missed) == 1 and f"; {slow} on avr @" in missed[0], lines
    assert "no release image (app.hex, app.bin" in missed[0], missed
    assert "gate.json" not in listing(out / "app.checks" / slow)
    assert "app.hex" not in listing(out) and "app.bin" not in listing(out)
    # the model that meets its deadline keeps its passed gate, judged on its own bound
    report = json.loads((out / "app.checks" / fast / "report.json").read_text())
    assert report["passed"] and report["wcet_cycles"] == cycles[fast], report
    assert "gate.json" in listing(out / "app.checks" / fast)
