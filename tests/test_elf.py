"""nnbuild.compilers.elf (pyelftools) gives what the binutils text tools printed before it replaced
them: `size -B`'s text/data/bss, `nm -S --defined-only`'s symbols and `objdump -dl`'s line per
instruction, on the host's DWARF 5, avr-gcc 5.4's DWARF 2 line programs and arm-none-eabi-gcc's, and
on every example's AVR check program (so the memory report and the flow-fact address mapping give
the same figures); the objdump -dl fallback of the AVR decoder is held to the same listing."""

import os
import subprocess

import pytest

from conftest import have
from nnbuild import boards, pipeline, project
from nnbuild.compilers import elf as elf_file
from nnbuild.errors import NNBuildError
from nnbuild.wcet import avr_decode, otawa

PROGRAM = {
    "main.c": """
#include "parts.h"
int counter;                                  /* bss */
int table[4] = {1, 2, 3, 4};                  /* data */
static const float weights[3] = {0.5f, -1.0f, 2.0f};
static int twice(int x) { return 2 * x; }
int main(void)
{
    int sum = 0;
    for (int i = 0; i < 4; ++i)
        sum += twice(table[i]) + (int)weights[i % 3] + helper(i);
    counter = sum;
    return sum == 7;
}
""",
    "parts.h": "int helper(int x);\n",
    "parts.c": '#include "parts.h"\nint helper(int x)\n{\n    return x > 2 ? x - 1 : x + 1;\n}\n',
}


def build(tmp_path, cc, flags=()):
    for name, text in PROGRAM.items():
        (tmp_path / name).write_text(text)
    out = tmp_path / "program.elf"
    subprocess.run([cc, "-g", "-O1", *flags, "main.c", "parts.c", "-o", str(out)], cwd=tmp_path, check=True)
    return out


def tool_sizes(size, elf):
    text, data, bss = subprocess.run([size, "-B", str(elf)], capture_output=True, text=True,
                                     check=True).stdout.splitlines()[1].split()[:3]
    return {"text": int(text), "data": int(data), "bss": int(bss)}


def tool_symbols(nm, elf):
    """(name, address, size or None, letter) from `nm -S --defined-only`."""
    found = set()
    for line in subprocess.run([nm, "-S", "--defined-only", str(elf)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            found.add((parts[3], int(parts[0], 16), int(parts[1], 16), parts[2]))
        elif len(parts) == 3:
            found.add((parts[2], int(parts[0], 16), None, parts[1]))
    return found


def tool_lines(objdump, elf):
    """{address: (file basename, line)} of every instruction `objdump -dl` decodes with a line."""
    listing = subprocess.run([objdump, "-dl", "--no-show-raw-insn", str(elf)], capture_output=True, text=True,
                             check=True).stdout
    return {insn.addr: (os.path.basename(insn.file), insn.line) for parts in otawa.parse_objdump(listing).values()
            for func in parts for insn in func.insns if insn.file}


def assert_same_as_binutils(elf, prefix=""):
    assert elf_file.section_sizes(elf) == tool_sizes(f"{prefix}size", elf)
    mine = {(s.name, s.addr, s.size, s.kind) for s in elf_file.symbols(elf)}
    theirs = tool_symbols(f"{prefix}nm", elf)
    # nm letters for some absolute and special symbols differ by binutils version; names, addresses
    # and sizes must agree for all, letters for every code and data symbol
    assert {s[:3] for s in mine} == {s[:3] for s in theirs}
    assert {s for s in mine if s[3] in "TtWDdBbRr"} == {s for s in theirs if s[3] in "TtWDdBbRr"}
    lines = elf_file.line_table(elf)
    expected = tool_lines(f"{prefix}objdump", elf)
    assert expected, "the test program must have line information"
    got = {addr: (os.path.basename(lines.at(addr)[0]), lines.at(addr)[1]) for addr in expected}
    assert got == expected


def test_host_elf_reads_as_binutils_prints_it(tmp_path):
    """gcc 12's DWARF 5 line programs, a static function, data, bss and read-only data."""
    assert_same_as_binutils(build(tmp_path, "gcc"))


def test_a_file_that_is_not_elf_is_one_line(tmp_path):
    bogus = tmp_path / "bogus.elf"
    bogus.write_bytes(b"\x7fELF" + b"\0" * 12)
    with pytest.raises(NNBuildError, match="bogus.elf.*not a readable ELF"):
        elf_file.section_sizes(bogus)


def test_an_address_outside_every_row_has_no_line():
    table = elf_file.LineTable([(0x10, 0x14, "a.c", 3), (0x20, 0x24, "a.c", 4)])
    assert table.at(0x12) == ("a.c", 3) and table.at(0x14) == (None, None) and table.at(0x8) == (None, None)


@pytest.mark.e2e
@pytest.mark.skipif(not have("avr-gcc", "avr-objdump", "avr-nm", "avr-size"), reason="binutils-avr not installed")
def test_avr_elf_reads_as_binutils_prints_it(tmp_path):
    """avr-gcc 5.4's DWARF under the boards' -gdwarf-4 (version 2 line programs), which avr-readelf
    2.26 cannot decode."""
    assert_same_as_binutils(build(tmp_path, "avr-gcc", ["-mmcu=atmega1284", "-gdwarf-4"]), "avr-")


@pytest.mark.e2e
@pytest.mark.skipif(not have("arm-none-eabi-gcc"), reason="gcc-arm-none-eabi not installed")
def test_arm_elf_reads_as_binutils_prints_it(tmp_path):
    elf = build(tmp_path, "arm-none-eabi-gcc", ["-mcpu=arm7tdmi", "-specs=rdimon.specs"])
    assert_same_as_binutils(elf, "arm-none-eabi-")
    arm = boards.load_board("arm")
    functions = otawa.disassemble(elf, arm)
    listed = otawa.parse_objdump(subprocess.run(["arm-none-eabi-objdump", "-dl", "--no-show-raw-insn", str(elf)],
                                                capture_output=True, text=True, check=True).stdout)
    assert {(i.addr, i.mnemonic, i.file, i.line) for parts in functions.values() for f in parts for i in f.insns} \
        == {(i.addr, i.mnemonic, i.file, i.line) for parts in listed.values() for f in parts for i in f.insns}


@pytest.mark.e2e
@pytest.mark.skipif(not have("arm-none-eabi-gcc"), reason="gcc-arm-none-eabi not installed")
def test_the_line_lookup_reading_some_units_answers_as_the_whole_table(tmp_path):
    """elf.line_lookup reads the line programs of the units an address needs (by .debug_aranges):
    every address of a program linked with newlib's debug lines, and with sections the linker
    dropped (their rows at 0), gets the whole table's row, asked for in any order."""
    elf = build(tmp_path, "arm-none-eabi-gcc", ["-mcpu=cortex-m4", "-mthumb", "-specs=rdimon.specs",
                                                  "-ffunction-sections", "-Wl,--gc-sections"])
    whole = elf_file.line_table(elf)
    addresses = sorted({a for row in whole.rows for a in (row[0], row[1] - 1, row[1])} | {0, 1, 0xFFFFFFFF})
    lookup = elf_file._LineLookup(elf)
    assert [lookup.at(a) for a in reversed(addresses)] == [whole.at(a) for a in reversed(addresses)]
    for a in addresses[::max(1, len(addresses) // 40)]:
        assert elf_file._LineLookup(elf).at(a) == whole.at(a)
    assert elf_file.line_lookup(elf) is elf_file.line_lookup(elf)


#: float32 LeNet-5 does not fit the ATmega1284's flash: its fixed-point build does
FITTING = {"lenet5": {"precision": "q8"}}


def example_models():
    """Every single-graph example, with its own options (model file, precision, range), where its
    model file is present (third-party models are read from ../shared)."""
    for name in project.available_examples():
        try:
            spec = project.resolve(name)
        except NNBuildError:
            continue
        if name != "multiitem_cnn":
            yield pytest.param(name, {**spec, **FITTING.get(name, {})}, id=name)


@pytest.mark.e2e
@pytest.mark.skipif(not have("avr-gcc", "avr-objdump", "avr-nm", "avr-size"), reason="binutils-avr not installed")
@pytest.mark.parametrize("name,spec", list(example_models()))
def test_every_example_decodes_as_avr_objdump_and_nm_gave_it(tmp_path, name, spec):
    """The AVR decoder's instructions, lines and text symbols, and the memory figures, are those the
    binutils text gave on each example's check program; the objdump -dl fallback gives them too."""
    board = boards.load_board("avr")
    elf, _ = pipeline.build_check_program(spec["model"], board, tmp_path, name=name,
                                          precision=spec.get("precision", "float32"),
                                          input_range=spec.get("input_range"), environment=spec.get("environment"))
    decoded = avr_decode.decode(elf, board)
    listed = avr_decode.parse_listing(subprocess.run(["avr-objdump", "-dl", "-j", ".text", str(elf)],
                                                     capture_output=True, text=True, check=True).stdout)
    assert decoded == listed
    nm = subprocess.run(["avr-nm", "-n", "-S", "--defined-only", str(elf)], capture_output=True, text=True,
                        check=True).stdout
    assert avr_decode.elf_symbols(elf) == avr_decode.parse_symbols(nm)
    program = avr_decode.load(elf, board)
    assert program.insns == listed and program.symbols == avr_decode.parse_symbols(nm) and program.starts
    assert board.compiler.section_sizes(board, elf) == tool_sizes("avr-size", elf)


@pytest.mark.e2e
@pytest.mark.skipif(not have("avr-gcc", "avr-objdump"), reason="binutils-avr not installed")
def test_the_avr_decoder_falls_back_to_objdump_lines_for_stabs(tmp_path, capsys):
    """avr-gcc's plain -g writes STABS, which pyelftools cannot read: the decoder takes the lines from
    avr-objdump -dl, the same lines as the DWARF of -gdwarf-4 gives for the same code."""
    stabs = build(tmp_path, "avr-gcc", ["-mmcu=atmega1284"])
    with pytest.raises(NNBuildError, match="STABS"):
        elf_file.line_table(stabs)
    decoded = avr_decode.decode(stabs)
    assert "taking the lines from avr-objdump -dl" in capsys.readouterr().err
    dwarf = avr_decode.decode(build(tmp_path, "avr-gcc", ["-mmcu=atmega1284", "-gdwarf-4"]))
    assert {(a, os.path.basename(i.file or ""), i.line) for a, i in decoded.items()} \
        == {(a, os.path.basename(i.file or ""), i.line) for a, i in dwarf.items()}
