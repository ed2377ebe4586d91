"""Untrusted JSON (files.read_json, parse_json): a regular file within limits.MAX_JSON_BYTES, nested
at most limits.MAX_JSON_DEPTH deep; anything else is one line naming the file, never a
RecursionError or an unbounded read."""

import json
import os
import random

import pytest

from nnbuild import files, limits
from nnbuild.errors import NNBuildError


def nesting(value) -> int:
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    return 0


def random_value(rng, depth=0):
    """JSON values whose strings hold brackets, quotes and backslashes (what the depth scan must skip)."""
    if depth > 7 or rng.random() < 0.3:
        return rng.choice([1, -2.5e-3, None, True, 'a"[', "\\", '\\"]{', "}}}", "x" * rng.randint(0, 5)])
    if rng.random() < 0.5:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["k", "[", '\\"', "{"]) + str(i): random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_json_depth_matches_the_parsed_nesting():
    rng = random.Random(23)
    for _ in range(600):
        value = random_value(rng)
        for text in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=False)):
            assert files.json_depth(text) == nesting(value), text


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_json_depth_across_chunks(monkeypatch):
    """Strings and escapes that straddle the scan's chunk boundary."""
    text = json.dumps([["\\" * 5 + '"[' * 3] * 50, [[["]"]]]] * 20000)
    assert len(text) > 1 << 22
    assert files.json_depth(text) == 4


@pytest.mark.parametrize("depth", [100_000, 900, limits.MAX_JSON_DEPTH + 1])
def test_deep_json_is_one_line(tmp_path, depth):
    path = tmp_path / "example.json"
    path.write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(NNBuildError) as info:
        files.read_json_object(path, "example config")
    assert str(info.value) == (f"{path}: example config is nested too deeply (more than {limits.MAX_JSON_DEPTH} "
                               "levels; limits.MAX_JSON_DEPTH)")


def test_json_at_the_depth_limit_is_read(tmp_path):
    path = tmp_path / "board.json"
    path.write_text("[" * limits.MAX_JSON_DEPTH + "]" * limits.MAX_JSON_DEPTH)
    assert files.read_json(path, "board file") == json.loads(path.read_text())


def test_devices_and_fifos_are_not_read(tmp_path):
    with pytest.raises(NNBuildError, match="board file is not a regular file"):
        files.read_json("/dev/zero", "board file")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer
    with pytest.raises(NNBuildError, match="fifo.json: board file is not a regular file"):
        files.read_json(fifo, "board file")
    with pytest.raises(NNBuildError, match="cannot read board file"):
        files.read_json(tmp_path, "board file")


def test_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(list(range(100))))
    monkeypatch.setattr(limits, "MAX_JSON_BYTES", 50)
    with pytest.raises(NNBuildError, match=r"big.json: item map is \d+ bytes, more than 50"):
        files.read_json_object(path, "item map")
