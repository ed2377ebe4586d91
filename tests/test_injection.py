"""Model files are untrusted input: text from them reaches generated C only as inert comment text
or as checked identifiers (nnbuild.names). The canary is a name holding every way out of a C
comment or string (comment ends and starts, line comments, newlines with preprocessor directives,
line splices, trigraphs, quotes, NUL, CR, Unicode line separators, non-ASCII).

The proof, per code shape and precision: the code generated for the canary-named model and for the
same model named with the canary's C identifiers are the same program once comments are removed
(gcc -fpreprocessed -E), the canary C compiles under -Werror, and no raw canary byte sequence that
could leave a comment appears in any generated file.
"""

import subprocess
import sys

import numpy as np
import pytest

import keras_files as kf
from conftest import REPO, have
from nnbuild import codegen, names
from nnbuild.ir.graph import (Activation, Add, BatchNorm, Concatenate, Conv2D, Dense, Flatten, Model,
                              Pool2D, ZeroPadding2D)

PAYLOAD = ('*/\n#ifndef X\n#define X\n#include <stdlib.h>\n__attribute__((constructor)) static void x(void) '
           '{ if (system("id > owned.txt")) {} }\n#endif\n/* // \\\n??/ ??= "\'\r\u2028\x00 \u00e9 %: <% '
           '#define expf(v) (0.5f)\n')
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def canary(tag):
    return f"{tag} {PAYLOAD}"


def model_name(text):
    """A model name made of `text` (names.c_identifier, cut to the longest name nnbuild takes)."""
    return names.c_identifier(text)[:names.MAX_NAME_LENGTH]


def renamed(model, rename):
    """The same model with every layer (and edge) name passed through `rename`."""
    layers = [type(l)(**{**l.__dict__, "name": rename(l.name)}) for l in model.layers]
    edges = None
    if model.edges is not None:
        edges = {rename(k): tuple(rename(s) if s != model.input_name else s for s in v)
                 for k, v in model.edges.items()}
    return Model(rename(model.name), model.input_shape, layers, tuple(rename(s) for s in model.source_files),
                 dict(model.meta), edges, model.input_name)


def mlp_model(fixed=False):
    rng = np.random.default_rng(7)
    layers = [Dense(canary("d1"), rng.normal(size=(3, 4)).astype(np.float32) * 0.3,
                    rng.normal(size=4).astype(np.float32) * 0.1, "tanh")]
    if not fixed:
        layers.append(Activation(canary("a2"), "relu"))
    layers.append(Dense(canary("d3"), rng.normal(size=(4, 2)).astype(np.float32) * 0.3,
                        rng.normal(size=2).astype(np.float32) * 0.1, "linear"))
    return Model(model_name(canary("m")), (3,), layers, source_files=(canary("file") + ".h5",))


def cnn_model():
    rng = np.random.default_rng(8)
    w = lambda *s: (rng.normal(size=s) * 0.3).astype(np.float32)  # noqa: E731
    n = {k: canary(k) for k in ("pad", "conv", "bn", "pool", "conv2", "add", "cat", "flat", "dense")}
    layers = [ZeroPadding2D(n["pad"], (1, 0, 1, 0)),
              Conv2D(n["conv"], w(3, 3, 2, 4), w(4), activation="relu"),
              BatchNorm(n["bn"], w(4) + 1, w(4), w(4), np.abs(w(4)) + 0.5, 1e-3),
              Pool2D(n["pool"], "max", (2, 2), (2, 2)),
              Conv2D(n["conv2"], w(3, 3, 4, 4), w(4), padding=(1, 1, 1, 1)),
              Add(n["add"]),
              Concatenate(n["cat"], 2),
              Flatten(n["flat"]),
              Dense(n["dense"], w(32, 3), w(3), "softmax")]
    edges = {n["pad"]: ("input",), n["conv"]: (n["pad"],), n["bn"]: (n["conv"],), n["pool"]: (n["bn"],),
             n["conv2"]: (n["pool"],), n["add"]: (n["pool"], n["conv2"]), n["cat"]: (n["add"], n["pool"]),
             n["flat"]: (n["cat"],), n["dense"]: (n["flat"],)}
    return Model(model_name(canary("cnn")), (6, 6, 2), layers, source_files=(canary("cnn") + ".h5",), edges=edges)


def strip_comments(path, tmp_path):
    """The C of `path` without its comments (gcc's own lexer), directives kept."""
    return subprocess.run(["gcc", "-fpreprocessed", "-dD", "-E", "-P", str(path)], check=True,
                          capture_output=True, text=True, cwd=tmp_path).stdout


def assert_inert(files, raw_names):
    """No generated file holds a raw canary (only its escaped form), and none of the payload's
    directive lines made it to the start of a line."""
    for path in files:
        text = path.read_text()
        for raw in raw_names:
            assert raw not in text, path.name
        for line in ("#include <stdlib.h>", "#ifndef X", "#define X", "#define expf(v)"):
            assert not any(l.strip().startswith(line) for l in text.splitlines()), (path.name, line)


CASES = [("mlp", "float32", False), ("mlp", "q16", True), ("mlp", "q16-acc32", True), ("mlp", "q8", True), ("mlp", "fix16", True),
         ("mlp", "fixed16.8", True), ("v1", "float32", None), ("v2", "float32", None), ("v3", "float32", None),
         ("v2", "q16", None), ("v2", "q16-acc32", None), ("v2", "q8", None), ("v3", "q16-acc32", None)]
#: within a shape the fixed-point precisions render the names through the same template lines (the
#: lines that carry the canary are the same text but for numbers): the quick tier keeps q16 of mlp
#: and v2, the other fixed-point precisions of those shapes are e2e
E2E_CASES = {("mlp", "q16-acc32"), ("mlp", "q8"), ("mlp", "fix16"), ("mlp", "fixed16.8"), ("v2", "q16-acc32"),
             ("v2", "q8")}


@pytest.mark.skipif(not have("gcc"), reason="gcc not installed")
@pytest.mark.parametrize("shape,precision,fixed", [
    pytest.param(s, p, f, id=f"{s}-{p}", marks=[pytest.mark.e2e] if (s, p) in E2E_CASES else []) for s, p, f in CASES])
def test_canary_names_come_out_inert(tmp_path, shape, precision, fixed):
    model = cnn_model() if fixed is None else mlp_model(fixed)
    options = dict(shape=shape, precision=precision, storage="const",
                   input_range=(-1.0, 1.0) if fixed or precision != "float32" else None)
    evil = codegen.generate(model, tmp_path / "evil", **options)
    plain_model = renamed(model, names.c_identifier)
    plain = codegen.generate(plain_model, tmp_path / "plain", **options)
    assert [p.name for p in evil] == [p.name for p in plain]
    assert_inert(evil, [l.name for l in model.layers] + [PAYLOAD])
    for e, p in zip(evil, plain):
        if e.suffix in (".c", ".h"):
            assert strip_comments(e, tmp_path) == strip_comments(p, tmp_path), e.name
            assert e.read_text() != p.read_text() or e.suffix == ".h"
    sources = [str(p) for p in evil if p.suffix == ".c"]
    subprocess.run(["gcc", "-c", *WARNINGS, f"-I{tmp_path / 'evil'}", *sources], check=True, cwd=tmp_path,
                   capture_output=True, text=True)
    assert not (tmp_path / "owned.txt").exists()


def test_c_text_is_inert_and_unambiguous():
    for text in (PAYLOAD, "a*/b", "a/*b", "a//b", "x\\\ny", "??/", "\"'", "\u2028", "\x00", "é"):
        out = names.c_text(text)
        assert all(ch in names._SAFE_TEXT or ch == "\\" for ch in out)
        assert "*" not in out and "/" not in out and "?" not in out and '"' not in out and "\n" not in out
        assert not out.endswith("\\")
    assert names.c_text("conv2d_1.k-2 (x)") == "conv2d_1.k-2 (x)"
    assert names.c_text("a\\057") != names.c_text("a/")  # the escape character is escaped itself


def test_error_lines_stay_one_line_and_terminal_inert():
    from nnbuild.errors import NNBuildError
    text = str(NNBuildError("bad layer", path="m.h5", item="layer 'x\n\x1b[31mred'"))
    assert "\n" not in text and "\x1b" not in text and "\\x1b" in text


@pytest.mark.e2e
@pytest.mark.skipif(not have("gcc"), reason="gcc not installed")
def test_issue_attack_through_cli_check_runs_nothing(tmp_path):
    """The reported attack: a Dense layer named to close the comment and add a constructor that runs
    `id > owned.txt`. `nnbuild check` must build inert code and pass; nothing is executed."""
    name = 'd1 */\n#ifndef X\n#define X\n#include <stdlib.h>\n__attribute__((constructor)) static void x(void) ' \
           '{ if (system("id > owned.txt")) {} }\n#endif\n/* '
    rng = np.random.default_rng(1)
    k, b = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    path = kf.write_full_model(tmp_path / "model.h5", [kf.dense(name, k, b, "tanh", input_dim=2)])
    x = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.tanh(x.astype(np.float64) @ k + b))
    run = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(path), "--data", str(tmp_path / "d.npz"),
                          "--build-dir", str(tmp_path / "b")], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "owned.txt").exists() and not (REPO / "owned.txt").exists()
    code = (tmp_path / "b" / "gen" / "model.c").read_text()
    assert "d1 \\052\\057\\012#ifndef X" in code
    assert not any(line.lstrip().startswith(("#include <stdlib.h>", "#ifndef X", "__attribute__"))
                   for line in code.splitlines())


def test_layer_names_that_clean_to_one_c_name_are_refused_naming_both(tmp_path):
    from nnbuild.errors import NNBuildError
    rng = np.random.default_rng(2)
    model = Model("collide", (2,), [Dense("a-b", rng.normal(size=(2, 2)).astype(np.float32), None, "tanh"),
                                    Dense("a_b", rng.normal(size=(2, 1)).astype(np.float32), None)],
                  source_files=("collide.h5",))
    with pytest.raises(NNBuildError, match=r"collide.h5: layers 'a-b' and 'a_b' both become the C name 'a_b'"):
        codegen.generate(model, tmp_path / "gen")
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize("stem", ["math", "stdint", "stdio", "string", "check_main", "main", "Math"])
def test_model_names_never_take_a_header_or_project_file_name(stem):
    assert names.c_identifier(stem) == stem + "_model"
    assert names.c_identifier(stem + "_net") == stem + "_net"
