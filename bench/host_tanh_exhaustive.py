"""The const-host tanh (the prelude's nn_tanh of form "table", storage const-host, float32) against tanh
in double over EVERY float32: max absolute error, max error in float32 ulps (of the reference
rounded to float32; subnormal ulp 2^-149), NaN -> NaN, +-inf -> +-1, -0 -> -0, and oddness
bit for bit (the negative half is checked as -f(-x) == f(x), the positive half against libm).

    python3 bench/host_tanh_exhaustive.py [--cc gcc] [--opt -O2]

The C under test is the prelude's text itself (rendered through the same macro the shapes use),
compiled with the driver below; about 2^31 libm tanh calls (a few minutes on one core).
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild.codegen import common  # noqa: E402

DRIVER = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

int main(void)
{
    double max_abs = 0.0, max_ulp = 0.0, x_abs = 0.0, x_ulp = 0.0;
    unsigned long odd_fail = 0, nan_fail = 0;
    uint32_t u;
    for (u = 0u; u < 0x7f800000u; u++) {
        float x = from_bits(u);
        float y = nn_tanh(x);
        double r = tanh((double)x);
        double err = fabs((double)y - r);
        float rf = (float)r;
        int e;
        double ulp;
        if (to_bits(nn_tanh(-x)) != (to_bits(y) ^ 0x80000000u)) {
            odd_fail++;
        }
        if (rf == 0.0f || fabsf(rf) < 0x1p-126f) {
            ulp = 0x1p-149;
        } else {
            frexpf(fabsf(rf), &e);
            ulp = ldexp(1.0, e - 24);
        }
        if (err > max_abs) { max_abs = err; x_abs = x; }
        if (err / ulp > max_ulp) { max_ulp = err / ulp; x_ulp = x; }
    }
    for (u = 0x7f800001u; u != 0u && u <= 0x7fffffffu; u++) {
        if (!isnan(nn_tanh(from_bits(u))) || !isnan(nn_tanh(from_bits(u | 0x80000000u)))) nan_fail++;
    }
    printf("max_abs %.9g at x = %.9g\nmax_ulp %.6f at x = %.9g\n", max_abs, x_abs, max_ulp, x_ulp);
    printf("odd_fail %lu nan_fail %lu\n", odd_fail, nan_fail);
    printf("tanh(+inf) = %.9g tanh(-inf) = %.9g, tanh(-0) bits 0x%08x\n", (double)nn_tanh(INFINITY),
           (double)nn_tanh(-INFINITY), (unsigned)to_bits(nn_tanh(-0.0f)));
    return 0;
}
"""


def tanh_source(form="table"):
    """The prelude's nn_tanh of `form` as compilable C (the same macro the shapes render)."""
    from nnbuild.codegen import templating
    recorder = common.FlowFacts("t")
    text = templating.environment().from_string(
        '{% import "prelude.c.j2" as prelude %}#include <math.h>\n#include <stdint.h>\n{{ prelude.noinline() }}'
        '{{ prelude.activations(ff, ["tanh"], real, sfx, exp, tanh_limit, tanh_gap, form) }}'
    ).render(**common.reals("float32"), ff=recorder, form=form)
    return recorder.resolve(text)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--opt", default="-O2")
    ap.add_argument("--form", default="table", choices=("table", "exp"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.c"
        src.write_text(tanh_source(args.form) + DRIVER)
        exe = Path(tmp) / "t"
        subprocess.run([args.cc, args.opt, "-std=c99", "-o", str(exe), str(src), "-lm"], check=True)
        print(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout, end="")


if __name__ == "__main__":
    main()
