"""The const-host tanh (prelude, tanh_form "table"): its properties on a strided sweep of float32,
the compiled C bit for bit against a numpy model of the same operations, the table against its fit,
and which storages get it. The sweep over every float32 is bench/host_tanh_exhaustive.py."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnbuild.codegen import common, host_tanh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import host_tanh_exhaustive  # noqa: E402

STRIDE = 4099  # about 1M float32 of each sign


@np.errstate(invalid="ignore")   # NaN inputs pass through the casts as NaN, as in the C
def numpy_tanh(x):
    """The prelude's operations in the same order in double, rounded once to float32."""
    table = np.array([[float.fromhex(c) for c in row] for row in host_tanh.TABLE])
    d = x.astype(np.float64)
    a = np.abs(d)
    inside = a < 9.0625
    a12 = np.where(inside, a, 0.0) * host_tanh.PER_UNIT
    i = a12.astype(np.int64)
    s = a12 - (i + 0.5)
    r = table[i, host_tanh.DEGREE]
    for k in range(host_tanh.DEGREE - 1, -1, -1):
        r = r * s + table[i, k]
    return np.where(inside, d * r, np.where(np.isnan(d), d, np.sign(d))).astype(np.float32)


@pytest.fixture(scope="module")
def c_tanh(tmp_path_factory):
    """The prelude's nn_tanh compiled (gcc -O2) over the strided sweep, both signs, NaN, inf, -0."""
    tmp = tmp_path_factory.mktemp("tanh")
    bits = np.concatenate([np.arange(0, 0x80000000, STRIDE, dtype=np.uint32),
                           np.array([0x7f800000, 0x7fc00000, 0x41110000, 0x41100000, 1], dtype=np.uint32)])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    (tmp / "in.bin").write_bytes(bits.tobytes())
    src = host_tanh_exhaustive.tanh_source() + r"""
#include <stdio.h>
int main(int argc, char **argv)
{
    float x;
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    (void)argc;
    while (fread(&x, 4, 1, in) == 1) { x = nn_tanh(x); fwrite(&x, 4, 1, out); }
    return fclose(in) | fclose(out);
}
"""
    (tmp / "t.c").write_text(src)
    subprocess.run(["gcc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", str(tmp / "t"),
                    str(tmp / "t.c"), "-lm"], check=True)
    subprocess.run([str(tmp / "t"), str(tmp / "in.bin"), str(tmp / "out.bin")], check=True)
    return bits.view(np.float32), np.frombuffer((tmp / "out.bin").read_bytes(), dtype=np.float32)


def test_c_equals_numpy_model_bit_for_bit(c_tanh):
    x, y = c_tanh
    model = numpy_tanh(x)
    number = ~np.isnan(x)  # NaN payloads and signs are the FPU's business; NaN-ness is checked below
    assert np.array_equal(y[number].view(np.uint32), model[number].view(np.uint32))


def test_error_and_special_values(c_tanh):
    x, y = c_tanh
    finite = np.isfinite(x)
    ref = np.tanh(x[finite].astype(np.float64))
    err = np.abs(y[finite].astype(np.float64) - ref)
    ulp = np.maximum(np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64), 2.0 ** -149)
    assert err.max() <= 3.1e-8 and (err / ulp).max() <= 0.52
    assert np.isnan(y[np.isnan(x)]).all()
    assert list(y[np.isinf(x)]) == [1.0, -1.0]
    assert np.array_equal(y[x == 0].view(np.uint32), x[x == 0].view(np.uint32))  # +-0 -> +-0


def test_the_table_is_its_fit_and_covers_up_to_where_tanh_is_one():
    """The rows are what host_tanh.fit computes (mpmath; the fit is deterministic: a sample of rows
    here, every row in the e2e tier), one row per 1/32 of |x| up to 9.0625 (32 * 9.0625 = 290: the
    C reads rows 0..289)."""
    pytest.importorskip("mpmath")
    sample = (0, 1, 16, 100, 289, 290)
    assert host_tanh.fit(rows=sample) == tuple(host_tanh.TABLE[i] for i in sample)
    assert host_tanh.ROWS == len(host_tanh.TABLE) == int(9.0625 * host_tanh.PER_UNIT) + 1
    assert np.float32(np.tanh(np.float64(9.0625))) == 1.0    # and tanh is increasing: 1.0f from there on


def test_only_const_host_float32_gets_it():
    assert common.tanh_form("const-host", "float32") == "table"
    for storage in ("const", "const-simd", "avr-progmem-far", "avr-progmem-near"):
        assert common.tanh_form(storage, "float32") == "exp"
    assert common.tanh_form("const-host", "float64") == "exp"


@pytest.mark.e2e
def test_every_row_of_the_table_is_its_fit():
    pytest.importorskip("mpmath")
    assert host_tanh.fit() == host_tanh.TABLE
