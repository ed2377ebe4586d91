"""Shape `tflm`: a full-integer (int8) model (nnbuild.ir.int8) as static C99 computing TFLite Micro's
int8 reference kernels bit for bit; nnbuild.numerics.tflm_int8 is its bit-exact model.

`<name>_infer(const int8_t in[], int8_t out[])` calls one static function per operator, in file
order, on an int8 arena planned here (tensors whose lives do not overlap share bytes; RESHAPE and
EXPAND_DIMS are views). Every requantisation multiplier and shift is computed at generation with
tflm_int8.quantize_multiplier from the model's scales, as TFLite Micro's Prepare computes them;
filters, biases, per-channel multipliers and tables are static const arrays in `<name>_weights.c`
(AVR flash through the storage macros, as the other shapes). Unary activations (LOGISTIC, TANH,
HARD_SWISH, LEAKY_RELU, RELU and the int8-to-int8 QUANTIZE) map 256 inputs to 256 outputs: they are
tables of the bit-exact model's outputs; RELU6 clamps in the input's scale, as TFLite Micro does.
A model with UNIDIRECTIONAL_SEQUENCE_LSTM (nnbuild.numerics.tflm_int8) adds its state to the
API: `<name>_state` (each LSTM's int8 hidden and int16 cell state), `<name>_reset` and
`<name>_infer_state(in, out, state)`, TFLite Micro's Invoke() without a reset; `<name>_infer` runs
the same operator functions on a state of its own, reset first.
The runtime helpers (gemmlowp's doubling high multiply, rounding divide by a power of two,
SOFTMAX's reciprocal) use 32-bit arithmetic only, without variable-count shift loops, so the AVR
WCET analysis reaches no unbounded library routine.
"""

from __future__ import annotations

import re

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import common, templating
from nnbuild.codegen.common import float_literal
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier, c_text
from nnbuild.numerics import tflm_int8 as tflm

KIND = "int8"
PRECISIONS = ("int8",)
#: takes one C argument per input and output of a model of several (int8 each, its own scale)
SEVERAL_IO = True
SEVERAL_IO_PRECISIONS = ("int8",)
#: constants up to this many bytes are read with 16-bit LPM pointers on AVR (as mlp_fixed)
NEAR_LIMIT = 60 * 1024
#: SOFTMAX rows up to this length keep its output exponent within a 32-bit shift
MAX_SOFTMAX_ROW = 255
#: bytes of each constant array element type
CTYPE_BYTES = {"int8_t": 1, "uint16_t": 2, "int32_t": 4}


def render(model, *, precision, storage, passes_log, input_range=None):
    if precision != "int8":
        raise NNBuildError(f"shape tflm generates precision int8 only (not {precision})")
    gen = _Generator(model, storage)
    return gen.files(passes_log)


def _itype(bound):
    return "uint_fast8_t" if bound <= 255 else ("uint_fast16_t" if bound <= 65535 else "uint_fast32_t")


def _rows(values, per_line=16):
    text = ["INT32_MIN" if int(v) == -(1 << 31) else (f"INT32_C({int(v)})" if abs(int(v)) > 32767 else str(int(v)))
            for v in np.asarray(values).reshape(-1)]
    return [", ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]


def _minus(expr, zero_point):
    """C for expr - zero_point, without a double minus."""
    zero_point = int(zero_point)
    if zero_point == 0:
        return f"(int16_t){expr}"
    return f"((int16_t){expr} {'-' if zero_point > 0 else '+'} {abs(zero_point)})"


class _Generator:
    """One model's files: the arena plan, the inference function (one block per operator), the
    constant arrays it reads, the flow facts and the trace."""

    def __init__(self, model, storage):
        self.model, self.graph, self.name = model, model.graph, model.name
        self.context_flags = common.storage_context(storage)
        self.arrays = []        # {symbol, ctype, values (rows), size, about}
        self.flash_bytes = 0
        self.ff = None
        self.trace_layers = []

    # ------------------------------------------------------------------ tensors

    def tensor(self, index):
        return self.graph.tensors[index]

    def shape(self, index):
        return tuple(int(d) for d in self.tensor(index).shape[1:])

    def size(self, index):
        return int(np.prod(self.shape(index))) if self.shape(index) else 1

    def quant(self, index):
        q = self.tensor(index).quantization
        return float(q.scales[0]), int(q.zero_points[0])

    def const(self, index):
        return None if index < 0 else self.tensor(index).data

    def array(self, base, ctype, values, about):
        symbol = f"{self.name}_{base}"
        values = np.asarray(values).reshape(-1)
        self.arrays.append({"symbol": symbol, "ctype": ctype, "size": int(values.size), "values": _rows(values),
                            "about": about})
        self.flash_bytes += int(values.size) * CTYPE_BYTES[ctype]
        return symbol

    # ------------------------------------------------------------------ the arena

    def plan(self):
        """Views (RESHAPE, EXPAND_DIMS) resolved to the tensor they view; the graph input is `in`,
        the graph output `out`, the others get arena offsets (first fit, freed after last use)."""
        ops = self.model.ops
        self.root = {}
        for op in ops:
            if op["op"] in ("RESHAPE", "EXPAND_DIMS"):
                self.root[op["output"]] = self.resolve(op["sources"][0])
        graph_in, graph_out = self.graph.inputs[0], self.resolve(self.graph.outputs[0])
        if graph_out == graph_in:
            raise NNBuildError("the model computes nothing (its output is a view of its input)")
        api = self.api_tensors()
        last_use = {}
        for k, op in enumerate(ops):
            for s in op["sources"]:
                last_use[self.resolve(s)] = k
        self.where, live, self.arena = api, [], 0
        for k, op in enumerate(ops):
            out = op["output"]
            if out in self.root or out in self.where:
                continue
            live = [(o, n, t) for o, n, t in live if last_use.get(t, -1) >= k]
            size, offset = self.size(out), 0
            for o, n, _ in sorted(live):
                if offset + size <= o:
                    break
                offset = max(offset, o + n)
            live.append((offset, size, out))
            self.where[out] = f"(arena + {offset}u)" if offset else "arena"
            self.arena = max(self.arena, offset + size)
        if self.arena and self.arena % 256 == 0:
            # a frame of a multiple of 256 bytes: avr-gcc's prologue moves SP by its high byte alone,
            # which the AVR stack analysis (nnbuild.wcet.avr_stack) does not follow; one spare byte
            self.arena += 1

    def api_tensors(self):
        """Tensor index -> the C argument that holds it: `in` and `out`, or for a model of several
        inputs or outputs each one's argument name (an output resolved through its views)."""
        if not self.model.several_io:
            return {self.graph.inputs[0]: "in", self.resolve(self.graph.outputs[0]): "out"}
        where = {}
        for a in self.model.arguments():
            index = a["tensor"] if a["role"] == "in" else self.resolve(a["tensor"])
            if index in where:
                raise NNBuildError(f"{a['name']} holds the values of {where[index]} (a view of it): nothing to "
                                   "compute for it")
            where[index] = a["name"]
        return where

    def arguments(self):
        """The names of the entry's arguments, in order (each operator function takes them all)."""
        if not self.model.several_io:
            return ["in", "out"]
        return [a["name"] for a in self.model.arguments()]

    def resolve(self, index):
        while index in self.root:
            index = self.root[index]
        return index

    def ref(self, index):
        """C expression of a computed tensor's int8 pointer, or None for a constant."""
        index = self.resolve(index)
        if index in self.where:
            return self.where[index]
        return None

    # ------------------------------------------------------------------ files

    def files(self, passes_log):
        name = self.name
        self.plan()
        self.ff = common.FlowFacts(name, functions=True)
        softmax = any(op["op"] == "SOFTMAX" for op in self.model.ops)
        self.lstm = any(op["op"] == "UNIDIRECTIONAL_SEQUENCE_LSTM" for op in self.model.ops)
        table = self.array("sigmoid16", "uint16_t", tflm.SIGMOID_TABLE,
                           "sigmoid_table_uint16 of TFLite: sigmoid(i / 24) in 0.16 fixed point, i = 0..255 (the "
                           "LSTM gates' int16 sigmoid and tanh)") if self.lstm else None
        helpers = templating.render("int8_helpers.c.j2", {"ff": self.ff, "softmax": softmax, "lstm": self.lstm,
                                                          "sigmoid_table": table})   # before any layer
        body = self.body()
        self.near = self.context_flags["near"] or (self.context_flags["flash"] and self.flash_bytes <= NEAR_LIMIT)
        context = {"name": name, "guard": name.upper(), "version": __version__,
                   "reads": [8, 16, 32] if self.lstm else [8, 32],
                   "sources": [s.rsplit("/", 1)[-1] for s in self.model.source_files],
                   **self.context_flags, "near": self.near, "flash_bytes": self.flash_bytes}
        code, facts, _ = common.render("int8.c.j2", dict(context, helpers=helpers, body=body), self.ff)
        files = {f"{name}.h": self.header(), f"{name}.c": code, f"{name}_weights.h": self.weights_header(),
                 f"{name}_weights.c": self.weights_source(), f"{name}.flowfacts.json": facts}
        ranges = {l["name"]: (l["first_line"], l["last_line"]) for l in facts["layers"]}
        for layer in self.trace_layers:
            layer["lines"] = list(ranges.get(layer.pop("c_name"), (None, None)))
            layer["code"] = f"{name}.c"
        in_scale, in_zp = self.model.io_quantization("input")
        out_scale, out_zp = self.model.io_quantization("output")
        record = {"model": name, "sources": context["sources"],
                  "meta": {k: v for k, v in sorted(self.model.meta.items()) if isinstance(v, (str, int, float, list))},
                  "passes": list(passes_log), "layers": self.trace_layers, "precision": "int8", "shape": "tflm",
                  "memory": {"arena_bytes": self.arena},
                  "int8": {"input_scale": in_scale, "input_zero_point": in_zp, "output_scale": out_scale,
                           "output_zero_point": out_zp, "constant_bytes": self.flash_bytes}}
        if self.near and self.context_flags["flash"]:
            record["near_flash_symbols"] = sorted(a["symbol"] for a in self.arrays)
        files[f"{name}.trace.json"] = record
        return files

    def header(self):
        if self.model.several_io:
            return self.several_header()
        name, guard = self.name, self.name.upper()
        in_scale, in_zp = self.model.io_quantization("input")
        out_scale, out_zp = self.model.io_quantization("output")
        n_in, n_out = self.model.input_size, self.model.output_size
        sources = " + ".join(s.rsplit("/", 1)[-1] for s in self.model.source_files)
        return f"""/* {name}.h: inference API of model '{name}'.
 * Generated by nnbuild {__version__} from {c_text(sources)} (int8, TFLite Micro's int8 kernels). Do not edit.
 */
#ifndef {guard}_H
#define {guard}_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define {guard}_INPUTS {n_in}
#define {guard}_OUTPUTS {n_out}

/* The model's quantization: real = scale * (q - zero point). in[] holds the input quantized at
 * scale {float_literal(in_scale)} with zero point {in_zp}; out[] the output at scale {float_literal(out_scale)} with zero point {out_zp}. */
#define {guard}_INPUT_SCALE {float_literal(in_scale)}
#define {guard}_INPUT_ZERO_POINT ({in_zp})
#define {guard}_OUTPUT_SCALE {float_literal(out_scale)}
#define {guard}_OUTPUT_ZERO_POINT ({out_zp})

/* One inference, bit for bit TFLite Micro's: reads in[], writes out[]. Reentrant: no static state,
 * no dynamic memory; {self.arena} bytes of stack for the intermediate tensors.{self.state_note()} */
void {name}_infer(const int8_t in[{n_in}], int8_t out[{n_out}]);
{self.state_api(n_in, n_out)}
#ifdef __cplusplus
}}
#endif

#endif /* {guard}_H */
"""

    def several_header(self):
        """The header of a model of several inputs or outputs: one int8 argument each, its size,
        scale and zero point as macros, and the split of flat vectors into them (check programs)."""
        name, guard = self.name, self.name.upper()
        args = self.model.arguments()
        sources = " + ".join(s.rsplit("/", 1)[-1] for s in self.model.source_files)
        lines = [f"/* {name}.h: inference API of model '{name}'.",
                 f" * Generated by nnbuild {__version__} from {c_text(sources)} (int8, TFLite Micro's int8 kernels). "
                 "Do not edit.", " */", f"#ifndef {guard}_H", f"#define {guard}_H", "", "#include <stdint.h>", "",
                 "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
                 "/* Values of all the inputs together, of all the outputs together. */",
                 f"#define {guard}_INPUTS {self.model.input_size}", f"#define {guard}_OUTPUTS {self.model.output_size}",
                 f"#define {guard}_INPUT_COUNT {sum(a['role'] == 'in' for a in args)}",
                 f"#define {guard}_OUTPUT_COUNT {sum(a['role'] == 'out' for a in args)}",
                 "/* Each argument: its values, and its quantization (real = scale * (q - zero point)). */"]
        for a in args:
            macro = f"{guard}_{a['name'].upper()}"
            lines += [f"#define {macro} {a['size']}", f"#define {macro}_SCALE {float_literal(a['scale'])}",
                      f"#define {macro}_ZERO_POINT ({a['zero_point']})"]
        lines += ["", "/* One inference, bit for bit TFLite Micro's: reads the inputs, writes the outputs, one argument",
                  " * each, in the model's order:"]
        lines += [f" *   {a['name']}: {'input' if a['role'] == 'in' else 'output'} '{c_text(a['label'])}', shape "
                  f"{'x'.join(str(d) for d in a['shape'])}" for a in args]
        lines += [f" * Reentrant: no static state, no dynamic memory; {self.arena} bytes of stack for the intermediate"
                  " tensors. */", f"void {name}_infer({self.entry_params()});", "",
                  "/* The arguments of one call from one array `in` holding every input's values one after the other",
                  " * and one array `out` for every output's, in the order above (check data, test harnesses):",
                  f" * {name}_infer({guard}_INFER_ARGS(in, out)). */",
                  f"#define {guard}_INFER_ARGS(in, out) " + ", ".join(f"({a['role']}) + {a['offset']}" for a in args),
                  "", "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard}_H */", ""]
        if self.states:
            raise NNBuildError("a model of several inputs or outputs with an LSTM has no state API yet (one input and "
                               "one output only)", item=f"model '{name}'")
        clash = next((a["name"] for a in args if a["name"].startswith(f"{name}_") or a["name"] == "arena"), None)
        if clash:
            raise NNBuildError(f"argument {clash} would clash with the model's own C symbols: rename the model",
                               item=f"model '{name}'")
        return "\n".join(lines)

    def entry_params(self):
        """The parameter list of <name>_infer: `in` and `out`, or one sized int8 array per argument."""
        if not self.model.several_io:
            return f"const int8_t in[{self.model.input_size}], int8_t out[{self.model.output_size}]"
        return ", ".join(f"{'const ' if a['role'] == 'in' else ''}int8_t {a['name']}[{a['size']}]"
                         for a in self.model.arguments())

    def state_note(self):
        """The header's word on recurrent state, for a model with an LSTM."""
        if not self.states:
            return ""
        return ("\n * The LSTM state is local to the call: each call computes one whole sequence from the state\n"
                f" * TFLite Micro's ResetVariableTensors sets (as {self.name}_reset does).")

    def state_api(self, n_in, n_out):
        """The state type, <name>_reset and <name>_infer_state of a model with LSTMs."""
        if not self.states:
            return ""
        name = self.name
        members = []
        for c_name, (units, (h_scale, h_zp), c_scale) in self.states.items():
            members += [f"    int8_t h_{c_name}[{units}];   /* hidden state: int8 at scale {float_literal(h_scale)}, "
                        f"zero point {h_zp} */",
                        f"    int16_t c_{c_name}[{units}];  /* cell state: int16 at scale {float_literal(c_scale)} */"]
        return f"""
/* The LSTM state TFLite Micro keeps in variable tensors between Invoke() calls. */
typedef struct {{
{chr(10).join(members)}
}} {name}_state;

/* The state ResetVariableTensors sets: hidden states at their zero point, cell states 0. */
void {name}_reset({name}_state *state);

/* One inference continuing from *state and leaving the new state there: TFLite Micro's Invoke()
 * without a reset, bit for bit (a stream cut into sequences). Reentrant for distinct states. */
void {name}_infer_state(const int8_t in[{n_in}], int8_t out[{n_out}], {name}_state *state);
"""

    def weights_header(self):
        guard = self.name.upper()
        flash = self.context_flags["flash"]
        lines = [f"/* {self.name}_weights.h: constant arrays of model '{self.name}' (defined in {self.name}_weights.c).",
                 f" * Generated by nnbuild {__version__}. Do not edit.", " */",
                 f"#ifndef {guard}_WEIGHTS_H", f"#define {guard}_WEIGHTS_H", "", "#include <stdint.h>", ""]
        if flash:
            lines += ["#if defined(__AVR__)", "#include <avr/pgmspace.h>",
                      "/* Constants stay in flash (avr-gcc would copy const data to SRAM). */",
                      f"#define {guard}_FLASH PROGMEM", "#else", f"#define {guard}_FLASH", "#endif"]
        else:
            lines += [f"#define {guard}_FLASH"]
        lines.append("")
        for a in self.arrays:
            lines.append(f"extern const {a['ctype']} {a['symbol']}[{a['size']}] {guard}_FLASH;")
        lines += ["", f"#endif /* {guard}_WEIGHTS_H */", ""]
        return "\n".join(lines)

    def weights_source(self):
        guard = self.name.upper()
        lines = [f"/* {self.name}_weights.c: constants of model '{self.name}' (int8 filters, int32 biases, requantisation",
                 " * multipliers and shifts, activation tables).",
                 f" * Generated by nnbuild {__version__}. Do not edit.", " */", f'#include "{self.name}_weights.h"']
        for a in self.arrays:
            lines += ["", f"/* {a['about']} */", f"const {a['ctype']} {a['symbol']}[{a['size']}] {guard}_FLASH = {{"]
            lines += [f"    {row}{',' if k < len(a['values']) - 1 else ''}" for k, row in enumerate(a["values"])]
            lines.append("};")
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ the inference function

    def body(self):
        """One static function per operator, then the entry that calls them in order. Functions
        keep each operator's code apart: avr-gcc, optimising one big function, gave the code of a
        pooling loop the line of an earlier layer's `for`, so the loop's own fact no longer matched."""
        n_in, n_out = self.model.input_size, self.model.output_size
        functions, calls = self.reset_function(), []
        arena = "arena" if self.arena else "(int8_t *)0"
        for op in self.model.ops:
            if op["op"] in ("RESHAPE", "EXPAND_DIMS"):
                continue
            c_name = c_identifier(f"{op['op'].lower()}_{op['index']}")
            self.ff.layer(c_name)   # the operator's loops belong to its layer (this mark's text is dropped)
            function = self.ff.function(f"nn_{c_name}")
            lines = getattr(self, "op_" + op["op"])(op, c_name)
            text = "\n".join(lines)
            unused = [f"(void){p};" for p in self.arguments() + ["arena"] if not re.search(rf"\b{p}\b", text)]
            state = ", int8_t *h, int16_t *c" if c_name in self.states else ""
            functions += ["", f"/* operator {op['index']}: {op['op']} -> {self.describe(op['output'])} */",
                          f"static NN_NOINLINE void {function}({self.operator_params()}{state})", "{"]
            functions += [f"    {' '.join(unused)}"] if unused else []
            functions += ["    " + line if line else "" for line in lines] + ["}"]
            calls.append(c_name)
            self.trace_layers.append({"index": op["index"], "name": c_name, "type": op["op"],
                                      "activation": tflm_fused(op["fused"]),
                                      "inputs": sum(self.size(s) for s in op["sources"]),
                                      "units": self.size(op["output"]), "c_name": c_name,
                                      "weights": op.get("symbols", [])})
        out = functions + ["", f"void {self.ff.function(self.name + '_infer')}({self.entry_params()})", "{"]
        if self.arena:
            out.append(f"    int8_t arena[{self.arena}];")
        if self.states:
            out += [f"    {self.name}_state state;", "", f"    {self.name}_reset(&state);"]

        def state_of(c_name, access):
            return f", {access}h_{c_name}, {access}c_{c_name}" if c_name in self.states else ""
        for c_name in calls:    # the layer marks after the entry's name: the layers are the entry's calls
            out += [f"    {self.ff.layer(c_name)}",
                    f"    nn_{c_name}({', '.join(self.arguments())}, {arena}{state_of(c_name, 'state.')});"]
        out += [f"    {self.ff.layers_end()}", "}", ""]
        if self.states:   # the same calls on the caller's state (no layer marks: the entry is _infer)
            out += [f"void {self.ff.function(self.name + '_infer_state')}(const int8_t in[{n_in}], int8_t out[{n_out}], "
                    f"{self.name}_state *state)", "{"]
            out += [f"    int8_t arena[{self.arena}];"] if self.arena else []
            out += [f"    nn_{c_name}(in, out, {arena}{state_of(c_name, 'state->')});" for c_name in calls]
            out += ["}", ""]
        return "\n".join(out)

    def operator_params(self):
        """The parameters of an operator's function: the arguments as pointers, then the arena."""
        if not self.model.several_io:
            return "const int8_t *in, int8_t *out, int8_t *arena"
        return ", ".join(f"{'const ' if a['role'] == 'in' else ''}int8_t *{a['name']}"
                         for a in self.model.arguments()) + ", int8_t *arena"

    def reset_function(self):
        """`<name>_reset`, which sets every LSTM's state where TFLite Micro's ResetVariableTensors
        puts it (emitted before the operators: its loops belong to no layer)."""
        self.states = {}
        for op in self.model.ops:
            if op["op"] == "UNIDIRECTIONAL_SEQUENCE_LSTM":
                graph_op = self.graph.operators[op["index"]]
                c_name = c_identifier(f"{op['op'].lower()}_{op['index']}")
                self.states[c_name] = (self.size(graph_op.inputs[tflm.LSTM_HIDDEN_STATE]),
                                       self.quant(graph_op.inputs[tflm.LSTM_HIDDEN_STATE]),
                                       self.quant(graph_op.inputs[tflm.LSTM_CELL_STATE])[0])
        if not self.states:
            return []
        lines = ["", f"void {self.ff.function(self.name + '_reset')}({self.name}_state *state)", "{"]
        for c_name, (units, (_, zp), _) in self.states.items():
            lines += ["    " + line for line in self.loop("j", units, [f"state->h_{c_name}[j] = {zp};",
                                                                     f"state->c_{c_name}[j] = 0;"])]
        return lines + ["}"]

    def describe(self, index):
        scale, zp = self.quant(index)
        return f"int8 {self.shape(index)} at scale {scale:.9g}, zero point {zp}"

    def loop(self, var, bound, body, why=None):
        """A counted loop with its bound recorded (lines of C, indented by the caller)."""
        lines = [self.ff.loop(bound, why), f"for ({_itype(bound)} {var} = 0; {var} < {bound}u; ++{var}) {{"]
        lines += ["    " + line if line else "" for line in body]
        lines.append("}" + self.ff.end())
        return lines

    def range_of(self, op):
        scale, zp = self.quant(op["output"])
        return tflm.activation_range(op["fused"], scale, zp)

    def pointers(self, op, n_sources=1):
        lines = []
        for k, s in enumerate(op["sources"][:n_sources]):
            ref = self.ref(s)
            if ref is None:
                raise NNBuildError(f"operator {op['index']} ({op['op']}): input {k} is a constant (int8 operands of "
                                   "this operator must be computed)")
            lines.append(f"const int8_t *x{k if n_sources > 1 else ''} = {ref};")
        lines.append(f"int8_t *y = {self.ref(op['output'])};")
        return lines

    def requantize_params(self, op, c_name, in_scale, w_scales, out_scale, channels):
        """(C expression of the multiplier, of the shift) for channel `c` (per-channel: tables)."""
        multipliers, shifts = tflm.channel_multipliers(in_scale, w_scales, out_scale)
        for s in shifts:
            if not -31 <= s <= 30:
                raise NNBuildError(f"operator {op['index']} ({op['op']}): requantisation shift {s} out of range")
        if len(multipliers) == 1:
            return f"INT32_C({multipliers[0]})", f"{shifts[0]}", []
        if len(multipliers) != channels:
            raise NNBuildError(f"operator {op['index']} ({op['op']}): {len(multipliers)} scales for {channels} channels")
        m = self.array(f"{c_name}_m", "int32_t", multipliers, f"{op['op']} {op['index']}: per-channel multipliers")
        s = self.array(f"{c_name}_s", "int8_t", shifts, f"{op['op']} {op['index']}: per-channel shifts")
        return (f"NN_READ32(NN_ADDR({m}) + c * NN_STEP(int32_t))", f"(int8_t)NN_READ8(NN_ADDR({s}) + c * NN_STEP(int8_t))",
                [m, s])

    # ------------------------------------------------------------------ operators

    def op_FULLY_CONNECTED(self, op, c_name):
        graph_op = self.graph.operators[op["index"]]
        w_t = self.tensor(graph_op.inputs[1])
        w = np.asarray(w_t.data)
        units, n_in = w.shape
        x_index = op["sources"][0]
        if self.size(x_index) != n_in:
            raise NNBuildError(f"operator {op['index']} (FULLY_CONNECTED): {self.size(x_index)} inputs for weights "
                               f"of {n_in}")
        if self.size(op["output"]) != units:
            raise NNBuildError(f"operator {op['index']} (FULLY_CONNECTED): {units} units, output of "
                               f"{self.size(op['output'])}")
        in_scale, in_zp = self.quant(x_index)
        out_scale, out_zp = self.quant(op["output"])
        bias = self.const(graph_op.inputs[2]) if len(graph_op.inputs) > 2 else None
        w_zp = int(w_t.quantization.zero_points[0])
        ws = self.array(f"{c_name}_w", "int8_t", w, f"FULLY_CONNECTED {op['index']}: weights [{units}][{n_in}]")
        op["symbols"] = [ws]
        m, s, tables = self.requantize_params(op, c_name, in_scale, w_t.quantization.scales, out_scale, units)
        op["symbols"] += tables
        lo, hi = self.range_of(op)
        lines = self.pointers(op) + [f"NN_PTR(int8_t) w = NN_ADDR({ws});"]
        start = "0"
        if bias is not None:
            bs = self.array(f"{c_name}_b", "int32_t", bias, f"FULLY_CONNECTED {op['index']}: bias")
            op["symbols"].append(bs)
            lines.append(f"NN_PTR(int32_t) b = NN_ADDR({bs});")
            start = "NN_READ32(b)"
        inner = [f"acc += (int32_t){_minus('NN_READ8(w)', w_zp)} * {_minus('x[i]', in_zp)};",
                 "w += NN_STEP(int8_t);"]
        body = [f"int32_t acc = {start};"] + self.loop("i", n_in, inner)
        if bias is not None:
            body.append("b += NN_STEP(int32_t);")
        body.append(f"y[c] = nn_clamp(nn_mbqm(acc, {m}, {s}) + ({out_zp}), {lo}, {hi});")
        return lines + self.loop("c", units, body)

    def window_params(self, op, kernel, dilation):
        x_shape = self.shape(op["sources"][0])
        if len(x_shape) != 3:
            raise NNBuildError(f"operator {op['index']} ({op['op']}): input of shape {x_shape} (height, width, "
                               "channels expected)")
        options = self.graph.operators[op["index"]].options
        strides, pads = tflm.window_padding(options, x_shape, kernel, dilation)
        return x_shape, strides, pads

    def taps(self, op, x_shape, kernel, strides, dilation, pads, inner):
        """Loops over the kernel taps of output (oy, ox) that fall inside the input (TFLite Micro
        skips the others), `inner` run with iy, ix set."""
        h, w, _ = x_shape
        top, left = pads[0], pads[2]

        def guarded(test, padded, body):
            # without padding on this axis every tap is inside: no test for the compiler to fold away
            return [f"if ({test}) {{"] + ["    " + l for l in body] + ["}"] if padded else body
        kx_body = [f"int_fast16_t ix = (int_fast16_t)(ox * {strides[1]}u + kx * {dilation[1]}u) - {left};"] + \
            guarded(f"ix >= 0 && ix < {w}", pads[2] or pads[3], inner)
        ky_body = [f"int_fast16_t iy = (int_fast16_t)(oy * {strides[0]}u + ky * {dilation[0]}u) - {top};"] + \
            guarded(f"iy >= 0 && iy < {h}", pads[0] or pads[1], self.loop("kx", kernel[1], kx_body))
        return self.loop("ky", kernel[0], ky_body)

    def conv(self, op, c_name, depthwise):
        graph_op = self.graph.operators[op["index"]]
        w_t = self.tensor(graph_op.inputs[1])
        w = np.asarray(w_t.data)
        options = graph_op.options
        dilation = (int(options.get("DilationHFactor", 1)), int(options.get("DilationWFactor", 1)))
        if depthwise:
            _, kh, kw, out_c = w.shape
        else:
            out_c, kh, kw, w_in = w.shape
        x_shape, strides, pads = self.window_params(op, (kh, kw), dilation)
        h, wd, in_c = x_shape
        oh, ow, oc = self.shape(op["output"])
        if oc != out_c or (not depthwise and w_in != in_c) or (depthwise and out_c % in_c):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): filter of shape {w.shape} for an input of "
                               f"shape {x_shape} (grouped convolutions are not generated)")
        in_scale, in_zp = self.quant(op["sources"][0])
        out_scale, out_zp = self.quant(op["output"])
        bias = self.const(graph_op.inputs[2]) if len(graph_op.inputs) > 2 else None
        ws = self.array(f"{c_name}_w", "int8_t", w, f"{op['op']} {op['index']}: filter {list(w.shape)}")
        op["symbols"] = [ws]
        m, s, tables = self.requantize_params(op, c_name, in_scale, w_t.quantization.scales, out_scale, out_c)
        op["symbols"] += tables
        lo, hi = self.range_of(op)
        idx = "uint32_t" if max(h * wd * in_c, kh * kw * out_c * max(in_c, 1)) > 65535 else "uint16_t"
        lines = self.pointers(op)
        start = "0"
        if bias is not None:
            bs = self.array(f"{c_name}_b", "int32_t", bias, f"{op['op']} {op['index']}: bias")
            op["symbols"].append(bs)
            start = f"NN_READ32(NN_ADDR({bs}) + c * NN_STEP(int32_t))"
        if depthwise:
            mult = out_c // in_c
            tap = [f"acc += (int32_t)(int16_t)NN_READ8(NN_ADDR({ws}) + (({idx})(ky * {kw}u + kx) * {out_c}u + c) * "
                   f"NN_STEP(int8_t)) * {_minus(f'x[(({idx})iy * {wd}u + ({idx})ix) * {in_c}u + c / {mult}u]', in_zp)};"] \
                if mult > 1 else \
                  [f"acc += (int32_t)(int16_t)NN_READ8(NN_ADDR({ws}) + (({idx})(ky * {kw}u + kx) * {out_c}u + c) * "
                   f"NN_STEP(int8_t)) * {_minus(f'x[(({idx})iy * {wd}u + ({idx})ix) * {in_c}u + c]', in_zp)};"]
        else:
            inner = [f"acc += (int32_t)(int16_t)NN_READ8(f + i * NN_STEP(int8_t)) * "
                     f"{_minus(f'p[i]', in_zp)};"]
            tap = [f"const int8_t *p = x + (({idx})iy * {wd}u + ({idx})ix) * {in_c}u;",
                   f"NN_PTR(int8_t) f = NN_ADDR({ws}) + (({idx})c * {kh * kw}u + ({idx})(ky * {kw}u + kx)) * {in_c}u * "
                   "NN_STEP(int8_t);"] + self.loop("i", in_c, inner)
        per_channel = [f"int32_t acc = {start};"] + self.taps(op, x_shape, (kh, kw), strides, dilation, pads, tap)
        per_channel.append(f"y[(({idx})oy * {ow}u + ox) * {oc}u + c] = nn_clamp(nn_mbqm(acc, {m}, {s}) + ({out_zp}), "
                           f"{lo}, {hi});")
        return lines + self.loop("oy", oh, self.loop("ox", ow, self.loop("c", oc, per_channel)))

    def op_CONV_2D(self, op, c_name):
        return self.conv(op, c_name, depthwise=False)

    def op_DEPTHWISE_CONV_2D(self, op, c_name):
        return self.conv(op, c_name, depthwise=True)

    def pool(self, op, c_name, average):
        options = self.graph.operators[op["index"]].options
        size = (int(options["FilterHeight"]), int(options["FilterWidth"]))
        x_shape, strides, pads = self.window_params(op, size, (1, 1))
        h, wd, ch = x_shape
        oh, ow, oc = self.shape(op["output"])
        if oc != ch or self.quant(op["sources"][0]) != self.quant(op["output"]):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): input and output quantized differently "
                               "(TFLite Micro's int8 pooling keeps the quantization)")
        lo, hi = self.range_of(op)
        idx = "uint32_t" if h * wd * ch > 65535 else "uint16_t"
        value = f"x[(({idx})iy * {wd}u + ({idx})ix) * {ch}u + c]"
        if average:
            # (|sum| + count / 2) / count by restoring division, one bit a turn: the C division would
            # call libgcc's __divmodsi4, whose loop the AVR analyses cannot bound
            bits = (128 * size[0] * size[1] + size[0] * size[1] // 2).bit_length()
            tap = [f"sum += {value};", "count += 1u;"]
            start = ["int32_t sum = 0;", "uint32_t count = 0;", "uint32_t n, r = 0, q = 0;"]
            divide = ["r = (r << 1) | (n >> {top});".format(top=bits - 1),
                      f"n = (n << 1) & UINT32_C(0x{(1 << bits) - 1:X});", "q <<= 1;",
                      "if (r >= count) {", "    r -= count;", "    q |= 1u;", "}"]
            finish = ["n = (uint32_t)(sum > 0 ? sum : -sum) + (count >> 1);"] + self.loop("k", bits, divide) + \
                     [f"y[(({idx})oy * {ow}u + ox) * {oc}u + c] = nn_clamp(sum > 0 ? (int32_t)q : -(int32_t)q, {lo}, "
                      f"{hi});"]
        else:
            tap = [f"int8_t v = {value};", "if (v > best) {", "    best = v;", "}"]
            start = ["int8_t best = -128;"]
            finish = [f"y[(({idx})oy * {ow}u + ox) * {oc}u + c] = nn_clamp(best, {lo}, {hi});"]
        per_channel = start + self.window_loop(x_shape, size, strides, pads, tap) + finish
        return self.pointers(op) + self.loop("oy", oh, self.loop("ox", ow, self.loop("c", oc, per_channel)))

    def window_loop(self, x_shape, size, strides, pads, tap):
        """A pooling window's taps as one loop on one line (t = ky * kw + kx; taps outside the input
        skipped). avr-gcc turns `if (v > best) best = v` into a max without a line of its own (the
        function's first line): with the loop on one line its fact needs no body line to match."""
        h, w, _ = x_shape
        kh, kw = size
        test = " && ".join(t for t, padded in (("iy >= 0 && iy < " + str(h), pads[0] or pads[1]),
                                                ("ix >= 0 && ix < " + str(w), pads[2] or pads[3])) if padded)
        body = " ".join(line.strip() for line in tap)
        inner = (f"int_fast16_t iy = (int_fast16_t)(oy * {strides[0]}u + t / {kw}u) - {pads[0]}; "
                 f"int_fast16_t ix = (int_fast16_t)(ox * {strides[1]}u + t % {kw}u) - {pads[2]}; "
                 + (f"if ({test}) {{ {body} }}" if test else body))
        return [self.ff.loop(kh * kw), f"for ({_itype(kh * kw)} t = 0; t < {kh * kw}u; ++t) {{ {inner} }}"
                + self.ff.end()]

    def op_MAX_POOL_2D(self, op, c_name):
        return self.pool(op, c_name, average=False)

    def op_AVERAGE_POOL_2D(self, op, c_name):
        return self.pool(op, c_name, average=True)

    def unary_table(self, op):
        """256 outputs of the bit-exact model, one per int8 input."""
        x = np.arange(-128, 128, dtype=np.int64)
        in_q, out_q = self.quant(op["sources"][0]), self.quant(op["output"])
        name = op["op"]
        if name == "LOGISTIC":
            table = tflm.logistic(x, *in_q)
        elif name == "TANH":
            table = tflm.tanh(x, *in_q)
        elif name == "HARD_SWISH":
            table = tflm.hard_swish(x, in_q, out_q)
        elif name == "RELU":
            table = tflm.relu(x, in_q, out_q)
        elif name == "QUANTIZE":
            table = tflm.requantize(x, in_q, out_q)
        else:
            alpha = float(self.graph.operators[op["index"]].options.get("Alpha", 0.0))
            table = tflm.leaky_relu(x, alpha, in_q, out_q)
        return table

    def unary(self, op, c_name):
        if op["op"] in ("LOGISTIC", "TANH"):
            expected = (1.0 / 256, -128) if op["op"] == "LOGISTIC" else (1.0 / 128, 0)
            scale, zp = self.quant(op["output"])
            if zp != expected[1] or abs(scale - expected[0]) > expected[0] * 1e-6:
                raise NNBuildError(f"operator {op['index']} ({op['op']}): output at scale {scale} and zero point {zp} "
                                   f"(TFLite Micro's int8 {op['op']} writes scale {expected[0]}, zero point "
                                   f"{expected[1]})")
        table = self.array(f"{c_name}_t", "int8_t", self.unary_table(op),
                           f"{op['op']} {op['index']}: output for each input -128..127")
        op["symbols"] = [table]
        n = self.size(op["output"])
        body = [f"y[i] = (int8_t)NN_READ8(NN_ADDR({table}) + (uint8_t)(x[i] + 128) * NN_STEP(int8_t));"]
        return self.pointers(op) + self.loop("i", n, body)

    op_LOGISTIC = op_TANH = op_HARD_SWISH = op_LEAKY_RELU = op_RELU = op_QUANTIZE = unary

    def op_RELU6(self, op, c_name):
        """TFLite Micro's Relu6Quantized: the input clamped to 0 and 6 quantized at the input's scale and
        zero point, written unchanged (the output's scale and zero point are not used)."""
        zero, six = tflm.relu6_bounds(*self.quant(op["sources"][0]))
        body = [f"y[i] = (int8_t)nn_clamp(x[i], {zero}, {six});"]
        return self.pointers(op) + self.loop("i", self.size(op["output"]), body)

    def op_SOFTMAX(self, op, c_name):
        shape = self.shape(op["sources"][0])
        row = shape[-1]
        rows = self.size(op["sources"][0]) // row
        if row > MAX_SOFTMAX_ROW:
            raise NNBuildError(f"operator {op['index']} (SOFTMAX): rows of {row} values (at most {MAX_SOFTMAX_ROW})")
        scale, zp = self.quant(op["output"])
        if zp != -128 or abs(scale - 1.0 / 256) > 1e-6 / 256:
            raise NNBuildError(f"operator {op['index']} (SOFTMAX): output at scale {scale}, zero point {zp} (TFLite "
                               "Micro's int8 SOFTMAX writes scale 1/256, zero point -128)")
        in_scale, _ = self.quant(op["sources"][0])
        beta = float(self.graph.operators[op["index"]].options.get("Beta", 1.0))
        exps = tflm.softmax_exps(in_scale, beta)
        table = self.array(f"{c_name}_e", "int32_t", exps,
                           "SOFTMAX: exp(beta * scale * d) in F0 for d = 0, -1, ..., -255 (0 below the cut-off)")
        op["symbols"] = [table]
        exp_of = f"NN_READ32(NN_ADDR({table}) + (uint8_t)(top - r[i]) * NN_STEP(int32_t))"
        body = [f"const int8_t *r = x + ({'uint32_t' if rows * row > 65535 else 'uint16_t'})j * {row}u;",
                f"int8_t *o = y + ({'uint32_t' if rows * row > 65535 else 'uint16_t'})j * {row}u;",
                "int8_t top = -128;", "int32_t total = 0;", "int32_t reciprocal;", "uint8_t headroom;"]
        body += self.loop("i", row, ["if (r[i] > top) {", "    top = r[i];", "}"])
        body += self.loop("i", row, [f"total += nn_rdbpot({exp_of}, 12);"])
        body += ["headroom = nn_clz((uint32_t)total);",
                 "reciprocal = nn_reciprocal((int32_t)(nn_shl((uint32_t)total, headroom) - 0x80000000UL));"]
        body += self.loop("i", row, [f"o[i] = nn_clamp(nn_rdbpot(nn_srdhm(reciprocal, {exp_of}), "
                                     "(uint8_t)(35u - headroom)) - 128, -128, 127);"])
        return self.pointers(op) + self.loop("j", rows, body)

    def binary_operand(self, op, k, c_name, n):
        """(setup lines, C expression of operand k's element i): a computed tensor or a constant,
        of the output's size or of one value (broadcast)."""
        index = op["sources"][k]
        size = self.size(index) if self.ref(index) is not None else int(np.asarray(self.tensor(index).data).size)
        if size not in (n, 1):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): operand {k} of shape "
                               f"{self.tensor(index).shape} broadcast to {self.shape(op['output'])} (int8: equal "
                               "shapes or one value)")
        at = "i" if size == n else "0"
        ref = self.ref(index)
        if ref is not None:
            return [f"const int8_t *x{k} = {ref};"], f"x{k}[{at}]"
        symbol = self.array(f"{c_name}_k{k}", "int8_t", self.tensor(index).data, f"{op['op']} {op['index']}: operand {k}")
        op.setdefault("symbols", []).append(symbol)
        return [], f"(int8_t)NN_READ8(NN_ADDR({symbol}) + {at} * NN_STEP(int8_t))"

    def binary(self, op, c_name):
        n = self.size(op["output"])
        setup, operands = [], []
        for k in range(2):
            lines, expr = self.binary_operand(op, k, c_name, n)
            setup += lines
            operands.append(expr)
        setup.append(f"int8_t *y = {self.ref(op['output'])};")
        (s1, z1), (s2, z2), (so, zo) = self.quant(op["sources"][0]), self.quant(op["sources"][1]), \
            self.quant(op["output"])
        lo, hi = self.range_of(op)
        a, b = operands
        if op["op"] in ("ADD", "SUB"):
            (m1, sh1), (m2, sh2), (mo, sho) = tflm.add_multipliers(s1, s2, so, single_precision=op["op"] == "SUB")
            p = {"m1": m1, "s1": sh1, "m2": m2, "s2": sh2, "mo": mo, "so": sho}
            body = [f"int32_t a = nn_mbqm((int32_t){_minus(a, z1)} * INT32_C(1048576), INT32_C({p['m1']}), {p['s1']});",
                    f"int32_t b = nn_mbqm((int32_t){_minus(b, z2)} * INT32_C(1048576), INT32_C({p['m2']}), {p['s2']});",
                    f"y[i] = nn_clamp(nn_mbqm(a {'+' if op['op'] == 'ADD' else '-'} b, INT32_C({p['mo']}), {p['so']}) + "
                    f"({zo}), {lo}, {hi});"]
        elif op["op"] == "MUL":
            m, s = tflm.quantize_multiplier(float(s1) * float(s2) / float(so))
            body = [f"int32_t p = (int32_t){_minus(a, z1)} * {_minus(b, z2)};",
                    f"y[i] = nn_clamp(nn_mbqm(p, INT32_C({m}), {s}) + ({zo}), {lo}, {hi});"]
        else:
            if not ((s1, z1) == (s2, z2) == (so, zo)):
                raise NNBuildError(f"operator {op['index']} ({op['op']}): inputs quantized unlike the output")
            cmp = ">" if op["op"] == "MAXIMUM" else "<"
            body = [f"int8_t a = {a};", f"int8_t b = {b};", f"y[i] = a {cmp} b ? a : b;"]
        return setup + self.loop("i", n, body)

    op_ADD = op_SUB = op_MUL = op_MAXIMUM = op_MINIMUM = binary

    def op_CONCATENATION(self, op, c_name):
        out_shape = self.shape(op["output"])
        rank = len(out_shape) + 1
        axis = int(self.graph.operators[op["index"]].options["Axis"]) % rank - 1
        if axis < 0:
            raise NNBuildError(f"operator {op['index']} (CONCATENATION): along the batch axis")
        for s in op["sources"]:
            if self.quant(s) != self.quant(op["output"]):
                raise NNBuildError(f"operator {op['index']} (CONCATENATION): inputs quantized unlike the output")
        outer = int(np.prod(out_shape[:axis])) if axis else 1
        total = int(np.prod(out_shape[axis:]))
        lines, body, offset = self.pointers(op, len(op["sources"])), [], 0
        idx = "uint32_t" if self.size(op["output"]) > 65535 else "uint16_t"
        for k, s in enumerate(op["sources"]):
            inner = int(np.prod(self.shape(s)[axis:]))
            body += self.loop(f"i{k}", inner, [f"y[({idx})o * {total}u + {offset}u + i{k}] = x{k}[({idx})o * "
                                               f"{inner}u + i{k}];"])
            offset += inner
        return lines + self.loop("o", outer, body)

    def op_PAD(self, op, c_name):
        graph_op = self.graph.operators[op["index"]]
        pads = np.asarray(self.const(graph_op.inputs[1])).astype(np.int64).reshape(-1, 2)[1:]
        _, zp = self.quant(op["output"])
        if self.quant(op["sources"][0]) != self.quant(op["output"]):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): input quantized unlike the output")
        fill = zp
        if len(graph_op.inputs) > 2 and graph_op.inputs[2] >= 0:
            fill = int(np.asarray(self.const(graph_op.inputs[2])).reshape(-1)[0])
        x_shape, y_shape = self.shape(op["sources"][0]), self.shape(op["output"])
        idx = "uint32_t" if max(self.size(op["output"]), self.size(op["sources"][0])) > 65535 else "uint16_t"
        names = [f"d{a}" for a in range(len(y_shape))]
        tests = []
        for n, p, xs, ys in zip(names, pads, x_shape, y_shape):
            if int(p[0]):
                tests.append(f"{n} >= {int(p[0])}u")
            if int(p[0]) + xs < ys:
                tests.append(f"{n} < {int(p[0]) + xs}u")
        inside = " && ".join(tests) or "1"
        src = "0"
        dst = "0"
        for n, p, xs, ys in zip(names, pads, x_shape, y_shape):
            src = f"({src}) * {xs}u + ({idx})({n} - {int(p[0])}u)"
            dst = f"({dst}) * {ys}u + {n}"
        body = [f"y[({idx})({dst})] = ({inside}) ? x[{src}] : (int8_t)({fill});"]
        for n, ys in reversed(list(zip(names, y_shape))):
            body = self.loop(n, ys, body)
        return self.pointers(op) + body

    op_PADV2 = op_PAD

    def same_quantization(self, op):
        if any(self.quant(s) != self.quant(op["output"]) for s in op["sources"]):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): input quantized unlike the output (TFLite "
                               "Micro moves the int8 values unchanged)")

    def reduced_axes(self, op):
        """The axes of a reduction: every axis but the channels (a global pooling), else refused."""
        graph_op = self.graph.operators[op["index"]]
        x_shape = self.shape(op["sources"][0])
        rank = len(x_shape) + 1
        axes = sorted({int(a) % rank - 1 for a in np.asarray(self.const(graph_op.inputs[1])).reshape(-1)})
        if axes != list(range(len(x_shape) - 1)):
            raise NNBuildError(f"operator {op['index']} ({op['op']}): over axes {[a + 1 for a in axes]} (int8: every "
                               "axis but the channels, as a global pooling)")
        return x_shape

    def op_REDUCE_MAX(self, op, c_name):
        x_shape = self.reduced_axes(op)
        self.same_quantization(op)
        count, channels = int(np.prod(x_shape[:-1])), x_shape[-1]
        idx = "uint32_t" if count * channels > 65535 else "uint16_t"
        value = f"x[({idx})p * {channels}u + c]"
        body = ["int8_t best = -128;"] + self.loop("p", count, [f"if ({value} > best) {{", f"    best = {value};", "}"])
        return self.pointers(op) + self.loop("c", channels, body + ["y[c] = best;"])

    def op_TRANSPOSE(self, op, c_name):
        graph_op = self.graph.operators[op["index"]]
        perm = [int(p) for p in np.asarray(self.const(graph_op.inputs[1])).reshape(-1)]
        x_shape, y_shape = self.shape(op["sources"][0]), self.shape(op["output"])
        if sorted(perm) != list(range(len(x_shape) + 1)) or perm[0] != 0:
            raise NNBuildError(f"operator {op['index']} (TRANSPOSE): perm {perm} (a permutation keeping the batch "
                               "axis first)")
        self.same_quantization(op)
        perm = [p - 1 for p in perm[1:]]
        strides = [int(np.prod(x_shape[a + 1:])) for a in range(len(x_shape))]
        idx = "uint32_t" if self.size(op["output"]) > 65535 else "uint16_t"
        names = [f"d{a}" for a in range(len(y_shape))]
        src = " + ".join(f"({idx}){n} * {strides[p]}u" for n, p in zip(names, perm))
        dst = "0"
        for n, ys in zip(names, y_shape):
            dst = f"({dst}) * {ys}u + {n}"
        body = [f"y[({idx})({dst})] = x[{src}];"]
        for n, ys in reversed(list(zip(names, y_shape))):
            body = self.loop(n, ys, body)
        return self.pointers(op) + body

    def op_MEAN(self, op, c_name):
        x_shape = self.reduced_axes(op)
        in_scale, in_zp = self.quant(op["sources"][0])
        out_scale, out_zp = self.quant(op["output"])
        count = int(np.prod(x_shape[:-1]))
        channels = x_shape[-1]
        multiplier, shift = tflm.quantize_multiplier(float(in_scale) / float(out_scale))
        multiplier, shift = tflm.mean_multiplier(multiplier, shift, count)
        if not -31 <= shift <= 30:
            raise NNBuildError(f"operator {op['index']} (MEAN): requantisation shift {shift} out of range")
        idx = "uint32_t" if count * channels > 65535 else "uint16_t"
        body = ["int32_t sum = 0;"] + self.loop("p", count, [f"sum += x[({idx})p * {channels}u + c];"])
        body.append(f"y[c] = nn_clamp(nn_mbqm(sum - INT32_C({in_zp * count}), INT32_C({multiplier}), {shift}) + ({out_zp}), "
                    "-128, 127);")
        return self.pointers(op) + self.loop("c", channels, body)

    # ------------------------------------------------------------------ recurrent

    def op_STRIDED_SLICE(self, op, c_name):
        """reference_ops::StridedSlice of a computed tensor: the int8 values copied unchanged, one
        loop per sliced axis of more than one index."""
        graph_op = self.graph.operators[op["index"]]
        x_shape = self.shape(op["sources"][0])
        starts, steps, counts, _ = tflm.slice_plan((1,) + x_shape, *(self.const(i) for i in graph_op.inputs[1:4]),
                                                   graph_op.options or {})
        strides = [int(np.prod(x_shape[a + 1:])) for a in range(len(x_shape))]
        idx = "uint32_t" if max(self.size(op["sources"][0]), self.size(op["output"])) > 65535 else "uint16_t"
        src, dst, loops = [], "0", []
        for a, (start, step, count) in enumerate(zip(starts, steps, counts)):
            if count == 1:
                src.append(f"{start * strides[a]}u")
                continue
            d = f"d{a}"
            loops.append((d, count))
            position = f"({start}u + ({idx}){d} * {step}u)" if step > 0 else f"({start}u - ({idx}){d} * {-step}u)"
            src.append(f"{position} * {strides[a]}u")
            dst = f"({dst}) * {count}u + {d}" if dst != "0" else d
        body = [f"y[{dst}] = x[{' + '.join(src)}];"]
        for d, count in reversed(loops):
            body = self.loop(d, count, body)
        return self.pointers(op) + body

    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op, c_name):
        """TFLite Micro's 8x8->16 LSTM (nnbuild.numerics.tflm_int8): per step the four gates (two
        int16 fully connected products each, summed with saturation, the int16 sigmoid or tanh of
        the shared table), then per unit the cell update, its clip and the hidden state, in the
        state arrays h and c the caller passes (<name>_infer: its own, reset)."""
        graph_op = self.graph.operators[op["index"]]
        p = tflm.lstm_params_of(self.graph, graph_op)
        steps, features = self.shape(op["sources"][0])
        units = p.hidden
        requants = list(p.input_requant) + list(p.recurrent_requant) + [p.forget_cell_mul, p.input_cell_mul,
                                                                        p.hidden_mul]
        for m, s in requants:
            if not -31 <= s <= 30:
                raise NNBuildError(f"operator {op['index']} (UNIDIRECTIONAL_SEQUENCE_LSTM): requantisation shift {s} "
                                   "out of range")
        what = f"UNIDIRECTIONAL_SEQUENCE_LSTM {op['index']}"
        w = self.array(f"{c_name}_w", "int8_t", p.input_weights,
                       f"{what}: input weights [gate i, f, c, o][{units}][{features}]")
        r = self.array(f"{c_name}_r", "int8_t", p.recurrent_weights,
                       f"{what}: recurrent weights [gate i, f, c, o][{units}][{units}]")
        b = self.array(f"{c_name}_b", "int32_t", p.biases, f"{what}: gate biases [gate i, f, c, o][{units}]")
        m = self.array(f"{c_name}_m", "int32_t", [q[0] for q in requants[:8]],
                       f"{what}: multipliers of the input (i, f, c, o) then recurrent products to Q3.12")
        sh = self.array(f"{c_name}_s", "int8_t", [q[1] for q in requants[:8]], f"{what}: their shifts")
        op["symbols"] = [w, r, b, m, sh]
        x_zp, h_zp = p.input_zero_point, p.hidden_zero_point
        tanh_m, tanh_s = p.cell_tanh
        scaled = f"(int32_t)cell * {tanh_m}" + (f" + {1 << (tanh_s - 1)}" if tanh_s else "")
        tanh_in = f"({scaled}) >> {tanh_s}" if tanh_s else scaled
        (m_fc, s_fc), (m_ic, s_ic), (m_h, s_h) = requants[8:]
        idx = "uint32_t" if steps * max(features, units) > 65535 else "uint16_t"
        gate = "k == 2u ? nn_tanh16(v) : nn_sigmoid16(v)" if p.cell_activation == "tanh" else "nn_sigmoid16(v)"
        x_term = _minus("x[t_in + i]", x_zp)
        h_term = _minus("h[i]", h_zp)
        per_unit = ["int32_t acc = NN_READ32(b);", "int32_t v;", "b += NN_STEP(int32_t);"]
        per_unit += self.loop("i", features, [f"acc += (int32_t)(int16_t)NN_READ8(w) * {x_term};",
                                              "w += NN_STEP(int8_t);"])
        per_unit += ["v = nn_clamp16(nn_mbqm(acc, m_in, s_in));", "acc = 0;"]
        per_unit += self.loop("i", units, [f"acc += (int32_t)(int16_t)NN_READ8(r) * {h_term};",
                                           "r += NN_STEP(int8_t);"])
        per_unit += ["v = 3 * (int32_t)nn_clamp16(v + nn_clamp16(nn_mbqm(acc, m_rec, s_rec)));",
                     f"g[k * {units}u + j] = {gate};"]
        per_gate = ["int32_t m_in = NN_READ32(NN_ADDR(" + m + ") + k * NN_STEP(int32_t));",
                    "int32_t m_rec = NN_READ32(NN_ADDR(" + m + ") + (k + 4u) * NN_STEP(int32_t));",
                    "int8_t s_in = (int8_t)NN_READ8(NN_ADDR(" + sh + ") + k * NN_STEP(int8_t));",
                    "int8_t s_rec = (int8_t)NN_READ8(NN_ADDR(" + sh + ") + (k + 4u) * NN_STEP(int8_t));"]
        per_gate += self.loop("j", units, per_unit)
        clip = [f"cell = cell > {p.cell_clip} ? {p.cell_clip} : (cell < -{p.cell_clip} ? -{p.cell_clip} : cell);"] \
            if p.cell_clip > 0 else []
        update = [f"int32_t cell = nn_clamp16(nn_mbqm((int32_t)g[{units}u + j] * c[j], INT32_C({m_fc}), {s_fc}));",
                  f"cell = nn_clamp16(cell + nn_clamp16(nn_mbqm((int32_t)g[j] * g[{2 * units}u + j], INT32_C({m_ic}), "
                  f"{s_ic})));", *clip, "c[j] = (int16_t)cell;",
                  f"h[j] = nn_clamp(nn_mbqm((int32_t)nn_tanh16({tanh_in}) * g[{3 * units}u + j], INT32_C({m_h}), "
                  f"{s_h}) + ({h_zp}), -128, 127);",
                  f"y[({idx})t * {units}u + j] = h[j];"]
        per_step = [f"{idx} t_in = ({idx})t * {features}u;", f"NN_PTR(int8_t) w = NN_ADDR({w});",
                    f"NN_PTR(int8_t) r = NN_ADDR({r});", f"NN_PTR(int32_t) b = NN_ADDR({b});"]
        per_step += self.loop("k", 4, per_gate) + self.loop("j", units, update)
        lines = self.pointers(op) + [f"int16_t g[{4 * units}]; /* gate outputs i, f, c, o: Q0.15 */"]
        return lines + self.loop("t", steps, per_step)


def tflm_fused(code):
    """The trace's name of a fused activation code."""
    return {0: "linear", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}.get(int(code), str(code))
