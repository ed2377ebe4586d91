"""Static stack bound (nnbuild.wcet.avr_stack) against the stack simavr measures.

Every fixture is compiled with toolchains/avr.json's flags around nnbuild/runners/check_main.c
and run through simavr_run (`stack=` field). The bound must never be below a measured call, and
on fixtures whose deepest path always runs (no data-dependent calls) the two must be equal,
since both count the same bytes: the return address of the CALL and everything below it.
Run with -s to see measured vs bound.
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nnbuild import pipeline
from nnbuild.errors import NNBuildError
from nnbuild.runners import CHECK_MAIN, check_main_defines, simavr
from nnbuild.wcet.avr_stack import stack_bound
from test_runners import harness  # noqa: F401 (fixture)
from test_thumb2_stack import NESTED as NESTED_SIZED

ROOT = Path(__file__).resolve().parents[1]
BOARD = json.loads((ROOT / "toolchains" / "avr.json").read_text())

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not all(shutil.which(BOARD[k]) for k in ("cc", "nm", "objdump")),
    reason=f"{BOARD['cc']}/binutils-avr not installed: {BOARD['install_hint']}")]

HEADER = "void {name}_infer(const float in[4], float out[2]);\n"

# Three nested calls, each with a volatile local array (a 300-byte frame on top): the deepest chain always runs.
NESTED = '#include "nested.h"\n' + NESTED_SIZED.replace("%SIZE%", "300")

# Soft-float library calls (+ - * / expf) on a local float buffer, with a data-dependent branch.
FLOATS = """\
#include <math.h>
#include "floats.h"
__attribute__((noinline)) static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    int i;
    for (i = 0; i < n; ++i)
        s += a[i] * b[i];
    return s;
}
void floats_infer(const float in[4], float out[2])
{
    float buf[16];
    int i;
    for (i = 0; i < 16; ++i)
        buf[i] = in[i % 4] / (float)(i + 1) - 0.5f;
    out[0] = dot(buf, buf + 8, 8);
    out[1] = out[0] > 0.0f ? expf(-out[0]) : out[0] * in[3];
}
"""


def compile_fixture(d, name, body, opt="-Os", extra=()):
    """ELF of check_main.c + the fixture, with the board's flags (as the project builds firmware)."""
    (d / f"{name}.h").write_text(HEADER.format(name=name))
    (d / f"{name}.c").write_text(body)
    elf = d / f"{name}{opt}{''.join(extra)}.elf"
    cmd = [BOARD["cc"], *BOARD["cflags"], opt, *extra,
           *check_main_defines(f"{name}.h", f"{name}_infer", 4, 2), f"-I{d}", str(CHECK_MAIN),
           str(d / f"{name}.c"), *BOARD["ldflags"], *[f"-l{lib}" for lib in BOARD["libs"]],
           "-o", str(elf)]
    subprocess.run(cmd, check=True)
    return elf


def measured_stack(elf, entry, x, n_out, harness):
    _, _, stack = simavr.run_cases(elf, x, n_out, entry_symbol=entry, mcu=BOARD["mcu"],
                                   freq=BOARD["clock_hz"], harness=harness, nm=BOARD["nm"],
                                   with_stack=True)
    return stack


def inputs(n=8):
    rng = np.random.default_rng(5)
    fixed = np.array([[3, 1, 2, 0.5], [-3, -1, -2, -0.5], [0, 0, 0, 0],
                      [np.inf, 1, -np.inf, np.nan]], np.float32)   # inf/NaN: deepest soft-float path
    return np.vstack([fixed, rng.uniform(-4, 4, (n, 4)).astype(np.float32)])


@pytest.mark.parametrize("opt,extra", [("-Os", ()), ("-O0", ()), ("-O0", ("-mcall-prologues",))])
@pytest.mark.parametrize("name,body,exact", [("nested", NESTED, True), ("floats", FLOATS, False)])
def test_bound_vs_measured(tmp_path, harness, name, body, exact, opt, extra):
    elf = compile_fixture(tmp_path, name, body, opt, extra)
    bound = stack_bound(elf, f"{name}_infer", BOARD)
    stack = measured_stack(elf, f"{name}_infer", inputs(), 2, harness)
    print(f"\n{name} {opt} {' '.join(extra)}: measured max {stack.max()} B, bound {bound['bytes']} B "
          f"via {' > '.join(bound['path'])}")
    assert bound["bytes"] >= stack.max()
    if exact:
        assert (stack == bound["bytes"]).all()


# A 0x180-byte frame entered at 17 different SP values (alloca in the caller): for some of them
# the intermediate SP between `out SPH` and `out SPL` is 128 bytes below the real one.
SPLIT = """\
volatile unsigned char sink;
__attribute__((noinline)) void framed(void)
{
    volatile unsigned char buf[0x180];
    buf[0] = 1; buf[0x17f] = 2;
    sink = buf[0] + buf[0x17f];
}
__attribute__((noinline)) void pad(unsigned k)
{
    volatile unsigned char *p = __builtin_alloca(k);
    p[0] = 0;
    framed();
}
int main(void)
{
    unsigned k;
    for (k = 1; k < 256; k += 15)
        pad(k);
    return 0;
}
"""


def compile_program(d, name, body, opt="-Os"):
    """A self-driving firmware (its own main) with the board's flags."""
    (d / f"{name}.c").write_text(body)
    elf = d / f"{name}.elf"
    subprocess.run([BOARD["cc"], *BOARD["cflags"], opt, str(d / f"{name}.c"), *BOARD["ldflags"],
                    *[f"-l{lib}" for lib in BOARD["libs"]], "-o", str(elf)], check=True)
    return elf


def test_sp_write_midpoint_is_not_measured(tmp_path, harness):
    """The harness skips the half-written SP, so every call measures exactly the bound."""
    elf = compile_program(tmp_path, "split", SPLIT)
    bound = stack_bound(elf, "framed", BOARD)
    _, stack = simavr.measure_calls(elf, "framed", mcu=BOARD["mcu"], freq=BOARD["clock_hz"],
                                    harness=harness, nm=BOARD["nm"], with_stack=True)
    print(f"\nsplit: measured {sorted(set(stack.tolist()))} B over {len(stack)} calls, "
          f"bound {bound['bytes']} B")
    assert len(stack) == 17 and (stack == bound["bytes"]).all()
    assert bound["per_function"] == {"framed": 0x180 + 2}      # frame + saved r28:r29


REFUSED = {
    "alloca": (SPLIT, "pad", r"SP set to a value the analysis cannot follow .* in pad\+0x[0-9a-f]+ at 0x"),
    "recursion": ("""\
volatile int n = 5;
__attribute__((noinline)) int f(int k) { volatile char b[4]; b[0] = (char)k; return k ? b[0] + 2 * f(k - 1) : 0; }
int main(void) { return f(n); }
""", "main", r"recursion \(main -> f -> f\)"),
    "icall": ("""\
static int one(void) { return 1; }
int (*volatile fp)(void) = one;
volatile int sink;
int main(void) { sink = fp(); return 0; }
""", "main", r"indirect call 'icall'.* in main\+0x[0-9a-f]+ at 0x"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_function_and_address(tmp_path, case):
    body, entry, message = REFUSED[case]
    elf = compile_program(tmp_path, case, body)
    with pytest.raises(NNBuildError, match=message) as err:
        stack_bound(elf, entry, BOARD)
    assert "\n" not in str(err.value)


def test_f1tenth_model(tmp_path, harness):
    """The generated f1tenth inference (activation buffers are locals: ~1 KB of stack)."""
    files = pipeline.generate(ROOT / "firmware_examples/f1tenth/architecture.json", tmp_path / "gen",
                              name="f1tenth", storage=BOARD["weights_storage"])
    elf = tmp_path / "f1tenth.elf"
    subprocess.run([BOARD["cc"], *BOARD["cflags"], BOARD["opt"], f"-I{tmp_path / 'gen'}",
                    '-DNN_HEADER="f1tenth.h"', "-DNN_INFER=f1tenth_infer",
                    "-DNN_IN=F1TENTH_INPUTS", "-DNN_OUT=F1TENTH_OUTPUTS", str(CHECK_MAIN),
                    *[str(f) for f in files if f.suffix == ".c"], *BOARD["ldflags"],
                    *[f"-l{lib}" for lib in BOARD["libs"]], "-o", str(elf)], check=True)
    bound = stack_bound(elf, "f1tenth_infer", BOARD)
    rng = np.random.default_rng(11)
    x = np.vstack([rng.uniform(-1, 1, (3, 61)), np.full((1, 61), 1e4), np.full((1, 61), -1e-3)])
    stack = measured_stack(elf, "f1tenth_infer", x.astype(np.float32), 1, harness)
    print(f"\nf1tenth: measured max {stack.max()} B over {len(x)} inputs, bound {bound['bytes']} B "
          f"via {' > '.join(bound['path'])}; own frame {bound['per_function']['f1tenth_infer']} B")
    assert bound["bytes"] >= stack.max() > 1000
