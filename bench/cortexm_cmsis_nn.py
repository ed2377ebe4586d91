"""nnbuild's fixed-point layers beside ARM's CMSIS-NN kernels on the Cortex-M4 (board stm32f407, QEMU's
mps2-an386), per layer of F1/10 and LeNet-5: executed-path cycles per multiply-accumulate of both and
their ratio, in q16-acc32 and q8.

    python3 bench/cortexm_cmsis_nn.py --cmsis-nn DIR [--models f1tenth,lenet5] [--precisions q16-acc32,q8]
    CMSIS_NN=DIR python3 bench/cortexm_cmsis_nn.py

DIR is a checkout of https://github.com/ARM-software/CMSIS-NN (Apache-2.0): read and built here, never
copied into nnbuild. Both sides are compiled by the board's arm-none-eabi-gcc with its flags (-O2,
-mcpu=cortex-m4, hard float), run on the same QEMU machine, and charged by the same cost model: the
qemu-system-arm runner's counting (nnbuild.runners.qemu_system.cycles_per_call) with the Cortex-M4
TRM table (nnbuild.runners.cortexm_timing), over every instruction executed - the timing model applied
to the executed path, not a measurement of silicon.

nnbuild's side is the model's own check program (the board's DSP kernels, the plan's weights). A
layer's cycles are those of the instructions the DWARF line table places in the layer's lines (its
flow-fact range; inlined helpers such as the tanh table lookup count with the layer they are inlined
into): the multiply-accumulates, the requantisation and the activation. CMSIS-NN's side is one call of
its kernel per layer, with the same shapes and the plan's integer weights (int8 where the kernel takes
int8), its per-call cycles counted from entry to return (im2col, requantisation, clamping), plus
CMSIS-NN's own activation call where the layer has one CMSIS-NN implements for that kernel (tanh and
sigmoid: arm_nn_activation_s16 for s16x16 and s16; softmax: arm_softmax_s16, arm_softmax_s8; s8 has
no tanh: its tanh layers count the kernel alone). Which kernels stand beside which precision:

  q16-acc32 (int16 weights x int16 activations, int32 accumulator, power-of-two requantisation)
    vs s16x16: arm_nn_vec_mat_mult_t_s16_s16 (int16 x int16, int64 accumulator; Dense only: CMSIS-NN has
               no int16-weight convolution)
    vs s16:    arm_fully_connected_s16 / arm_convolve_s16 (int8 weights x int16 activations, int64)
  q8 (int8 weights x int16 activations, int32 accumulator)
    vs s16:    the same operand widths
    vs s8:     arm_fully_connected_s8 / arm_convolve_s8 (int8 x int8 with zero-point offsets, int32)

Numerics differ: CMSIS-NN requantises with TFLite's per-layer (per-channel for convolutions) 31-bit
multiplier and shift, rounding twice (SQRDMULH-style), adds zero points (s8) and clamps to an
activation range; nnbuild uses power-of-two scales, so requantisation is one rounding shift, and
applies tanh/sigmoid through its tables in the same loop.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nnbuild import boards, pipeline  # noqa: E402
from nnbuild.codegen import cnn  # noqa: E402
from nnbuild.compilers import elf  # noqa: E402
from nnbuild.errors import NNBuildError  # noqa: E402
from nnbuild.numerics import graph_plan  # noqa: E402
from nnbuild.runners import check_program_parts, cortexm_timing, qemu_system  # noqa: E402
from nnbuild.runners.qemu_user import call_sites, disassembly  # noqa: E402

BOARD = "stm32f407"
MODELS = {"f1tenth": (REPO / "firmware_examples/f1tenth/architecture.json", (-1.0, 1.0)),
          "lenet5": (REPO / "firmware_examples/lenet5/lenet5.h5", (0.0, 1.0))}
#: the CMSIS-NN kernels set beside each precision, in column order
AGAINST = {"q16-acc32": ("s16x16", "s16"), "q8": ("s16", "s8")}
#: CMSIS-NN's source folders the kernels and their helpers live in
CMSIS_FOLDERS = ("ConvolutionFunctions", "FullyConnectedFunctions", "NNSupportFunctions", "ActivationFunctions",
                 "SoftmaxFunctions")
#: the CMSIS-NN entry each kernel name is counted at, per layer kind
ENTRIES = {("s16x16", "dense"): "arm_nn_vec_mat_mult_t_s16_s16", ("s16", "dense"): "arm_fully_connected_s16",
           ("s8", "dense"): "arm_fully_connected_s8", ("s16", "conv2d"): "arm_convolve_s16",
           ("s8", "conv2d"): "arm_convolve_s8"}


def cmsis_checkout(given):
    """The CMSIS-NN folder from --cmsis-nn or $CMSIS_NN, or the one line that says what is missing."""
    path = given or os.environ.get("CMSIS_NN")
    if not path:
        sys.exit("bench/cortexm_cmsis_nn.py: no CMSIS-NN checkout given: clone "
                 "https://github.com/ARM-software/CMSIS-NN and pass --cmsis-nn DIR (or set CMSIS_NN=DIR)")
    root = Path(path).expanduser().resolve()
    if not (root / "Include/arm_nnfunctions.h").is_file() or not (root / "Source").is_dir():
        sys.exit(f"bench/cortexm_cmsis_nn.py: {root} is not a CMSIS-NN checkout (no Include/arm_nnfunctions.h "
                 "and Source/): clone https://github.com/ARM-software/CMSIS-NN there")
    return root


# ----------------------------------------------------------------------------------- the layers


def layers_of(model, precision, input_range):
    """[(name, kind, shape facts, MACs, integer weights, bias)] of the model's Conv2D and Dense layers,
    the weights and biases of the precision's plan, rows [output][input] as both libraries store them."""
    plan = graph_plan.quantize_graph(model, precision, input_range)
    by_name = {op.name: op for op in plan.ops}
    out = []
    for op in cnn.lower(model, "const")["ops"]:
        if op["kind"] not in ("conv2d", "dense"):
            continue
        qop = by_name[op["name"]]
        kq = np.asarray(qop.kernel_q, dtype=np.int64)
        if op["kind"] == "conv2d":
            rows = np.transpose(kq, (3, 0, 1, 2)).reshape(kq.shape[3], -1)
            macs = op["OH"] * op["OW"] * op["OC"] * op["k"]
        else:
            rows = kq.T
            macs = op["outer"] * op["k"] * op["OC"]
        out.append({"name": op["name"], "c_name": op["c_name"], "kind": op["kind"], "op": op, "macs": int(macs),
                    "activation": qop.activation,
                    "rows": rows, "bias": np.asarray(qop.bias_q, dtype=np.int64)})
    return out


# ----------------------------------------------------------------------------------- counting


def executed_log(board, program, n_out, out_dtype, cases):
    """The qemu exec log lines of one run of `program` (the runner's own launch and FIFO)."""
    _, log = qemu_system.run_counted(board, program, cases, n_out, out_dtype, lambda chunks: b"".join(chunks))
    return log.decode("utf-8", "replace").splitlines()


def masked(table, keep):
    """The cost table with every instruction outside `keep` (a set of addresses) charged nothing."""
    return {a: (v if a in keep else (0, 0, v[2])) for a, v in table.items()}


def function_span(program, name):
    symbol = next((s for s in elf.symbols(program) if s.name == name), None)
    if symbol is None:
        raise NNBuildError(f"no symbol {name}", path=program)
    start = symbol.addr & ~1
    return start, start + symbol.size


def layer_addresses(program, facts, code, model_name, table):
    """{layer c-name: addresses of the inference function's instructions that belong to the layer}: an
    instruction whose line lies in the inference function belongs to the layer whose flow-fact range
    holds that line (or to none: the input and output conversions); one whose line lies elsewhere (an
    inlined helper: tanh, the requantising shifts, NN_SMLAD) to the one before it in address order."""
    lines = elf.line_table(program)
    lo, hi = function_span(program, f"{model_name}_infer")
    ranges = [(int(l["first_line"]), int(l["last_line"]), l["name"]) for l in facts["layers"]]
    text = Path(code).read_text().splitlines()
    body = next(n for n, line in enumerate(text, 1) if f"{model_name}_infer(" in line and not line.rstrip().endswith(";"))
    source = Path(code).name
    owner, current = {}, None
    for addr in sorted(a for a in table if lo <= a < hi):
        file, line = lines.at(addr)
        if file and os.path.basename(file) == source and line >= body:
            current = next((name for first, last, name in ranges if first <= line <= last), None)
        if current is not None:
            owner.setdefault(current, set()).add(addr)
    return owner


def ours(model_path, name, precision, input_range, workdir):
    """{layer c-name: cycles of one inference} and the whole inference's cycles, nnbuild's side."""
    import json
    board = boards.load_board(BOARD)
    program, _ = pipeline.build_check_program(model_path, BOARD, workdir, name=name, precision=precision,
                                              input_range=input_range)
    facts = json.loads((Path(workdir) / "gen" / f"{name}.flowfacts.json").read_text())
    text = disassembly(board, program)
    table, _ = cortexm_timing.cost_table(text, board["instruction_timing"])
    start, returns = call_sites(text, program, f"{name}_infer")
    model, _ = pipeline.load_model(model_path, name)
    x = np.random.default_rng(7).uniform(*input_range, (1, model.input_size)).astype(np.float32)
    lines = executed_log(board, program, model.output_size, "<f4", x)
    total = qemu_system.cycles_per_call(lines, start, returns, table)[0]
    owners = layer_addresses(program, facts, Path(workdir) / "gen" / f"{name}.c", name, table)
    per_layer = {layer: qemu_system.cycles_per_call(lines, start, returns, masked(table, keep))[0]
                 for layer, keep in owners.items()}
    order = [l["name"] for l in facts["layers"]]
    for callee, sites in calls_in(text, program, f"{name}_infer").items():
        add_callee(per_layer, lines, text, program, table, (start, returns), callee, sites, owners, order)
    return per_layer, total


def calls_in(text, program, function):
    """{callee: [addresses of its bl sites inside `function`]} from the objdump text."""
    lo, hi = function_span(program, function)
    sites = {}
    for m in re.finditer(r"^\s*([0-9a-f]+):\s+bl(?:\.w)?\s+[0-9a-f]+ <([^>+]+)>$", text, re.M):
        addr = int(m.group(1), 16)
        if lo <= addr < hi:
            sites.setdefault(m.group(2), []).append(addr)
    return sites


def add_callee(per_layer, lines, text, program, table, call, callee, sites, owners, order):
    """Charge each call of `callee` from the inference function to the layer of its call site: the
    per-call cycles of `callee` (the runner's count from its entry to the return, in call order) split
    by how often each layer's call sites ran (the layers run one after another, in `order`; calls
    from outside every layer - the input and output conversions - come before the first layer when
    their site precedes it in the code, else after the last)."""
    start, returns = call_sites(text, program, callee)
    costs = qemu_system.cycles_per_call(lines, start, returns, table)

    def runs(site):
        only = {a: ((1, 1, v[2]) if a == site else (0, 0, v[2])) for a, v in table.items()}
        return qemu_system.cycles_per_call(lines, call[0], call[1], only)[0]

    first = min(min(owners[l]) for l in order if l in owners)
    before = sum(runs(s) for s in sites if not any(s in owners[l] for l in owners) and s < first)
    at = before
    for layer in order:
        n = sum(runs(s) for s in sites if s in owners.get(layer, ()))
        if n:
            per_layer[layer] = per_layer.get(layer, 0) + sum(costs[at:at + n])
            at += n


# ----------------------------------------------------------------------------------- CMSIS-NN


def cmsis_library(board, root, workdir):
    """libcmsisnn.a of the kernels' folders, compiled with the board's compiler and flags (CMSIS-NN's
    code is not held to nnbuild's -Werror -pedantic); sources this core cannot compile (Helium-only,
    half-float) are left out."""
    objects = Path(workdir) / "cmsis_obj"
    objects.mkdir(parents=True, exist_ok=True)
    flags = [f for f in board["cflags"] if f not in ("-Werror", "-pedantic", "-std=c99")] + [board.get("opt") or "-O2"]
    built = []
    for folder in CMSIS_FOLDERS:
        for source in sorted((root / "Source" / folder).glob("*.c")):
            obj = objects / (source.stem + ".o")
            if not obj.exists():
                done = subprocess.run([board["cc"], *flags, "-std=c11", "-ffunction-sections", f"-I{root / 'Include'}",
                                       "-c", str(source), "-o", str(obj)], capture_output=True, text=True)
                if done.returncode != 0:
                    continue
            built.append(obj)
    archive = Path(workdir) / "libcmsisnn.a"
    archive.unlink(missing_ok=True)
    subprocess.run(["arm-none-eabi-ar", "rcs", str(archive), *map(str, built)], check=True)
    return archive


def c_array(ctype, symbol, values):
    body = ", ".join(str(int(v)) for v in np.ravel(values))
    return f"static const {ctype} {symbol}[{max(1, np.size(values))}] = {{{body}}};\n"


def harness_source(layers8, layers16):
    """(C source, [(kernel, layer c-name, CMSIS-NN entry)] in call order): main() runs every layer
    through each CMSIS-NN kernel, in layer order per kernel, followed by CMSIS-NN's own activation
    where nnbuild's layer has one CMSIS-NN implements for that kernel (tanh and sigmoid: s16's
    arm_nn_activation_s16; softmax: arm_softmax_s16 / arm_softmax_s8); a checksum of the outputs
    goes to stdout so no call is optimised away. `layers8`: the q8 plan's layers (int8 weights),
    `layers16`: the q16-acc32 plan's (int16 weights)."""
    calls = []
    out = ['#include <stdio.h>\n#include "arm_nnfunctions.h"\n#include "arm_nnsupportfunctions.h"\n\n']
    biggest = max(max(l["op"].get("H", 1) * l["op"].get("W", 1) * l["op"].get("C", l["op"]["k"]),
                      l["macs"] // max(1, l["op"]["k"])) for l in layers8)
    out.append(f"static int16_t in16[{biggest}];\nstatic int16_t out16[{biggest}];\n"
               f"static int8_t in8[{biggest}];\nstatic int8_t out8[{biggest}];\n"
               "static int16_t scratch[8192];\nstatic int32_t mult[512];\nstatic int32_t shift[512];\n"
               "static int16_t exp_lut[513];\nstatic int16_t one_lut[513];\n")
    for i, layer in enumerate(layers8):
        out.append(c_array("int8_t", f"w8_{i}", np.clip(layer["rows"], -128, 127)))
        out.append(c_array("int64_t", f"b64_{i}", layer["bias"]))
        out.append(c_array("int32_t", f"b32_{i}", np.clip(layer["bias"], -2 ** 31, 2 ** 31 - 1)))
    for i, layer in enumerate(layers16 or []):
        if layer["kind"] == "dense":
            out.append(c_array("int16_t", f"w16_{i}", layer["rows"]))
            out.append(c_array("int64_t", f"c64_{i}", layer["bias"]))
    out.append("""
static uint32_t seed = 12345u;
static void fill(void)
{
    for (int i = 0; i < (int)(sizeof in16 / sizeof in16[0]); ++i) {
        seed = seed * 1664525u + 1013904223u;
        in16[i] = (int16_t)(seed >> 16);
        in8[i] = (int8_t)(seed >> 24);
    }
}

static int32_t sum16(int n) { int32_t s = 0; for (int i = 0; i < n; ++i) s += out16[i]; return s; }
static int32_t sum8(int n) { int32_t s = 0; for (int i = 0; i < n; ++i) s += out8[i]; return s; }

int main(void)
{
    int32_t check = 0;
    cmsis_nn_context ctx = {scratch, (int32_t)sizeof scratch};
    cmsis_nn_per_tensor_quant_params tensor_q = {1518500250, -8};
    cmsis_nn_per_channel_quant_params channel_q = {mult, shift};
    const cmsis_nn_softmax_lut_s16 lut = {exp_lut, one_lut};
    for (int i = 0; i < 512; ++i) {
        mult[i] = 1518500250;
        shift[i] = -8;
    }
    for (int i = 0; i < 513; ++i) {   /* decreasing tables of the right size: the kernels' work, not their values */
        exp_lut[i] = (int16_t)(32767 - 63 * i);
        one_lut[i] = (int16_t)(32767 - 31 * i);
    }
    fill();
""")
    for kernel in ("s16x16", "s16", "s8"):
        for i, layer in enumerate(layers16 if kernel == "s16x16" else layers8):
            if layers16 is None and kernel == "s16x16":
                break
            op = layer["op"]
            if (kernel, layer["kind"]) not in ENTRIES:
                continue
            out.append(f"    {{   /* {kernel} {layer['name']} */\n")
            calls.append((kernel, layer["c_name"], ENTRIES[(kernel, layer["kind"])]))
            if layer["kind"] == "dense":
                rows, cols = op["OC"], op["k"]
                out.append(f"        cmsis_nn_dims in_d = {{1, 1, 1, {cols}}}, f_d = {{{cols}, 1, 1, {rows}}}, "
                           f"b_d = {{1, 1, 1, {rows}}}, o_d = {{1, 1, 1, {rows}}};\n")
                if kernel == "s16x16":
                    out.append(f"        arm_nn_vec_mat_mult_t_s16_s16(in16, w16_{i}, c64_{i}, out16, 1518500250, -8, "
                               f"{cols}, {rows}, -32768, 32767);\n        check += sum16({rows});\n")
                elif kernel == "s16":
                    out.append("        cmsis_nn_fc_params fc = {0, 0, 0, {-32768, 32767}};\n"
                               f"        arm_fully_connected_s16(&ctx, &fc, &tensor_q, &in_d, in16, &f_d, w8_{i}, &b_d, "
                               f"b64_{i}, &o_d, out16);\n        check += sum16({rows});\n")
                else:
                    out.append("        cmsis_nn_fc_params fc = {128, 0, -3, {-128, 127}};\n"
                               f"        arm_fully_connected_s8(&ctx, &fc, &tensor_q, &in_d, in8, &f_d, w8_{i}, &b_d, "
                               f"b32_{i}, &o_d, out8);\n        check += sum8({rows});\n")
            else:
                n_out = op["OH"] * op["OW"] * op["OC"]
                out.append(f"        cmsis_nn_dims in_d = {{1, {op['H']}, {op['W']}, {op['C']}}}, "
                           f"f_d = {{{op['OC']}, {op['KH']}, {op['KW']}, {op['C']}}}, b_d = {{1, 1, 1, {op['OC']}}}, "
                           f"o_d = {{1, {op['OH']}, {op['OW']}, {op['OC']}}};\n")
                if kernel == "s16":
                    out.append("        cmsis_nn_conv_params cp = {0, 0, {%d, %d}, {%d, %d}, {1, 1}, {-32768, 32767}};\n"
                               % (op["SW"], op["SH"], op["PL"], op["PT"]))
                    out.append(f"        const cmsis_nn_bias_data bd = {{b64_{i}, false}};\n"
                               f"        arm_convolve_s16(&ctx, &cp, &channel_q, &in_d, in16, &f_d, w8_{i}, &b_d, &bd, "
                               f"&o_d, out16);\n        check += sum16({n_out});\n")
                else:
                    out.append("        cmsis_nn_conv_params cp = {128, -3, {%d, %d}, {%d, %d}, {1, 1}, {-128, 127}};\n"
                               % (op["SW"], op["SH"], op["PL"], op["PT"]))
                    out.append(f"        arm_convolve_s8(&ctx, &cp, &channel_q, &in_d, in8, &f_d, w8_{i}, &b_d, b32_{i}, "
                               f"NULL, &o_d, out8);\n        check += sum8({n_out});\n")
            n_out = layer["macs"] // op["k"]
            row = op["OC"]
            act = layer["activation"]
            if act in ("tanh", "sigmoid") and kernel != "s8":
                out.append(f"        arm_nn_activation_s16(out16, out16, {n_out}, 0, {'ARM_TANH' if act == 'tanh' else 'ARM_SIGMOID'});\n")
                calls.append((kernel, layer["c_name"], "arm_nn_activation_s16"))
            elif act == "softmax" and kernel != "s8":
                out.append(f"        arm_softmax_s16(out16, {n_out // row}, {row}, 1518500250, 8, &lut, out16);\n")
                calls.append((kernel, layer["c_name"], "arm_softmax_s16"))
            elif act == "softmax":
                out.append(f"        arm_softmax_s8(out8, {n_out // row}, {row}, 1518500250, 8, -248, out8);\n")
                calls.append((kernel, layer["c_name"], "arm_softmax_s8"))
            out.append("        check += out16[0] + out8[0];\n    }\n")
    out.append("    fwrite(&check, sizeof check, 1, stdout);\n    return 0;\n}\n")
    return "".join(out), calls


def cmsis(model_name, layers8, layers16, root, workdir):
    """{kernel: [cycles per layer]} of CMSIS-NN's kernels on the layers."""
    board = boards.load_board(BOARD)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    library = cmsis_library(board, root, workdir.parent)
    source = workdir / f"cmsis_{model_name}.c"
    code, calls = harness_source(layers8, layers16)
    source.write_text(code)
    parts = check_program_parts(board)
    program = workdir / f"cmsis_{model_name}.elf"
    flags = [f for f in board["cflags"] if f not in ("-Werror", "-pedantic", "-std=c99")]
    subprocess.run([board["cc"], *flags, "-std=c11", board.get("opt") or "-O2", f"-I{root / 'Include'}", str(source),
                    *parts["sources"], str(library), "-o", str(program), *board.get("ldflags", []),
                    f"-T{parts['ldscript']}", "-lm"], check=True, capture_output=True, text=True)
    text = disassembly(board, program)
    table, _ = cortexm_timing.cost_table(text, board["instruction_timing"])
    lines = executed_log(board, program, 1, "<i4", np.zeros((1, 1), dtype=np.float32))
    counts = {}
    for entry in sorted({entry for _, _, entry in calls}):
        start, returns = call_sites(text, program, entry)
        counts[entry] = iter(qemu_system.cycles_per_call(lines, start, returns, table))
    per_layer = {}
    for kernel, layer, entry in calls:   # each entry's calls ran in the order they were written
        mine = per_layer.setdefault(kernel, {})
        mine[layer] = mine.get(layer, 0) + next(counts[entry])
    return per_layer


# ----------------------------------------------------------------------------------- table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cmsis-nn", help="CMSIS-NN checkout (default: $CMSIS_NN)")
    parser.add_argument("--models", default="f1tenth,lenet5")
    parser.add_argument("--precisions", default="q16-acc32,q8")
    parser.add_argument("--workdir", help="keep the programs here (default: a temporary folder)")
    args = parser.parse_args()
    root = cmsis_checkout(args.cmsis_nn)
    models = [m for m in args.models.split(",") if m]
    precisions = [p for p in args.precisions.split(",") if p]
    for name in models:
        if name not in MODELS:
            sys.exit(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    for precision in precisions:
        if precision not in AGAINST:
            sys.exit(f"unknown precision {precision!r} (known: {', '.join(AGAINST)})")
    with tempfile.TemporaryDirectory(prefix="nnbuild-cmsis-") as tmp:
        work = Path(args.workdir or tmp)
        print(f"CMSIS-NN: {root}; board {BOARD} (Cortex-M4 TRM table over the executed path, qemu mps2-an386)")
        worst = None
        for name in models:
            path, input_range = MODELS[name]
            model, _ = pipeline.load_model(path, name)
            layers8 = layers_of(model, "q8", input_range)
            layers16 = layers_of(model, "q16-acc32", input_range)
            theirs = cmsis(name, layers8, layers16, root, work / name / "cmsis")
            for precision in precisions:
                mine, total = ours(path, name, precision, input_range, work / name / precision)
                kernels = AGAINST[precision]
                macs_total = sum(l["macs"] for l in layers8)
                print(f"\n{name} {precision}: nnbuild whole inference {total:,} cycles, {total / macs_total:.2f} "
                      f"cycles/MAC over {macs_total:,} MACs ({total - sum(mine.values()):,} outside the layers)")
                head = f"  {'layer':<10} {'MACs':>8} {'nnbuild':>8}"
                for kernel in kernels:
                    head += f" {kernel:>8} {'ratio':>6}"
                print(head + "   (cycles per MAC; ratio = nnbuild / CMSIS-NN)")
                for layer in layers8:
                    mac = layer["macs"]
                    row = f"  {layer['c_name']:<10} {mac:>8,} {mine.get(layer['c_name'], 0) / mac:>8.2f}"
                    for kernel in kernels:
                        cycles = theirs.get(kernel, {}).get(layer["c_name"])
                        if cycles is None:
                            row += f" {'-':>8} {'-':>6}"
                            continue
                        ratio = mine.get(layer["c_name"], 0) / cycles
                        worst = ratio if worst is None else max(worst, ratio)
                        row += f" {cycles / mac:>8.2f} {ratio:>6.2f}"
                    print(row)
        if worst is not None:
            print(f"\nworst ratio nnbuild/CMSIS-NN over every layer and kernel: {worst:.2f} "
                  f"({'at or below' if worst <= 1.0 else 'above'} CMSIS-NN)")


if __name__ == "__main__":
    main()
