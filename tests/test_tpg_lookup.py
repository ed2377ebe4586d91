"""The TPG lookup helpers return libm's very bits: table entries, compositions tabled whole
(cos(exp(y)), log(exp(exp(y)))), and the domain edges answered without the call (NaN, infinities,
exp's overflow and underflow bounds, log of zero and of negatives), on the host's glibc. A C
program includes the generated code and compares each helper with the libm expression it stands
for, bit for bit, on integers in and out of the table range, fractions, the bounds and their
neighbours, subnormals, huge values and NaNs with payloads. (A table entry that is NaN is the
reference's quiet NaN; libm's NaN sign there is the platform's default NaN's.)"""

import json
import math
import subprocess

import numpy as np
import pytest

from conftest import have
from tpg_helpers import DOT_HEADER, action, program, write

from nnbuild import codegen
from nnbuild.codegen import tpg_lower
from nnbuild.frontends import load

#: 4 registers, no constants, 5 observation values (source 1), cos/log/exp tabled on -8..8
ENV = {
    "nnbuild_tpg_environment": 1, "name": "lookup-env", "registers": 4, "constants": 0,
    "data_sources": [{"name": "obs", "type": "double", "shape": [5]}],
    "actions": 4, "integer_tables": {"min": -8, "max": 8},
    "instructions": [
        {"name": "sub", "operands": ["double", "double"], "c": "$0 = $1 - $2;", "python": "$1 - $2"},
        {"name": "cos", "operands": ["double"], "c": "$0 = cos($1);", "python": "cos($1)"},
        {"name": "log", "operands": ["double"], "c": "$0 = log($1);", "python": "log($1)"},
        {"name": "exp", "operands": ["double"], "c": "$0 = exp($1);", "python": "exp($1)"},
    ],
}


def graph_text():
    """One team, four edges: cos(exp(obs0)), log(exp(exp(obs1))), log(obs2), cos(obs3) - obs4."""
    return (DOT_HEADER + '\t\tT0 [fillcolor="#1199bb"]\n'
            + program(0, ["3|1&1|0#1|0", "1|0&0|1#0|0"], constants=()) + action(0, 0) + "\t\tT0 -> P0 -> A0\n"
            + program(1, ["3|1&1|1#1|0", "3|2&0|1#0|0", "2|0&0|2#0|0"], constants=()) + action(1, 1) + "\t\tT0 -> P1 -> A1\n"
            + program(2, ["2|0&1|2#1|0"], constants=()) + action(2, 2) + "\t\tT0 -> P2 -> A2\n"
            + program(3, ["1|1&1|3#1|0", "0|0&0|1#1|4"], constants=()) + action(3, 3) + "\t\tT0 -> P3 -> A3\n"
            + "\t\t{ rank= same T0 }\n}\n")


def arguments():
    """Doubles where a helper could go wrong."""
    up, down = math.inf, -math.inf
    special = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 7.999999999999999, 8.0, 8.000000000000002, 9.0, -8.0, -9.0,
               255.0, 1e-310, -1e-310, 5e-324, 1e300, -1e300, 1.7976931348623157e308, math.inf, -math.inf,
               709.782712893384, math.nextafter(709.782712893384, up), math.nextafter(709.782712893384, down),
               -745.1332191019411, math.nextafter(-745.1332191019411, down),
               math.nextafter(-745.1332191019411, up), 2.0 ** 60 + 0.0, 1e22, 3.141592653589793]
    rng = np.random.default_rng(7)
    extra = np.concatenate([np.arange(-12, 13, dtype=float), rng.uniform(-20, 20, 40),
                            rng.choice([-1, 1], 40) * 10.0 ** rng.uniform(-320, 308, 40)])
    values = np.array(special + extra.tolist())
    nans = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000123, 0x7FF0000000000001],
                    dtype=np.uint64).view(np.float64)  # quiet NaNs of both signs, a payload, a signalling NaN
    return np.concatenate([values, nans])


CHECK = r"""
#include <stdio.h>
#include <string.h>
#include "t.c"
#pragma GCC diagnostic ignored "-Wfloat-equal"

static unsigned long long bits(double d)
{
    unsigned long long u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* a table entry that is NaN is the reference's NaN (its sign is the platform's default NaN's in libm) */
#define TABLED(x) ((x) >= -8.0 && (x) <= 8.0 && (double)(int)(x) == (x))
#define SAME(what, got, want) do { const double g_ = (got), w_ = (want); \
    if (bits(g_) != bits(w_) && !(TABLED(x) && g_ != g_ && w_ != w_)) { printf("%s %016llx: %016llx, libm %016llx\n", what, bits(x), bits(g_), bits(w_)); ++bad; } \
} while (0)

int main(void)
{
    static const unsigned long long args[] = { ARGS };
    volatile double in;
    unsigned int i, bad = 0u;
    for (i = 0u; i < sizeof args / sizeof args[0]; ++i) {
        double x;
        memcpy(&x, &args[i], sizeof x);
        in = x;
        x = in; /* no constant folding */
        SAME("cos", t_cos_int(x), cos(x));
        SAME("exp", t_exp_int(x), exp(x));
        SAME("log", t_log_int(x), log(x));
        SAME("cos(exp)", t_cos_exp_int(x, t_exp_int(x)), cos(exp(x)));
        SAME("exp(exp)", t_exp_exp_int(x, t_exp_int(x)), exp(exp(x)));
        SAME("log(exp(exp))", t_log_exp_exp_int(x, t_exp_exp_int(x, t_exp_int(x))), log(exp(exp(x))));
    }
    printf("%u checked, %u different\n", i, bad);
    return bad != 0u;
}
"""


@pytest.mark.skipif(not have("gcc"), reason="gcc not installed")
def test_helpers_return_libms_bits(tmp_path):
    env = write(tmp_path / "env.json", json.dumps(ENV))
    graph = load(write(tmp_path / "t.dot", graph_text()), environment=str(env))
    graph.name = "t"
    codegen.generate(graph, tmp_path, shape="switch")
    code = (tmp_path / "t.c").read_text()
    for helper in ("#define t_cos_exp_int(y, x)", "#define t_exp_exp_int(y, x)",
                   "#define t_log_exp_exp_int(y, x)", "t_log_exp_exp_int(obs[1], t_exp_exp_int(obs[1], t_exp_int(obs[1])))",
                   "} else if (!(x >= -745.1332191019411 && x <= 709.782712893384))"):
        assert helper in code
    args = ", ".join(f"0x{int(b):016x}ull" for b in arguments().view(np.uint64))
    (tmp_path / "check.c").write_text(CHECK.replace("ARGS", args))
    exe = tmp_path / "check"
    subprocess.run(["gcc", "-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}",
                    str(tmp_path / "check.c"), str(tmp_path / "t_weights.c"), "-o", str(exe), "-lm"], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def test_domains_agree_with_the_reference():
    """Every DOMAINS entry passes its own generation-time check; a function whose reference
    disagrees at a sample argument gets no shortcut (libm is called)."""
    from nnbuild.ir import tpg_reference
    from nnbuild.ir.tpg import Instruction
    for name in tpg_lower.DOMAINS:
        ins = Instruction.parse(name, ["double"], f"$0 = {name}($1);")
        assert tpg_lower.domain_of(ins, tpg_reference.compile_semantics(ins)) == tpg_lower.DOMAINS[name]
    exp = Instruction.parse("exp", ["double"], "$0 = exp($1);")
    assert tpg_lower.domain_of(exp, lambda x: np.zeros_like(x)) is None
    plus = Instruction.parse("add", ["double", "double"], "$0 = $1 + $2;")
    assert tpg_lower.domain_of(plus, None) is None
