"""Boards are data: one JSON file per board in toolchains/ (mcu, clock, memories, flags, tools)."""

import json
import os
from pathlib import Path

from nnbuild.errors import NNBuildError

REPO_TOOLCHAINS = Path(__file__).resolve().parent.parent / "toolchains"


def toolchains_dir() -> Path:
    """Where board files live: $NNBUILD_TOOLCHAINS, else the checkout's toolchains/."""
    return Path(os.environ.get("NNBUILD_TOOLCHAINS", REPO_TOOLCHAINS))


def available_boards():
    """Sorted board names, discovered from the files (a new board is one new file)."""
    return sorted(p.stem for p in toolchains_dir().glob("*.json"))


def board_path(name) -> Path:
    return toolchains_dir() / f"{name}.json"


def load_board(name) -> dict:
    """The board's data; an unknown name lists the known ones."""
    path = board_path(name)
    if not path.is_file():
        raise NNBuildError(f"unknown target '{name}' (boards: {', '.join(available_boards())})",
                           path=toolchains_dir())
    with open(path) as f:
        board = json.load(f)
    board.setdefault("name", name)
    return board


def clock_hz(board):
    return board.get("clock_hz")
