"""A program that outgrows a board's memory fails at link with one nnbuild line (output, model, bytes
needed vs the board's, the shape's advice), never GNU ld's raw "will not fit in region" text.

Quick: a real avr-gcc link of 2 x 20 KB of PROGMEM for the ATmega328P's own 32 KB text region.
e2e: `scons` of the xor example in shape v3 for a board file whose flash (and linker text region)
is 2 KB: the build stops at the link in one line, with no firmware, run or report left behind.
"""

import copy
import json
import re

import pytest

from conftest import copy_project, needs_avr, scons
from nnbuild import boards, codegen
from nnbuild.compilers import gcc
from nnbuild.errors import NNBuildError

BIG_FLASH_PROGRAM = """#include <avr/pgmspace.h>
static const unsigned char a[20000] PROGMEM = {1}, b[20000] PROGMEM = {2};
int main(void) { return pgm_read_byte(&a[PORTB]) + pgm_read_byte(&b[PORTB]); }
"""


def chip_sized(board_name, **changes):
    """A board whose linker text region is the chip's own (its --defsym widenings dropped)."""
    board = copy.deepcopy(boards.load_board(board_name))
    board["ldflags"] = [f for f in board["ldflags"] if "REGION_LENGTH" not in f]
    board.update(changes)
    return board


def test_other_link_failures_keep_the_linkers_words():
    assert gcc.link_failure(boards.load_board("avr"), "undefined reference to `f'", output="x.elf", model="m",
                            relink=None) is None


@pytest.mark.e2e  # avr-gcc
@needs_avr
def test_a_real_text_overflow_is_one_line_with_the_bytes_needed(tmp_path):
    source = tmp_path / "big.c"
    source.write_text(BIG_FLASH_PROGRAM)
    with pytest.raises(NNBuildError) as failure:
        gcc.build_executable(chip_sized("atmega328p"), [source], tmp_path / "big.elf", hint="try less")
    line = str(failure.value)
    assert "\n" not in line and "will not fit" not in line
    found = re.fullmatch(r".*big\.elf: big does not fit the ATmega328P's flash: it needs ([\d,]+) bytes, "
                         r"the board has 32,768 \(try less\)", line)
    assert found, line
    assert int(found.group(1).replace(",", "")) >= 40_000
    assert not (tmp_path / "big.elf").exists()


def test_only_v3_gives_advice_for_a_program_too_big():
    assert "shape=v2" in codegen.too_big_hint("v3")
    assert codegen.too_big_hint("v2") == codegen.too_big_hint("mlp") == ""


@pytest.mark.e2e
@needs_avr
def test_scons_stops_a_v3_model_over_the_flash_at_link_in_one_line(tmp_path):
    project = copy_project(tmp_path)
    board = chip_sized("atmega328p", name="flash2k", flash_bytes=2048)
    board["ldflags"] += ["-Wl,--defsym=__TEXT_REGION_LENGTH__=0x800"]
    (project / "myboards").mkdir()
    (project / "myboards/flash2k.json").write_text(json.dumps(dict(board), indent=1))
    result = scons(project, "target=myboards/flash2k.json", "model=xor", "shape=v3", "precision=q8",
                   "tolerance=1e-3")
    assert result.returncode != 0
    assert "will not fit" not in result.stderr and "overflowed" not in result.stderr
    lines = [l for l in result.stderr.splitlines() if l.startswith("nnbuild:")]
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(r"nnbuild: build/flash2k/xor/check\.elf: xor does not fit the ATmega328P's flash: "
                        r"it needs [\d,]+ bytes, the board has 2,048 "
                        r"\(shape=v3 unrolls every multiply; try shape=v2\)", lines[0]), lines[0]
    left = {p.name for p in (project / "build/flash2k/xor").iterdir()}
    assert not left & {"check.elf", "firmware.elf", "run_simavr.npz", "report.json", "size.json"}, left


def test_every_compiler_family_gives_the_interface_the_steps_call():
    """SCons, the steps and the pipeline call a board's compiler family without asking what it has:
    the too-big lines included (patmos: GNU ld's words never match there, so its own words stay)."""
    import importlib
    from nnbuild import compilers
    for family, module in compilers.FAMILIES.items():
        missing = [name for name in compilers.INTERFACE if not callable(getattr(importlib.import_module(module), name, None))]
        assert not missing, (family, missing)
    assert gcc.flash_floor_failure(boards.load_board("patmos"), output="x.c", model="x", terms=10**9) is None
