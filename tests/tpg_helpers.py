"""Helpers of the TPG tests: a small environment and .dot graphs written for the tests, a C replay
driver that links several generated models in one program, and the SiPS'22 data in ../shared."""

import gzip
import json
import subprocess
from pathlib import Path

import numpy as np

from conftest import SHARED

SIPS22 = SHARED / "data" / "tpg" / "sips22"
GAMES = ("fishing_derby.9", "frostbite.2", "alien.4", "asteroids.1", "centipede.7", "alien.0")
HOST_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]

#: 4 registers, 2 program constants, 6 observation values: sources 0 regs, 1 constants, 2 obs
TEST_ENV = {
    "nnbuild_tpg_environment": 1, "name": "test-env", "registers": 4, "constants": 2,
    "data_sources": [{"name": "obs", "type": "double", "shape": [2, 3]}],
    "actions": 4, "action_names": ["STAY", "LEFT", "RIGHT", "JUMP"],
    "integer_tables": {"min": -8, "max": 8},
    "instructions": [
        {"name": "add", "operands": ["double", "double"], "c": "$0 = $1 + $2;", "python": "$1 + $2"},
        {"name": "sub", "operands": ["double", "double"], "c": "$0 = $1 - $2;", "python": "$1 - $2"},
        {"name": "div", "operands": ["double", "double"], "c": "$0 = $1 / $2;", "python": "$1 / $2"},
        {"name": "cos", "operands": ["double"], "c": "$0 = cos($1);", "python": "cos($1)"},
        {"name": "log", "operands": ["double"], "c": "$0 = log($1);", "python": "log($1)"},
        {"name": "addc", "operands": ["double", "constant"], "c": "$0 = $1 + $2;", "python": "$1 + $2"},
        {"name": "neg_if_less", "operands": ["double", "double"], "c": "$0 = (($1) < ($2)) ? -($1) : ($1);",
         "python": "-$1 if $1 < $2 else $1"},
    ],
}

DOT_HEADER = 'digraph{\n\tgraph[pad = "0.212, 0.055" bgcolor = lightgray]\n\tnode[shape=circle style = filled label = ""]\n'


def program(pid, lines, constants=(0, 0)):
    """The P/I/P->I statements of one program; lines as 'instr|dest&src|loc#src|loc'."""
    body = "".join(f"{l}&#92;n" for l in lines)
    return (f'\t\tP{pid} [fillcolor="#cccccc" shape=point] //{"".join(f"{c}|" for c in constants)}\n'
            f'\t\tI{pid} [shape=box style=invis label="{body}"]\n'
            f"\t\tP{pid} -> I{pid}[style=invis]\n")


def action(n, action_id):
    return f'\t\tA{n} [fillcolor="#ff3366" shape=box margin=0.03 width=0 height=0 label="{action_id}"]\n'


def small_graph(header=""):
    """T2 (root) -> {P0 -> A LEFT, P1 -> T5, P2 -> A JUMP}; T5 -> {P3 -> A RIGHT, P0 (shared) ->
    A LEFT}; P3 uses a constant and a table function, P1 a division and a conditional negation."""
    return (header + DOT_HEADER
            + '\t\tT5 [fillcolor="#66ddff"]\n\t\tT2 [fillcolor="#1199bb"]\n'
            + program(0, ["0|0&2|1#2|3"])
            + action(0, 1) + "\t\tT2 -> P0 -> A0\n"
            + program(1, ["2|1&2|0#2|4", "6|0&0|1#2|8", "1|2&0|0#0|3"])
            + "\t\tT2 -> P1 -> T5\n"
            + program(2, ["3|0&2|2#0|0", "4|3&0|0#2|5", "0|0&0|0#0|7"])
            + action(1, 3) + "\t\tT2 -> P2 -> A1\n"
            + program(3, ["5|2&2|5#1|3", "3|0&0|2#0|0"], constants=(3, -2))
            + action(2, 2) + "\t\tT5 -> P3 -> A2\n"
            + "\t\tT5 -> P0\n"
            + "\t\t{ rank= same T2 }\n}\n")


def write(path, text):
    path = Path(path)
    path.write_text(text)
    return path


def write_env(path, **changes):
    return write(path, json.dumps({**TEST_ENV, **changes}))


# --------------------------------------------------------------- replay driver (several models)

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "models.h"

/* argv[1]: model index; argv[2]: "u8" (one byte per value) or "f64" (binary64). Reads
 * observations of NN_IN values from stdin until EOF, writes one int32 action each. */
int main(int argc, char **argv)
{
    static unsigned char raw[NN_IN * 8];
    static double obs[NN_IN];
    int model, u8, i;
    if (argc != 3)
        return 2;
    model = atoi(argv[1]);
    u8 = argv[2][0] == 'u';
    if (model < 0 || model >= NN_MODELS)
        return 2;
    while (fread(raw, u8 ? 1 : 8, NN_IN, stdin) == NN_IN) {
        int32_t a;
        for (i = 0; i < NN_IN; ++i) {
            if (u8) {
                obs[i] = (double)raw[i];
            } else {
                double d;
                unsigned char *p = (unsigned char *)&d;
                int k;
                for (k = 0; k < 8; ++k)
                    p[k] = raw[8 * i + k]; /* little-endian host */
                obs[i] = d;
            }
        }
        a = (int32_t)nn_models[model](obs);
        fwrite(&a, sizeof a, 1, stdout);
    }
    return 0;
}
"""


def build_replay(gen, names, n_in, out, opt="-O2"):
    """One host program linking every generated model of `names` (all in `gen`), compiled as one
    translation unit with the board's warning flags. Returns its path."""
    gen = Path(gen)
    lines = [f'#include "{n}.h"' for n in names]
    lines += [f"static int nn_model_{k}(const double *obs) {{ return {n.upper()}_INFER_FLAT(obs); }}"
              for k, n in enumerate(names)]
    lines += [f"#define NN_MODELS {len(names)}", f"#define NN_IN {n_in}",
              "static int (*const nn_models[NN_MODELS])(const double *) = {"
              + ", ".join(f"nn_model_{k}" for k in range(len(names))) + "};"]
    (gen / "models.h").write_text("\n".join(lines) + "\n")
    (gen / "driver.c").write_text(DRIVER)
    (gen / "unity.c").write_text("".join(f'#include "{n}.c"\n#include "{n}_weights.c"\n' for n in names))
    subprocess.run(["gcc", opt, *HOST_FLAGS, f"-I{gen}", str(gen / "unity.c"), str(gen / "driver.c"),
                    "-o", str(out), "-lm"], check=True, capture_output=True, text=True)
    return Path(out)


def replay(program, model_index, x, u8=False):
    """Action ids of model `model_index` of a replay program for observations x."""
    data = np.ascontiguousarray(x, dtype=np.uint8 if u8 else "<f8").tobytes()
    proc = subprocess.run([str(program), str(model_index), "u8" if u8 else "f64"], input=data,
                          capture_output=True, check=True)
    return np.frombuffer(proc.stdout, dtype="<i4").astype(np.int64)


def trace(game):
    """(observations uint8 [N, 1344], recorded actions [N]) of a SiPS'22 trace."""
    obs = np.frombuffer(gzip.open(SIPS22 / "traces" / f"{game}.obs.u8.gz").read(), np.uint8).reshape(-1, 1344)
    actions = np.array((SIPS22 / "traces" / f"{game}.actions.txt").read_text().split(), dtype=np.int64)
    return obs, actions


def dot_file(game, kind):
    return (SIPS22 / "cleaned" / f"out_best_cleaned.{game}.t48.dot" if kind == "cleaned"
            else SIPS22 / "full" / f"out_best.{game}.t48.dot")


def avr_libm_driver(folder, routine, driver):
    """A one-float-in, one-float-out AVR program `cg_<routine>` around check_main.c, from the C
    text `driver` (defining cg_<routine>), linked with avr-libc's libm: the ELF's path."""
    from nnbuild.runners import CHECK_MAIN
    from test_wcet_avr import board
    folder = Path(folder)
    (folder / "cg.h").write_text(f"void cg_{routine}(const float in[1], float out[1]);\n")
    (folder / "cg.c").write_text(driver)
    b = board()
    elf = str(folder / "cg.elf")
    subprocess.run([b["cc"], *b["cflags"], "-Os", f"-I{folder}", '-DNN_HEADER="cg.h"', f"-DNN_INFER=cg_{routine}",
                    "-DNN_IN=1", "-DNN_OUT=1", str(folder / "cg.c"), str(CHECK_MAIN), *b["ldflags"], "-lm",
                    "-o", elf], check=True, capture_output=True)
    return elf


def powser_table(elf, prog, symbol):
    """The __fp_powser table `symbol` loads into Z before its call (count, coefficients as exact
    40-bit values: float plus the extension byte __fp_powser loads into r26), from the flash image."""
    from test_wcet_avr_context import powser_location
    image, addr = powser_location(elf, prog, symbol, window=0x40)
    count, coef = image[addr], []
    for k in range(count + 1):
        ext = 0 if k == 0 else image[addr + 5 * k]  # the first r26 is the count byte
        word = int.from_bytes(image[addr + 5 * k + 1:addr + 5 * k + 5], "little")
        sign, e, m = word >> 31, (word >> 23) & 0xFF, (word & 0x7FFFFF) | 0x800000
        coef.append((-1.0) ** sign * ((m << 8) | ext) * 2.0 ** (e - 127 - 31))
    return count, coef


_TRACER = []


def trace_calls(elf, probes, x, folder, within=()):
    """Run the one-float driver `elf` (avr_libm_driver) under tests/wcet_fixtures/avr_trace.c on the
    arguments `x`, filling `probes` (test_wcet_avr_context.Probe: cycles and counts per invocation);
    the functions `within` are tracked as context. The tracer is compiled once per process; the
    test is skipped when libsimavr is missing."""
    import tempfile
    import pytest
    from test_wcet_avr_context import build_tracer, run_trace_sites
    if not _TRACER:
        _TRACER.append(build_tracer(Path(tempfile.mkdtemp(prefix="nnbuild_avr_trace")) / "avr_trace"))
    if _TRACER[0] is None:
        pytest.skip("libsimavr not available")
    return run_trace_sites(_TRACER[0], elf, probes, np.asarray(x, np.float32)[:, None], set(within), (), folder)
