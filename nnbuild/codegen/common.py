"""What every code shape shares: weight literals and arrays, index types, the weights digest, the
flow-fact recorder the templates emit through, and the layer -> code trace.

The recorder (`FlowFacts`) is why the flow facts need no parsing of the generated C: a template
writes a loop's NN_LOOPBOUND, a layer mark or a function name through it, the recorder keeps the
bound/name with an invisible sentinel in the text, and `FlowFacts.resolve` turns the sentinels into
line numbers once the text is final (after any post-processing that drops or merges lines).
"""

import hashlib
import math
import re

import numpy as np

from nnbuild.codegen import DSP_CAPABILITIES  # noqa: F401 (one home: the package)
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier, c_text

#: avr-gcc rejects any object over PTRDIFF_MAX (32,767 bytes): weight arrays are split below it.
MAX_ARRAY_BYTES = 32767
FLOAT_BYTES = 4

#: C spelling of each float precision: type, literal suffix, exp, tanh saturation point (where
#: tanh is within half an ulp of 1) and that gap (the prelude's activation helpers use them)
REALS = {"float32": ("float", "f", "expf", 9, "3e-8"), "float64": ("double", "", "exp", 19, "6e-17")}

#: weights storages that put the arrays in AVR flash (PROGMEM): `avr-progmem-far` reads them with
#: ELPM (pgm_read_*_far, anywhere in flash), `avr-progmem-near` with LPM through 16-bit pointers
#: (pgm_read_*, the arrays must end below 64 KB: the size step checks the "near_flash_symbols")
FLASH_STORAGES = ("avr-progmem-far", "avr-progmem-near")
NEAR_STORAGE = "avr-progmem-near"
#: plain const arrays that a shape may lay out for SIMD lanes, computed with GCC/Clang vectors (the
#: host board's; every shape without a vector layout treats it as `const`)
SIMD_STORAGE = "const-simd"
#: plain const arrays that a shape may lay out for a host's scalar code (plain C99, no vector type):
#: the mlp shape interleaves a block's weights so gcc -O3 can compute the block in vector registers;
#: every other shape treats it as `const`. The MCU targets keep `const`, whose layout suits them.
HOST_STORAGE = "const-host"


#: weights storages whose float32 multiply-accumulates flush tiny inputs and sum their products by
#: sign (`split_accumulation`): the AVR flash ones, where float32 is avr-libc's soft-float
SPLIT_STORAGES = FLASH_STORAGES


def split_accumulation(storage, real, soft_float=False):
    """Whether float32 multiply-accumulates flush tiny inputs and sum products by sign (one
    accumulator per sign, joined by one subtraction per output), so the soft-float WCET analysis
    can drop __mulsf3's subnormal loops and __addsf3's cancellation loop
    (nnbuild.numerics.float_facts). On for AVR flash (avr-libc soft-float) and, in the MLP shape,
    for a board without FPU (`soft_float`, board key soft_float: libgcc's ARM soft-float); the MLP
    and the CNN shapes v1, v2 and v3 all ask here, so another soft-float board is turned on in one
    place. Elsewhere the sums stay sequential, in the reference's order."""
    return real == "float" and (storage in SPLIT_STORAGES or soft_float)


def split_plan(kernel, storage, keep_exp, bias=None):
    """What a split layer's lines need, for a [inputs, units] float32 `kernel` and its `bias`: its
    value facts and tags for avr-libc's __mulsf3/__addsf3 on AVR flash, else for libgcc's
    __aeabi_fmul/__aeabi_fadd (soft-float ARM: arm_libloops.json, thumb2_libloops.json `paths`),
    where the threshold keeps every product normal. `keep_exp`: the name of its threshold constant.
    `join_tags`: the tags of the one pos - neg of each output (none on AVR)."""
    from nnbuild.numerics import float_facts
    if storage in FLASH_STORAGES:
        return {"facts": float_facts.mac_facts(kernel, normal_products=False), "keep_exp": keep_exp,
                "mul_tags": float_facts.MUL_TAGS, "add_tags": float_facts.ADD_TAGS, "add_note": "",
                "add_magnitude": False, "join_tags": (), "join_note": ""}
    # libgcc: neg += |p| calls __aeabi_fadd, whose same-sign path is shorter than __aeabi_fsub's on
    # the Cortex-M0+ (avr-libc's __subsf3 is __addsf3's)
    facts = float_facts.mac_facts(kernel, normal_products=True)
    # weights zero or normal and flushed inputs: every product is zero, normal, inf or NaN; with a
    # zero-or-normal bias pos and neg are never subnormal either (sums of such values of one sign)
    normal_sums = facts.weights_normal and (bias is None or float_facts.zero_or_normal(bias))
    no_subnormal = float_facts.FADD_NO_SUBNORMAL_TAGS if normal_sums else ()
    return {"facts": facts, "keep_exp": keep_exp,
            "mul_tags": float_facts.NO_SUBNORMAL_TAGS + (float_facts.FMUL_IN_RANGE_TAGS if facts.in_range else ()),
            "add_tags": float_facts.FADD_SAME_SIGN_TAGS + no_subnormal,
            "add_note": "; p is zero, normal, inf or NaN, never subnormal (non-zero factors have eW + eX >= 128)"
                        + ("; the bias is zero or normal, so neither operand is subnormal" if no_subnormal else ""),
            "add_magnitude": True, "join_tags": no_subnormal,
            "join_note": "pos and neg are zero, normal, inf or NaN: sums of one sign of the zero-or-normal bias and of "
                         "products that are zero, normal, inf or NaN (never subnormal: non-zero factors have eW + eX >= 128)"}


def split_facts(ops, storage, real, kinds=("conv2d", "dense")):
    """Give each op of `kinds` its MacFacts (`facts`, nnbuild.numerics.float_facts) for a split
    sum, and return whether nn_join ends the sums (the CNN shapes on AVR flash: pos - neg exact in
    integers where it could cancel, __subsf3 elsewhere). The join needs its own flush threshold
    (mac_facts(join=True)) and float_facts.join_holds for every split op; when one op does not
    allow it, every op keeps the plain threshold and the sums end with pos - neg."""
    from nnbuild.numerics import float_facts
    macs = [op for op in ops if op["kind"] in kinds]
    if real == "float" and storage in SPLIT_STORAGES:
        joined = [float_facts.mac_facts(np.asarray(op["weights"]).T, join=True) for op in macs]
        if all(float_facts.join_holds(f, bias_floats(op)) for f, op in zip(joined, macs)):
            for op, f in zip(macs, joined):
                op["facts"] = f
            return True
    for op in macs:
        op["facts"] = float_facts.mac_facts(np.asarray(op["weights"]).T)
    return False


def bias_floats(op):
    """A lowered CNN op's bias as floats (its float32 literals), or None."""
    if not op.get("bias"):
        return None
    return [float(v.rstrip("f")) for line in op["bias"]["values"] for v in line.split(", ")]


#: the prelude's comment above the near (LPM) weight readers of storage avr-progmem-near
NEAR_COMMENT = ("/* Weights in AVR flash below 64 KB (storage avr-progmem-near, checked after linking): read with\n"
                " * LPM through 16-bit pointers (pgm_read_*), for chips without ELPM. */")


def storage_context(storage):
    """Template flags of a weights storage: `flash` (arrays in AVR flash, PROGMEM), `near` (read
    through 16-bit LPM pointers), `near_storage` (the storage itself asks for near reads),
    `near_comment` (what the prelude writes above the near readers)."""
    return {"flash": storage in FLASH_STORAGES, "near": storage == NEAR_STORAGE,
            "near_storage": storage == NEAR_STORAGE, "near_comment": NEAR_COMMENT}


def reals(precision):
    """Template context of the prelude's float activation helpers for `precision`."""
    real, sfx, exp, tanh_limit, tanh_gap = REALS[precision]
    return {"real": real, "sfx": sfx, "exp": exp, "tanh_limit": tanh_limit, "tanh_gap": tanh_gap}


def tanh_form(storage, precision):
    """How the prelude computes tanh: "table" (x * R(|x|), R a polynomial per interval of |x|
    evaluated in double, nnbuild.codegen.host_tanh; no libm call, no division) for const-host
    float32, a host's storage; "exp" ((e^2x - 1) / (e^2x + 1), with its WCET value facts)
    everywhere else, the MCU targets and their facts unchanged."""
    return "table" if storage == HOST_STORAGE and precision == "float32" else "exp"


def weight_chunks(prefix, layer, storage, real="float", first=0):
    """The kernel as [out][in] rows (from row `first`), split into balanced chunks each under
    MAX_ARRAY_BYTES on AVR."""
    rows = np.asarray(layer.kernel, dtype=np.float32).T
    row_bytes = rows.shape[1] * FLOAT_BYTES
    if storage in FLASH_STORAGES:
        if row_bytes > MAX_ARRAY_BYTES:
            raise NNBuildError(f"a weight row of {row_bytes} bytes exceeds avr-gcc's 32,767-byte object limit",
                               item=f"Dense '{layer.name}'")
        per_chunk = MAX_ARRAY_BYTES // row_bytes
        count = -(-(rows.shape[0] - first) // per_chunk)
    else:
        count = 1
    bounds = np.linspace(first, rows.shape[0], count + 1).round().astype(int)
    chunks = []
    for c, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        chunks.append({"symbol": f"{prefix}_{c_identifier(layer.name)}_w{c}", "start": int(start), "ctype": real,
                       "rows": int(stop - start), "size": int((stop - start) * rows.shape[1]),
                       "values": format_values(rows[start:stop].ravel(), layer)})
    return chunks


def weight_symbols(layers):
    """Sorted names of every weight array of planned layers (chunks and biases): the arrays the
    near-flash check must find below 64 KB."""
    names = [c["symbol"] for l in layers for c in l.get("chunks") or ()]
    names += [a["symbol"] for l in layers for a in l.get("arrays") or ()]
    return sorted(set(names + [l["bias"]["symbol"] for l in layers if l.get("bias")]))




def row_chunks(n_rows, row_bytes, storage, item):
    """[(start, stop)] of a weight array's rows: in AVR flash, balanced chunks each under
    MAX_ARRAY_BYTES (a single row over it is refused, naming `item`); else one chunk."""
    flash = storage in FLASH_STORAGES
    if flash and row_bytes > MAX_ARRAY_BYTES:
        raise NNBuildError(f"a weight row of {row_bytes} bytes exceeds avr-gcc's 32,767-byte object limit", item=item)
    count = -(-n_rows // (MAX_ARRAY_BYTES // row_bytes)) if flash else 1
    bounds = np.linspace(0, n_rows, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def bias_array(prefix, layer, real="float"):
    if layer.bias is None:
        return None
    return {"symbol": f"{prefix}_{c_identifier(layer.name)}_b", "size": int(layer.bias.size), "ctype": real,
            "values": format_values(np.asarray(layer.bias, dtype=np.float32), layer)}


def check_finite(values, layer):
    if not np.all(np.isfinite(values)):
        raise NNBuildError("weights contain NaN or infinity", item=f"Dense '{layer.name}'")


def format_values(values, layer):
    """Float32 literals that round-trip exactly (%.9g), 8 per line."""
    check_finite(values, layer)
    literals = [float_literal(v) for v in values.tolist()]
    return [", ".join(literals[i:i + 8]) for i in range(0, len(literals), 8)]


def float_literal(value, suffix="f"):
    """The C text of a float32 value: %.9g round-trips float32 (the weights are float32 whatever
    precision computes with them); infinities and NaN as <math.h>'s INFINITY and NAN (every file
    that may hold one includes it); with the f suffix, a value float32 rounds to zero or to
    infinity is written as that result, which is what the compiler would make of it, without its
    -Woverflow error. `suffix` "" writes a double literal."""
    value = float(value)
    # only values beyond float32's range (or below half its smallest subnormal) round to inf or 0
    if suffix == "f" and math.isfinite(value) and value != 0.0 and not 1e-45 < abs(value) < 3.4e38:
        with np.errstate(over="ignore"):
            rounded = float(np.float32(value))
        value = rounded if rounded == 0.0 or math.isinf(rounded) else value
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = "%.9g" % value
    if not re.search(r"[.eE]", text):
        text += ".0"
    return text + suffix


def index_type(bound):
    """The narrowest fast unsigned type for a loop index below `bound` (8-bit on AVR when it fits)."""
    return "uint_fast8_t" if bound <= 255 else "uint_fast16_t"


def weights_digest(model):
    """sha256 over every weight array, named in the weights file for traceability."""
    digest = hashlib.sha256()
    for layer in model.layers:
        for array in (getattr(layer, role, None) for role in ("kernel", "bias", "w", "r", "rbias", "peephole",
                                                                "initial_h", "initial_c")):
            if array is not None:
                digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------- flow facts

#: STX <kind><number> ETX: control characters no template writes and c_text never lets through
_SENTINEL = re.compile("\x02([A-Za-z])(\\d+)\x03")


#: what may follow NN_LOOPBOUND: a C `for`, or a macro whose expansion is one counted loop (the AVR
#: dot product in inline assembly, bounded by its turn count)
LOOP_STATEMENTS = ("for (", "NN_DOT16(", "NN_DOT16F(", "NN_DOT8(", "NN_DOT8F(", "NN_DOT16P(", "NN_DOT8P(", "NN_DOT16Q(",
                   "NN_DOT8Q(")


class FlowFacts:
    """Loop bounds, layer marks and function names, recorded as a template emits them.

    Templates call it as `ff`: `{{ ff.loop(n) }}` writes `NN_LOOPBOUND(n)` (the loop statement
    follows on the next line) and `}{{ ff.end() }}` closes the innermost open loop;
    `{{ ff.layer(c_name) }}` / `{{ ff.layers_end() }}` write the layer marks (a layer runs to the
    next mark); `{{ ff.team(label) }}` / `{{ ff.team_end(label) }}` the TPG's self-closing ones;
    `{{ ff.function(name) }}` writes a function's name where it is declared or defined, and
    `{{ ff.mark(key) }}` records a line under `key`. With `functions`, a loop or layer belongs to
    the last function named before it (else to the entry point).
    """

    def __init__(self, name, *, functions=False, loop_extra=None):
        self.name, self.entry, self.file = name, f"{name}_infer", f"{name}.c"
        self.functions = functions
        self.loop_extra = dict(loop_extra or {})
        self._items = []        # (kind, payload) in emission order; the sentinel number is the index
        self._open = []         # indices of the loops emitted but not closed yet
        self._layer = None      # the layer whose code is being emitted

    def _put(self, kind, payload=None):
        self._items.append((kind, payload))
        return f"\x02{kind}{len(self._items) - 1}\x03"

    def loop(self, bound, why=None, body_first=False, total=None):
        """`body_first`: the loop's first block runs its body before the exit test (an assembly
        loop), so `bound` counts executions of that block whatever its shape looks like.
        `total`: the body's executions summed over one call of the entry (`total_iterations`),
        when the code's own tests run it fewer times than its enclosing loops times `bound`."""
        bound = int(bound)
        if bound < 0:
            raise NNBuildError(f"internal error: negative loop bound {bound} in {self.file}")
        self._open.append(len(self._items))
        return f"NN_LOOPBOUND({bound})" + self._put("L", {"bound": bound, "layer": self._layer, "why": why,
                                                          "body_first": body_first, "total": total})

    def end(self):
        if not self._open:
            raise NNBuildError(f"internal error: a loop end without a loop in {self.file}")
        return self._put("E", self._open.pop())

    def layer(self, name):
        self._layer = name
        return f"/* nnbuild-layer {name} */" + self._put("Y", name)

    def layers_end(self):
        return "/* nnbuild-end */" + self._put("Z")

    def team(self, label):
        return f"/* nnbuild-team {c_text(label)} */" + self._put("T", label)

    def team_end(self, label):
        return f"/* nnbuild-team-end {c_text(label)} */" + self._put("U", label)

    def function(self, name):
        return name + self._put("F", name)

    def mark(self, key):
        return self._put("M", key)

    def value(self, op, tags, why, adds=None):
        """A value fact about the float operation `op` ("mul", "add") on this line: `tags` name
        the operand properties the generator proved (`why`), for the WCET analyser's table.
        `adds` (op "add"): the float32 bits ("0x3f800000") of the constant added; the fact then
        holds only for the additions of that constant on the line (the compiler may move another
        addition's call onto it)."""
        fact = {"op": op, "tags": list(tags), "why": why, "layer": self._layer}
        if adds is not None:
            fact["adds"] = adds
        return self._put("V", fact)

    def resolve(self, text):
        """(text without sentinels, flow facts, {mark key: [lines]}); facts of dropped text vanish."""
        if self._open:
            raise NNBuildError(f"internal error: {len(self._open)} loop(s) left open in {self.file}")
        lines = text.split("\n")
        where = {}
        for number, line in enumerate(lines, start=1):
            if "\x02" in line:
                for m in _SENTINEL.finditer(line):
                    where[int(m.group(2))] = number
                lines[number - 1] = _SENTINEL.sub("", line)
        starts = []             # (line, function) in order
        loops, layers, marks, by_index, values = [], [], {}, {}, []
        for index in sorted(where):
            kind, payload = self._items[index]
            number = where[index]
            if kind == "F":
                starts.append((number, payload))
            elif kind == "L":
                if not lines[number].lstrip().startswith(LOOP_STATEMENTS):
                    raise NNBuildError(f"internal error: NN_LOOPBOUND not followed by a for loop at "
                                       f"{self.file}:{number}")
                fact = {"function": self._owner(starts, number + 1), "file": self.file, "line": number + 1,
                        "last_line": None, "max_iterations": payload["bound"], "layer": payload["layer"]}
                fact.update(self.loop_extra if payload["why"] is None else {"why": payload["why"]})
                if payload["body_first"]:
                    fact["counts"] = "header"
                if payload.get("total") is not None:
                    fact["total_iterations"] = int(payload["total"])
                loops.append(fact)
                by_index[index] = fact
            elif kind == "E" and payload in by_index:   # else its loop was dropped with its text
                by_index[payload]["last_line"] = number
            elif kind == "Y":
                if layers and layers[-1].get("open"):
                    layers[-1]["last_line"] = number - 1
                layers.append({"name": payload, "function": self._owner(starts, number), "file": self.file,
                               "first_line": number, "last_line": None, "open": True})
            elif kind == "Z":
                if layers:
                    layers[-1]["last_line"] = number
            elif kind == "T":
                layers.append({"name": payload, "type": "Team", "function": self._owner(starts, number),
                               "file": self.file, "first_line": number, "last_line": None})
            elif kind == "U":
                match = [l for l in layers if l["name"] == payload and l["last_line"] is None]
                match[-1]["last_line"] = number
            elif kind == "M":
                marks.setdefault(payload, []).append(number)
            elif kind == "V":
                values.append({"file": self.file, "line": number, **payload})
        for l in layers:
            l.pop("open", None)
        if any(l["last_line"] is None for l in loops):
            raise NNBuildError(f"internal error: a loop of {self.file} has no end mark")
        facts = {"entry": self.entry, "loops": loops, "layers": layers}
        if values:
            facts["values"] = values
        return "\n".join(lines), facts, marks

    def _owner(self, starts, line):
        if self.functions and starts and starts[-1][0] <= line:
            return starts[-1][1]
        return self.entry


def render(template, context, recorder, post=None):
    """Render `template` with the recorder as `ff`, apply `post` to the text, resolve the facts:
    (code, flow facts, marks)."""
    from nnbuild.codegen import templating
    text = templating.render(template, dict(context, ff=recorder))
    return recorder.resolve(post(text) if post else text)


def trace(model, layers, facts, passes_log):
    """Model layer -> generated code and weight arrays, for the traceability report."""
    ranges = {l["name"]: (l["first_line"], l["last_line"]) for l in facts["layers"]}
    return {
        "model": model.name,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
        "meta": {k: v for k, v in sorted(model.meta.items()) if isinstance(v, (str, int, float, list))},
        "passes": passes_log,
        "layers": [{
            "index": l["index"], "name": l["name"], "type": l["source_type"], "activation": l["activation"],
            "inputs": l["inputs"], "units": l["units"], "code": f"{model.name}.c",
            "lines": list(ranges.get(l["c_name"], (None, None))),
            "weights": [c["symbol"] for c in l.get("chunks", [])] + ([l["bias"]["symbol"]] if l.get("bias") else []),
        } for l in layers],
    }



class UnrolledParts:
    """The statements of one unrolled (shape v3) layer, cut into functions nn_<layer>_p<k> of at
    most `part_terms` terms (never a helper's name: those end in a letter or in _<digits>). It
    counts the terms written and the distinct ones: an equal sum elsewhere in the layer, which the
    compiler may share (CSE), once; the flash floor of the board is charged on those."""

    #: the tensors the API passes in and out (indexed directly; the rest lives in the arena)
    API_BUFFERS = ("in", "out")

    def __init__(self, op, arena, part_terms):
        self.op, self.arena, self.part_terms, self.parts, self.terms = op, arena, part_terms, [], 0
        if set(op.get("api", ())) - {"in", "out"}:
            self.API_BUFFERS = tuple(sorted(op["api"]))   # several inputs or outputs: the arguments' names
        self.count = self.distinct = 0
        self._sums = set()

    def at(self, ref, index):
        """C lvalue of element `index` of the tensor at `ref` (an API buffer or 'arena + k')."""
        if ref in self.API_BUFFERS:
            return f"{ref}[{index}]"
        off = int(ref.split(" + ")[1]) if " + " in ref else 0
        return f"{self.arena}[{off + index}]"

    def emit(self, line, terms=1, sum_key=None):
        """Add one statement of `terms` terms; `sum_key`: its sum, when an equal one elsewhere in
        the layer could share its code (counted once in `distinct`)."""
        if not self.parts or self.terms + terms > self.part_terms:
            self.parts.append({"fn": f"nn_{self.op['c_name']}_p{len(self.parts)}", "lines": []})
            self.terms = 0
        self.parts[-1]["lines"].append(line)
        self.terms += terms
        self.count += terms
        if sum_key is None or sum_key not in self._sums:
            self.distinct += terms
            if sum_key is not None:
                self._sums.add(sum_key)
