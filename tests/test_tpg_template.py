"""The expression language of TPG environment files (nnbuild.ir.tpg_template): what it accepts and
how it is re-emitted, what it refuses (issue 23: a template called __builtin_execv), and that the
generated C and the reference compute the same doubles because both come from one parsed tree."""

import math
import subprocess

import numpy as np
import pytest

from tpg_helpers import HOST_FLAGS, TEST_ENV, small_graph, write, write_env

from nnbuild.errors import NNBuildError
from nnbuild.ir import tpg_reference, tpg_template
from nnbuild.ir.tpg import Environment, Instruction


def c_of(template, arity=2):
    return tpg_template.to_c(tpg_template.parse(template, arity))


# ------------------------------------------------------------------------------- the grammar


@pytest.mark.parametrize("template, c", [
    ("$0 = $1 - $2;", "$1 - $2"),
    ("$0=$1*$2;", "$1 * $2"),
    ("$0 = (($1) < ($2)) ? -($1) : ($1);", "($1 < $2) ? -$1 : $1"),   # the shipped sips22 cond_neg
    ("$0 = cos($1);", "cos($1)"),
    ("$0 = pow($1, fmax($2, 0.5e-3));", "pow($1, fmax($2, 0.0005))"),
    ("$0 = 1 / 2 * $1;", "1.0 / 2.0 * $1"),                 # double literals: 0.5, not C's int 0
    ("$0 = $1 - ($2 - $1);", "$1 - ($2 - $1)"),              # right operand of equal precedence
    ("$0 = ($1 - $2) - $1;", "$1 - $2 - $1"),
    ("$0 = $1 * ($2 + 1.5);", "$1 * ($2 + 1.5)"),
    ("$0 = - - $1;", "-(-$1)"),                               # never the decrement `--`
    ("$0 = -($1 + $2);", "-($1 + $2)"),
    ("$0 = +$1;", "+$1"),
    ("$0 = ($1 < $2) == ($2 >= 1e3);", "($1 < $2) == ($2 >= 1000.0)"),
    ("$0 = $1 < $2 ? $1 : $2 > 3 ? 1 : 2;", "($1 < $2) ? $1 : (($2 > 3.0) ? 1.0 : 2.0)"),
    ("$0 = $1 != $2;", "$1 != $2"),
    ("$0 = .25 + 1.;", "0.25 + 1.0"),
    ("  $0\t=\n$1 ;  ", "$1"),
])
def test_accepted_templates_are_re_emitted_from_their_tree(template, c):
    assert c_of(template) == c
    assert c_of("$0 = " + c + ";") == c   # the emitted form reads back as itself


@pytest.mark.parametrize("template, fragment", [
    ("$0 = (__builtin_execv((char *)obs, (char **)0), $1 + $2);", "names '__builtin_execv'"),
    ("$0 = exit(0);", "names 'exit'"),
    ("$0 = (double)$1;", "names 'double'"),
    ("$0 = obs;", "names 'obs'"),
    ("$0 = sizeof $1;", "names 'sizeof'"),
    ("$0 = $1, $2;", "no comma operator"),
    ("$0 = cos($1, $2);", "calls cos with 2 argument(s), it takes 1"),
    ("$0 = $1 = 3;", "assigns ('='"),
    ("$0 = $1 += 3;", "assigns ('+='"),
    ("$0 = --$1;", "decrements ('--'"),
    ("$0 = $1++;", "increments ('++'"),
    ("$0 = $1 % $2;", "takes a remainder"),
    ("$0 = !$1;", "logical operator"),
    ("$0 = $1 && $2;", "logical operator"),
    ("$0 = $1 & $2;", "bitwise operator"),
    ("$0 = $1 << 2;", "shifts"),
    ("$0 = obs[1];", "indexes an array"),
    ("$0 = $1[1];", "indexes an array"),
    ("$0 = $1->x;", "follows a pointer"),
    ('$0 = "a";', "string literal"),
    ("$0 = 'a';", "character literal"),
    ("$0 = $1; }\n#include <stdlib.h>\nstatic int y = (1);", "closes a brace"),
    ("$0 = $1 /* x */;", "holds a comment"),
    ("$0 = $1 */ + $2;", "closes a comment"),
    ("$0 = $1 // x\n;", "holds a comment"),
    ("$0 = $1 \\\n;", "backslash"),
    ("#define X 1\n$0 = $1;", "directive"),
    ("$0 = $1;;", "goes on after its ';'"),
    ("$0 = $1; $0 = $2;", "goes on after its ';'"),
    ("$0 = $1", "expects ';'"),
    ("r = $1;", "is not of the form '$0 = <expression>;'"),
    ("$1 = $2;", "is not of the form"),
    ("$0 = $3;", "uses $3 but the instruction has 2 operand(s)"),
    ("$0 = $0;", "uses $0"),
    ("$0 = cos(($1);", "expects ')' closing the call of cos"),
    ("$0 = ($1;", "expects ')'"),
    ("$0 = $1 < $2 < $3;", "chains comparisons"),
    ("$0 = $1 ?: $2;", "expects an operand"),
    ("$0 = 1.0f;", "template grammar does not allow"),
    ("$0 = 0x10;", "template grammar does not allow"),
    ("$0 = 10u;", "template grammar does not allow"),
    ("$0 = 1e400;", "1e400, which is not a finite double"),
    ("$0 = 1e39;", "the largest 32-bit float"),
    ("$0 = 1e-40;", "smallest normal 32-bit float"),
    ("$0 = $1\u0000;", "'\\x00;'"),
    ("$0 = " + "(" * 60 + "$1" + ")" * 60 + ";", "nests deeper than 50"),
    ("$0 = " + "-" * 2 * 60 + "$1;", "decrements"),
    ("$0 = " + "- " * 60 + "$1;", "nests deeper than 50"),
    ("$0 = " + " + ".join(["$1"] * 400) + ";", "at most 1000"),
])
def test_anything_else_is_refused_in_one_line_naming_file_and_instruction(tmp_path, template, fragment):
    instructions = [dict(TEST_ENV["instructions"][0]), *TEST_ENV["instructions"][1:]]
    instructions[0].update(c=template, python=None)
    del instructions[0]["python"]
    path = write_env(tmp_path / "env.json", instructions=instructions)
    with pytest.raises(NNBuildError) as excinfo:
        Environment.load(path)
    text = str(excinfo.value)
    assert "\n" not in text and text.startswith(f"{path}: 'instructions[0]': instruction 'add': C template ")
    assert fragment in text, text


def test_the_issues_exploit_is_refused_before_any_compiler_runs(tmp_path, run_cli):
    """Issue 23: `$0 = (__builtin_execv((char *)obs, (char **)0), $1 + $2);` generated and linked,
    and `check` ran the program whose path the --data bytes spelled. The template is refused now."""
    canary = tmp_path / "CANARY"
    script = write(tmp_path / "p.sh", f"#!/bin/sh\necho pwned > {canary}\n")
    script.chmod(0o755)
    instructions = [dict(TEST_ENV["instructions"][0],
                         c="$0 = (__builtin_execv((char *)obs, (char **)0), $1 + $2);"),
                    *TEST_ENV["instructions"][1:]]
    env = write_env(tmp_path / "env.json", instructions=instructions,
                    data_sources=[{"name": "obs", "type": "double", "shape": [64]}])
    dot = write(tmp_path / "small.dot", small_graph())
    path = str(script).encode()
    assert len(path) < 512
    x = np.frombuffer(path + b"\0" * (512 - len(path)), dtype="<f8").reshape(1, 64)
    np.savez(tmp_path / "d.npz", x=x, y=np.zeros((1, 1)))
    result = run_cli("check", dot, "--environment", env, "--data", tmp_path / "d.npz",
                     "--build-dir", tmp_path / "build")
    assert result.returncode != 0 and not canary.exists()
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"{env}: 'instructions[0]': instruction 'add'" in result.stderr
    assert "names '__builtin_execv'" in result.stderr
    assert not (tmp_path / "build").exists() or not list((tmp_path / "build").rglob("*.c"))


# ------------------------------------------------------------------------------- one tree for C and Python


def test_python_is_optional_and_must_be_the_same_tree(tmp_path):
    same = Instruction.parse("neg", ("double", "double"), "$0 = (($1) < ($2)) ? -($1) : ($1);",
                             "-$1 if $1 < $2 else $1")
    assert same.tree == Instruction.parse("neg", ("double", "double"), "$0 = $1 < $2 ? -$1 : $1;").tree
    instructions = [{"name": "add", "operands": ["double", "double"], "c": "$0 = $1 + $2;"},
                    *TEST_ENV["instructions"][1:]]
    env = Environment.load(write_env(tmp_path / "no_python.json", instructions=instructions))
    assert env.instructions[0].python is None and env.instructions[0].c_expression == "$1 + $2"
    instructions[0]["python"] = "$2 - $1"
    with pytest.raises(NNBuildError) as excinfo:
        Environment.load(write_env(tmp_path / "other.json", instructions=instructions))
    text = str(excinfo.value)
    assert "\n" not in text and "'instructions[0]'" in text
    assert "python semantics '$2 - $1' is not the C template's expression ($1 + $2)" in text


def test_the_reference_evaluates_the_c_templates_tree():
    """`1 / 2` is 0.5 in the reference and in the emitted C (`1.0 / 2.0`); a comparison is 0 or 1;
    a NaN test of `?:` is true, as C reads it."""
    half = tpg_reference.compile_semantics(Instruction.parse("h", ("double",), "$0 = 1 / 2 * $1;"))
    assert half(np.array([3.0]))[0] == 1.5
    less = tpg_reference.compile_semantics(Instruction.parse("l", ("double", "double"), "$0 = ($1 < $2) * 4 + 1;"))
    assert list(less(np.array([1.0, 2.0]), np.array([2.0, 1.0]))) == [5.0, 1.0]
    pick = tpg_reference.compile_semantics(Instruction.parse("p", ("double", "double"), "$0 = $1 ? $2 : 7;"))
    assert list(pick(np.array([np.nan, 0.0, -0.0, 2.0]), np.array([1.0] * 4))) == [1.0, 7.0, 7.0, 1.0]


def test_shipped_environment_emits_its_templates_from_the_tree():
    env = Environment.load("sips22-atari")
    assert [i.c_expression for i in env.instructions] == [
        "$1 - $2", "$1 + $2", "$1 * $2", "$1 / $2", "($1 < $2) ? -$1 : $1", "cos($1)", "log($1)", "exp($1)"]
    assert [i.libm for i in env.instructions] == [False] * 5 + [True] * 3


#: templates over every construct, evaluated by the compiled C and by the reference
AGREEMENT = [
    "$0 = $1 - $2;", "$0 = $1 / $2;", "$0 = -$1 * ($2 + 0.5);", "$0 = 1 / 3 + $1;",
    "$0 = (($1) < ($2)) ? -($1) : ($1);", "$0 = ($1 >= $2) + ($1 == $2) * 2 - ($1 != $2);",
    "$0 = $1 ? $2 : 1e-3;", "$0 = $1 <= $2 ? $1 > 0 ? sqrt($1) : -$2 : fmin($1, $2);",
    "$0 = cos($1) + sin($2) - tan($1);", "$0 = acos($1) + asin($2) * atan($1);", "$0 = atan2($1, $2);",
    "$0 = cosh($1) - sinh($2) + tanh($1);", "$0 = exp($1) / log($2);", "$0 = log10($1);",
    "$0 = pow($1, $2);", "$0 = fabs($1) + floor($2) - ceil($1);", "$0 = fmax($1, $2) - fmin($2, $1);",
]


@pytest.mark.e2e
def test_compiled_c_and_reference_agree_bit_for_bit(tmp_path):
    """Each template's C (emitted from its tree, operands substituted as the TPG code does) and its
    reference evaluation (the same tree) on special and random doubles: identical bits."""
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -7.25, 1e-300, 1e300, math.inf, -math.inf, math.nan, 710.0]
    rng = np.random.default_rng(5)
    a = np.array([x for x in values for _ in values] + list(rng.normal(0, 5, 200)))
    b = np.array([y for _ in values for y in values] + list(rng.normal(0, 5, 200)))
    functions = []
    for k, template in enumerate(AGREEMENT):
        expr = tpg_template.to_c(tpg_template.parse(template, 2), lambda i: ("a", "b")[i - 1])
        functions.append(f"static double f{k}(double a, double b) {{ (void)a; (void)b; return {expr}; }}")
    calls = ", ".join(f"f{k}" for k in range(len(AGREEMENT)))
    source = ("#include <math.h>\n#include <stdio.h>\n" + "\n".join(functions) +
              f"\nstatic double (*const fs[])(double, double) = {{{calls}}};\n"
              "int main(void) {\n    double x[2];\n    while (fread(x, sizeof x, 1, stdin) == 1) {\n"
              f"        for (unsigned k = 0; k < {len(AGREEMENT)}u; ++k) {{\n"
              "            double r = fs[k](x[0], x[1]);\n            fwrite(&r, sizeof r, 1, stdout);\n"
              "        }\n    }\n    return 0;\n}\n")
    write(tmp_path / "agree.c", source)
    subprocess.run(["gcc", *HOST_FLAGS, "-O2", "agree.c", "-o", "agree", "-lm"], cwd=tmp_path, check=True)
    out = subprocess.run([str(tmp_path / "agree")], input=np.stack([a, b], 1).astype("<f8").tobytes(),
                         capture_output=True, check=True).stdout
    c = np.frombuffer(out, dtype="<f8").reshape(len(a), len(AGREEMENT))
    for k, template in enumerate(AGREEMENT):
        ref = tpg_reference.compile_semantics(Instruction.parse(f"i{k}", ("double", "double"), template))(a, b)
        differ = np.flatnonzero(c[:, k].view(np.uint64) != np.broadcast_to(ref, a.shape).view(np.uint64))
        both_nan = np.isnan(c[differ, k]) & np.isnan(np.broadcast_to(ref, a.shape)[differ])
        differ = differ[~both_nan]   # NaN payloads and signs are not part of C's contract
        if "fmin" in template or "fmax" in template:   # nor the sign of fmin/fmax(-0.0, +0.0) (C99 F.9.9.2)
            differ = differ[c[differ, k] != np.broadcast_to(ref, a.shape)[differ]]
        assert not len(differ), (template, a[differ[:3]], b[differ[:3]], c[differ[:3], k], ref[differ[:3]])



@pytest.mark.parametrize("changes, key, fragment", [
    ({"data_sources": [{"name": "best", "type": "double", "shape": [6]}]}, "data_sources[0]", "generated code itself"),
    ({"data_sources": [{"name": "v12", "type": "double", "shape": [6]}]}, "data_sources[0]", "generated code itself"),
    ({"data_sources": [{"name": "cos", "type": "double", "shape": [6]}]}, "data_sources[0]", "generated code itself"),
    ({"data_sources": [{"name": "double", "type": "double", "shape": [6]}]}, "data_sources[0]", "not a usable C name"),
    ({"data_sources": [{"name": "obs\n", "type": "double", "shape": [6]}]}, "data_sources[0]", "not a usable C name"),
    ({"data_sources": [{"name": "a" * 300, "type": "double", "shape": [6]}]}, "data_sources[0]", "300 characters"),
    ({"data_sources": [{"name": "obs", "type": "double", "shape": [3]},
                       {"name": "OBS", "type": "double", "shape": [3]}]}, "data_sources[1]", "given twice"),
    ({"action_names": ["STAY", "LEFT", "RIGHT", "left"]}, "action_names[3]", "given twice"),
    ({"action_names": ["STAY", "LEFT", "RIGHT", "J" * 64]}, "action_names[3]", "at most 63"),
    ({"action_names": ["STAY", "LEFT", "RIGHT", "NN_X"]}, "action_names[3]", "not a usable C name"),
])
def test_names_that_reach_the_c_are_usable_c_names(tmp_path, changes, key, fragment):
    """Data source names are parameters of the generated functions and action names macros: a
    keyword, one of the code's locals (`best`, `v12`), a function (`cos`) or two names equal but
    for case made C that did not compile."""
    path = write_env(tmp_path / "env.json", **changes)
    with pytest.raises(NNBuildError) as excinfo:
        Environment.load(path)
    text = str(excinfo.value)
    assert "\n" not in text and text.startswith(f"{path}: '{key}': ") and fragment in text, text
