"""NNEF front-end: a Khronos NNEF 1.0 model folder (`graph.nnef` text + one `<label>.dat` per
variable), read with our own small parser (no `nnef` package).

The graph is translated into an in-memory onnx.ModelProto (opset 13; NNEF is NCHW like ONNX;
variables become initializers) and handed to nnbuild.frontends.onnx_graph.convert, so every op
mapping below is a plain NNEF -> ONNX rewrite. The file is untrusted: sizes and nesting are
bounded, `.dat` labels must stay inside the folder, and every failure is one NNBuildError line
(syntax errors with line:column).

Grammar accepted (the flat subset, no `fragment` definitions):
    version 1.0;  [extension a, b;]*
    graph name(in, ...) -> (out, ...) { stmt* }
    stmt:  lhs = op[<type>](arg, ..., key = value, ...);   lhs: id | [id, ...] | (id, ...)
    values: numbers, 'str' / "str", true / false, [..] arrays, (..) tuples, identifiers.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Dict, List, Optional, Tuple

import numpy as np

from nnbuild import files, limits, names
from nnbuild.errors import NNBuildError

#: bounds on untrusted input, each checked before the work it bounds (README of docs/_notes/nnefsafe.md)
MAX_GRAPH_BYTES = 8 << 20          # graph.nnef (and a multi-item document): bytes read at most
MAX_DEPTH = 32
MAX_STATEMENTS = limits.MAX_NODES
MAX_RANK = 8
#: elements of any one tensor (declared by external/variable/constant, or computed)
MAX_ELEMENTS = limits.MAX_TENSOR_ELEMENTS
DAT_HEADER = 128
#: a .dat file: its header and one tensor of at most MAX_ELEMENTS float32
MAX_DAT_BYTES = DAT_HEADER + 4 * MAX_ELEMENTS

#: the graph file of an NNEF folder (the registry's `folder_file`)
GRAPH_FILE = "graph.nnef"
DAT_MAGIC = b"\x4e\xef"
OPSET = 13


# ----------------------------------------------------------------------------------------- parser

@dataclass(frozen=True)
class Ref:
    """An identifier used as a value (a tensor name)."""
    name: str


@dataclass
class Statement:
    outputs: List[str]
    op: str
    dtype: Optional[str]
    args: list
    kwargs: Dict[str, object]
    line: int
    column: int


@dataclass
class Graph:
    name: str
    inputs: List[str]
    outputs: List[str]
    statements: List[Statement] = field(default_factory=list)
    version: str = ""
    extensions: List[str] = field(default_factory=list)


class ParseError(Exception):
    def __init__(self, message, line, column):
        super().__init__(f"line {line}:{column}: {message}")
        self.line, self.column = line, column


_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\n]+|\#[^\n]*)
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>'[^'\n]*'|"[^"\n]*")
  | (?P<op>->|[()\[\]{},;=<>:\-])
""", re.VERBOSE)


@dataclass
class Token:
    kind: str
    text: str
    line: int
    column: int


def tokenize(text: str) -> List[Token]:
    tokens, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ParseError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1)
        kind, chunk = match.lastgroup, match.group()
        if kind != "space":
            tokens.append(Token(kind, chunk, line, pos - line_start + 1))
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = pos + chunk.rindex("\n") + 1
        pos = match.end()
    tokens.append(Token("end", "", line, pos - line_start + 1))
    return tokens


class _Parser:
    def __init__(self, text):
        self.tokens = tokenize(text)
        self.i = 0

    # helpers
    def peek(self, offset=0):
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def fail(self, message, token=None):
        token = token or self.peek()
        raise ParseError(message, token.line, token.column)

    def next(self):
        token = self.peek()
        if token.kind != "end":
            self.i += 1
        return token

    def accept(self, text):
        if self.peek().kind in ("op", "id") and self.peek().text == text:
            return self.next()
        return None

    def expect(self, text):
        token = self.peek()
        if token.text != text or token.kind not in ("op", "id"):
            self.fail(f"expected '{text}', found {self.describe(token)}")
        return self.next()

    @staticmethod
    def describe(token):
        return "end of file" if token.kind == "end" else f"'{token.text[:40]}'"

    def ident(self):
        token = self.peek()
        if token.kind != "id":
            self.fail(f"expected an identifier, found {self.describe(token)}")
        return self.next().text

    def id_list(self, close):
        items = []
        if not self.accept(close):
            while True:
                items.append(self.ident())
                if self.accept(close):
                    break
                self.expect(",")
        return items

    # grammar
    def header(self):
        """`version 1.0;` then any `extension a, b;` lines: (version, extensions)."""
        self.expect("version")
        token = self.peek()
        if token.kind != "num":
            self.fail(f"expected a version number, found {self.describe(token)}")
        version = self.next().text
        if version not in ("1.0", "1"):
            self.fail(f"NNEF version {version} is not supported (1.0 only)", token)
        self.expect(";")
        extensions = []
        while self.accept("extension"):
            extensions.append(self.ident())
            while self.accept(","):
                extensions.append(self.ident())
            self.expect(";")
        return version, extensions

    def document(self) -> Graph:
        version, extensions = self.header()
        if self.peek().text == "fragment":
            self.fail("fragment definitions are not supported (a flat graph only)")
        self.expect("graph")
        name = self.ident()
        self.expect("(")
        inputs = self.id_list(")")
        self.expect("->")
        self.expect("(")
        outputs = self.id_list(")")
        self.expect("{")
        graph = Graph(name, inputs, outputs, version=version, extensions=extensions)
        while not self.accept("}"):
            if self.peek().kind == "end":
                self.fail("missing '}' at the end of the graph")
            if len(graph.statements) >= MAX_STATEMENTS:
                self.fail(f"more than {MAX_STATEMENTS} statements")
            graph.statements.append(self.statement())
        if self.peek().kind != "end":
            self.fail(f"unexpected {self.describe(self.peek())} after the graph")
        return graph

    def statement(self) -> Statement:
        if self.accept("["):
            outputs = self.id_list("]")
        elif self.accept("("):
            outputs = self.id_list(")")
        else:
            outputs = [self.ident()]
        self.expect("=")
        op_token = self.peek()
        op = self.ident()
        dtype = None
        if self.accept("<"):
            dtype = self.ident()
            self.expect(">")
        self.expect("(")
        args, kwargs = [], {}
        if not self.accept(")"):
            while True:
                if self.peek().kind == "id" and self.peek(1).text == "=" and self.peek(1).kind == "op":
                    key_token = self.next()
                    self.next()
                    if key_token.text in kwargs:
                        self.fail(f"argument '{key_token.text}' given twice", key_token)
                    kwargs[key_token.text] = self.value(0)
                else:
                    if kwargs:
                        self.fail("a positional argument after a named one")
                    args.append(self.value(0))
                if self.accept(")"):
                    break
                self.expect(",")
        self.expect(";")
        return Statement(outputs, op, dtype, args, kwargs, op_token.line, op_token.column)

    def value(self, depth):
        if depth > MAX_DEPTH:
            self.fail(f"values nested deeper than {MAX_DEPTH}")
        token = self.peek()
        if token.kind == "num":
            self.next()
            return _number(token.text)
        if token.kind == "op" and token.text == "-":
            self.next()
            number = self.peek()
            if number.kind != "num":
                self.fail(f"expected a number after '-', found {self.describe(number)}")
            self.next()
            return -_number(number.text)
        if token.kind == "str":
            self.next()
            return token.text[1:-1]
        if token.kind == "id":
            self.next()
            if token.text == "true":
                return True
            if token.text == "false":
                return False
            return Ref(token.text)
        if token.kind == "op" and token.text in "[(":
            self.next()
            close = "]" if token.text == "[" else ")"
            items = []
            if not self.accept(close):
                while True:
                    items.append(self.value(depth + 1))
                    if self.accept(close):
                        break
                    self.expect(",")
            return items if close == "]" else tuple(items)
        self.fail(f"expected a value, found {self.describe(token)}")


def _number(text):
    if re.fullmatch(r"\d+", text):
        return int(text)
    return float(text)


def parse(text: str) -> Graph:
    """The Graph of an NNEF text document (raises ParseError with line:column)."""
    return _Parser(text).document()


# ------------------------------------------------------------------------------------ .dat files

def read_capped(path, limit, what="file", limit_name="MAX_GRAPH_BYTES") -> bytes:
    """At most `limit` bytes of a regular file (files.read_bounded: a device or a FIFO is refused,
    the read itself is capped whatever size the file reports)."""
    return files.read_bounded(path, what, limit, limit_name)


def _regular(path, what):
    """A FIFO would block the read, a device never end it: only regular files are read."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise NNBuildError(f"{what} not found or unreadable", path=path) from None
    if not stat.S_ISREG(mode):
        raise NNBuildError(f"{what} is not a regular file", path=path)


def read_dat(path, shape=None) -> np.ndarray:
    """A float32 NNEF binary tensor (`shape`, when given, must equal the file's). The header is
    read and checked (against the file's size and `shape`) before the data is."""
    path = Path(path)
    _regular(path, "tensor file")
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            header = handle.read(DAT_HEADER)
            if len(header) < DAT_HEADER:
                raise NNBuildError(f"truncated tensor file ({len(header)} bytes, the header alone is "
                                   f"{DAT_HEADER})", path=path)
            dims, length = _dat_header(header, path, shape)
            if size != DAT_HEADER + length:
                raise NNBuildError(f"tensor file is {size} bytes, its header declares {DAT_HEADER + length} "
                                   "(truncated or trailing data)", path=path)
            data = header + handle.read(length + 1)
    except OSError:
        raise NNBuildError("tensor file not found or unreadable", path=path) from None
    return parse_dat(data, path, shape)


def _dat_header(data: bytes, path=None, shape=None):
    """(extents, data length in bytes) of a .dat header, checked: magic, version, rank, item
    type, the element limit, the length against the extents and against the declared `shape`."""
    if data[:2] != DAT_MAGIC:
        raise NNBuildError("not an NNEF tensor file (wrong magic bytes)", path=path)
    major, minor = data[2], data[3]
    if (major, minor) != (1, 0):
        raise NNBuildError(f"NNEF tensor file version {major}.{minor} is not supported (1.0 only)", path=path)
    length, rank = struct.unpack_from("<II", data, 4)
    extents = struct.unpack_from("<8I", data, 12)
    bits, code = struct.unpack_from("<II", data, 44)
    if rank > MAX_RANK:
        raise NNBuildError(f"tensor rank {rank} is above {MAX_RANK}", path=path)
    if bits != 32 or code != 0:
        raise NNBuildError(f"tensor of item type {code} with {bits} bits is not supported "
                           "(32-bit float only)", path=path)
    dims = tuple(int(e) for e in extents[:rank])
    count = 1
    for d in dims:
        count *= d
    if count > MAX_ELEMENTS:
        raise NNBuildError(f"tensor of shape {list(dims)} has {count:,} elements, above the limit of "
                           f"{MAX_ELEMENTS:,} per tensor (limits.MAX_TENSOR_ELEMENTS)", path=path)
    if length != count * 4:
        raise NNBuildError(f"tensor data length {length} does not match shape {list(dims)} "
                           f"(expected {count * 4})", path=path)
    if shape is not None and tuple(shape) != dims:
        raise NNBuildError(f"tensor shape {list(dims)} differs from the declared {list(shape)}", path=path)
    return dims, length


def parse_dat(data: bytes, path=None, shape=None) -> np.ndarray:
    if len(data) < DAT_HEADER:
        raise NNBuildError(f"truncated tensor file ({len(data)} bytes, the header alone is {DAT_HEADER})",
                           path=path)
    dims, length = _dat_header(data, path, shape)
    if len(data) != DAT_HEADER + length:
        raise NNBuildError(f"tensor file is {len(data)} bytes, expected {DAT_HEADER + length} "
                           "(truncated or trailing data)", path=path)
    array = np.frombuffer(data, dtype="<f4", count=length // 4, offset=DAT_HEADER).astype(np.float32)
    if not np.all(np.isfinite(array)):
        raise NNBuildError("tensor holds NaN or infinite values", path=path)
    return array.reshape(dims)


def dat_bytes(array) -> bytes:
    """The NNEF 1.0 .dat encoding of a float32 array (tests, tools)."""
    array = np.ascontiguousarray(array, dtype="<f4")
    if array.ndim > MAX_RANK:
        raise ValueError("rank above 8")
    extents = list(array.shape) + [0] * (MAX_RANK - array.ndim)
    header = DAT_MAGIC + bytes((1, 0)) + struct.pack("<II8III", array.nbytes, array.ndim, *extents, 32, 0)
    header += bytes(DAT_HEADER - len(header))
    return header + array.tobytes()


# --------------------------------------------------------------------------------- file layout

def _folder_and_graph(path) -> Tuple[Path, Path]:
    """(the model folder, the document): a folder holds graph.nnef, a file is the document itself."""
    path = Path(path)
    if path.is_dir():
        return path, path / GRAPH_FILE
    return path.parent, path


def _dat_path(folder: Path, label, where="") -> Path:
    """`<label>.dat` inside `folder`; a label that could leave it is refused."""
    if not isinstance(label, str) or not label:
        raise NNBuildError(f"{where}variable label must be a non-empty string", path=folder)
    parts = PurePosixPath(label).parts
    if (label.startswith(("/", "\\")) or "\\" in label or ":" in label or "\0" in label
            or any(p in ("..", ".", "") for p in parts) or len(label) > 255):
        raise NNBuildError(f"{where}variable label {label!r} is not a plain path inside the model folder",
                           path=folder)
    candidate = folder.joinpath(*parts).with_name(parts[-1] + ".dat")
    try:
        inside = candidate.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        raise NNBuildError(f"{where}variable label {label!r} resolves outside the model folder", path=folder)
    return candidate


def read_parsed(path: Path, parse_text, what: str, short: str = ""):
    """`parse_text` of the UTF-8 text of the file `path` (`what`, at most MAX_GRAPH_BYTES): a larger
    file, one that is not UTF-8 or not NNEF syntax is refused in one line naming it (`short`: how the
    encoding error names it, `what` by default)."""
    data = read_capped(path, MAX_GRAPH_BYTES, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NNBuildError(f"{short or what} is not UTF-8 text (byte {exc.start})", path=path) from None
    try:
        return parse_text(text)
    except ParseError as exc:
        raise NNBuildError(f"syntax error at {exc}", path=path) from None


def _read_graph(graph_path: Path) -> Graph:
    return read_parsed(graph_path, parse, "graph file")


def dat_files(folder: Path, labels) -> List[str]:
    """The `.dat` file of each variable label that names one inside `folder`, in the order given
    (loading the model says what is wrong with any other label): what a build re-runs on."""
    deps = []
    for label in labels:
        try:
            deps.append(str(_dat_path(folder, label)))
        except NNBuildError:
            pass
    return deps


def document_dependencies(path, read, labels_of) -> List[str]:
    """The document of `path` (a folder: its graph.nnef) and the `.dat` of each variable label
    labels_of(read(document)) names: what a build re-runs on (only the document when it cannot be
    read: loading it says why)."""
    folder, doc_path = _folder_and_graph(path)
    try:
        document = read(doc_path)
    except NNBuildError:
        return [str(doc_path)]
    return [str(doc_path)] + dat_files(folder, labels_of(document))


def implicit_dependencies(path) -> List[str]:
    """graph.nnef and every variable's .dat (what a build must re-run on)."""
    return document_dependencies(path, _read_graph, lambda graph: [st.kwargs.get("label") for st in graph.statements
                                                                   if st.op == "variable"])


def load(path):
    """The IR model of an NNEF folder (or of its graph.nnef)."""
    folder, graph_path = _folder_and_graph(path)
    proto = to_onnx(folder, graph_path)
    from nnbuild.frontends import onnx_graph
    stem = folder.stem
    return onnx_graph.convert(proto, graph_path, names.c_identifier(stem))


# ---------------------------------------------------------------------------- NNEF -> ONNX

class _Refuse(Exception):
    pass


_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
          "sqrt": "Sqrt", "abs": "Abs", "neg": "Neg", "copy": "Identity", "floor": "Floor",
          "ceil": "Ceil", "sign": "Sign", "rcp": "Reciprocal", "softplus": "Softplus"}
#: NNEF reductions keep the reduced axes (extent 1), as ONNX keepdims=1 does
_REDUCE = {"sum_reduce": "ReduceSum", "mean_reduce": "ReduceMean", "max_reduce": "ReduceMax",
           "min_reduce": "ReduceMin"}
#: NNEF pad borders -> ONNX Pad modes ('reflect-even' repeats the edge cell; ONNX has no such mode)
_PAD_MODES = {"constant": "constant", "replicate": "edge", "reflect": "reflect"}
#: multilinear_upsample methods -> ONNX Resize coordinate modes (border 'replicate' is ONNX's edge clamp)
_LINEAR_METHODS = {"symmetric": "half_pixel", "asymmetric": "asymmetric", "aligned": "align_corners"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min",
           "pow": "Pow"}

#: ONNX operations whose output has the shape of their first input, or the broadcast of all inputs
_SAME_SHAPE = frozenset(list(_UNARY.values()) + ["Elu", "LeakyRelu", "Softmax", "LRN", "BatchNormalization", "Clip"])
_BROADCAST = frozenset(_BINARY.values())

#: NNEF 1.0 border values (conv, pools, box, pad, multilinear_upsample) and upsampling methods
BORDERS = ("ignore", "constant", "replicate", "reflect", "reflect-even")
METHODS = ("symmetric", "asymmetric", "aligned")
_POOL_PARAMS = ("input", "size", "border", "padding", "stride", "dilation")
#: the parameters, in the spec's order, of every operation with a string or logical attribute
SIGNATURES = {
    "conv": ("input", "filter", "bias", "border", "padding", "stride", "dilation", "groups"),
    "max_pool": _POOL_PARAMS, "avg_pool": _POOL_PARAMS, "box": _POOL_PARAMS + ("normalize",),
    "pad": ("input", "padding", "border", "value"),
    "multilinear_upsample": ("input", "factor", "method", "border"),
    "variable": ("shape", "label"), "matmul": ("A", "B", "transposeA", "transposeB"),
    "sum_reduce": ("input", "axes", "normalize"),
}
#: (operation, parameter) -> the strings NNEF allows there (None: any, checked where it is used)
STRING_PARAMS = {("conv", "border"): BORDERS, ("max_pool", "border"): BORDERS, ("avg_pool", "border"): BORDERS,
                 ("box", "border"): BORDERS, ("pad", "border"): ("constant", "replicate", "reflect", "reflect-even"),
                 ("multilinear_upsample", "method"): METHODS, ("multilinear_upsample", "border"): BORDERS,
                 ("variable", "label"): None}
LOGICAL_PARAMS = {("box", "normalize"), ("matmul", "transposeA"), ("matmul", "transposeB"),
                  ("sum_reduce", "normalize")}
#: largest integer attribute (extents, strides, paddings, axes): a C int on every target
MAX_INT_ATTRIBUTE = (1 << 31) - 1


def _strings_and_logicals(value):
    """(strings, logicals, out-of-range integers) anywhere in an argument value."""
    if isinstance(value, bool):
        return [], [value], []
    if isinstance(value, str):
        return [value], [], []
    if isinstance(value, int):
        return [], [], ([value] if abs(value) > MAX_INT_ATTRIBUTE else [])
    found = ([], [], [])
    if isinstance(value, (list, tuple)):
        for v in value:
            for acc, more in zip(found, _strings_and_logicals(v)):
                acc.extend(more)
    return found


def check_attributes(st: "Statement"):
    """Every string, logical and integer argument of `st` against what NNEF allows: a string only
    where the spec has a string parameter, from its enumeration; a logical only where it has a
    logical one, and itself a plain true/false; integers within MAX_INT_ATTRIBUTE."""
    signature = SIGNATURES.get(st.op, ())
    named = [(signature[i] if i < len(signature) else f"argument {i + 1}", v) for i, v in enumerate(st.args)]
    for key, value in named + list(st.kwargs.items()):
        strings, logicals, big = _strings_and_logicals(value)
        if big:
            raise _Refuse(f"'{key}' holds {big[0]}, beyond the integer limit {MAX_INT_ATTRIBUTE}")
        if strings:
            if (st.op, key) not in STRING_PARAMS or not isinstance(value, str):
                raise _Refuse(f"'{key}' takes no string ({strings[0][:40]!r} given)")
            allowed = STRING_PARAMS[(st.op, key)]
            if allowed is not None and value not in allowed:
                raise _Refuse(f"{key} {value[:40]!r} is not an NNEF {key} ({', '.join(allowed)})")
        if (st.op, key) in LOGICAL_PARAMS and not isinstance(value, bool):
            raise _Refuse(f"'{key}' must be true or false")
        if logicals and (st.op, key) not in LOGICAL_PARAMS:
            raise _Refuse(f"'{key}' takes no logical value (true/false given)")


def to_onnx(folder, graph_path=None):
    """The onnx.ModelProto of the NNEF model in `folder` (weights read from its .dat files)."""
    folder = Path(folder)
    graph_path = Path(graph_path) if graph_path else folder / GRAPH_FILE
    graph = _read_graph(graph_path)
    return _Translator(graph, folder, graph_path).run()


class _Translator:
    def __init__(self, graph: Graph, folder: Path, graph_path: Path):
        from onnx import helper, TensorProto, numpy_helper
        self.h, self.tp, self.nh = helper, TensorProto, numpy_helper
        self.graph, self.folder, self.path = graph, folder, graph_path
        self.nodes, self.inits, self.inputs = [], {}, []
        self.shapes: Dict[str, Tuple[int, ...]] = {}   # known shapes (externals, variables, inferred)
        self.defined = set()
        self.counter = 0
        self.total = {"constant": 0, "tensor": 0}   # elements so far, by kind (count_elements)

    # ---- helpers
    def fresh(self, base):
        self.counter += 1
        name = f"{base}__nnef{self.counter}"
        return name

    def const(self, value, base="const", dtype=np.float32):
        name = self.fresh(base)
        array = np.asarray(value, dtype=dtype)
        self.inits[name] = array
        self.shapes[name] = array.shape
        return name

    def node(self, op, inputs, outputs, **attrs):
        self.nodes.append(self.h.make_node(op, inputs, outputs, name=outputs[0], **attrs))
        known = [self.shapes.get(i) for i in inputs]
        if outputs[0] in self.shapes or not known or known[0] is None:
            return
        if op in _SAME_SHAPE:   # shapes followed here: no ONNX shape inference per statement (quadratic)
            self.shapes[outputs[0]] = tuple(known[0])
        elif op in _BROADCAST and all(k is not None for k in known):
            try:
                self.shapes[outputs[0]] = tuple(int(d) for d in np.broadcast_shapes(*known))
            except ValueError:
                pass   # ONNX shape inference names the mismatch

    def tensor(self, value, what="input"):
        """An ONNX tensor name for an NNEF argument (a tensor or a scalar literal)."""
        if isinstance(value, Ref):
            if value.name not in self.defined:
                raise _Refuse(f"{what} '{value.name}' is used before it is defined")
            return value.name
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Refuse(f"{what} must be a tensor or a number")
        return self.const(self.number(value, what))

    def shape(self, name) -> Tuple[int, ...]:
        if name not in self.shapes:
            self._infer()
        if name not in self.shapes:
            raise _Refuse(f"the shape of '{name}' cannot be inferred")
        return self.shapes[name]

    def _infer(self):
        import onnx
        model = self._model(outputs=[])
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # noqa: BLE001
            raise _Refuse(f"shape inference failed ({' '.join(str(exc).split())[:160]})") from None
        for info in inferred.graph.value_info:
            dims = info.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims) and info.type.tensor_type.HasField("shape"):
                self.shapes[info.name] = tuple(d.dim_value for d in dims)

    def vector(self, value, what):
        """A [1, C] (or [C]) parameter as a 1-D tensor."""
        name = self.tensor(value, what)
        if name in self.inits:
            flat = self.const(self.inits[name].reshape(-1), base=name)
            return flat
        out = self.fresh(name)
        self.node("Reshape", [name, self.const([-1], dtype=np.int64)], [out])
        return out

    def trailing(self, a, b):
        """NNEF broadcasting pads the lower rank with trailing singleton dims; ONNX pads leading."""
        ra, rb = len(self.shape(a)), len(self.shape(b))
        if ra == rb:
            return a, b

        def pad(name, rank, target):
            if name in self.inits:
                return self.const(self.inits[name].reshape(self.inits[name].shape + (1,) * (target - rank)),
                                  base=name)
            out = self.fresh(name)
            self.node("Unsqueeze", [name, self.const(list(range(rank, target)), dtype=np.int64)], [out])
            return out
        if len(self.shape(a)) < rb:
            return pad(a, ra, rb), b
        return a, pad(b, rb, ra)

    @staticmethod
    def number(value, what):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not abs(value) <= float(np.finfo(np.float32).max)):
            raise _Refuse(f"'{what}' must be a number float32 can hold")
        return float(value)

    @staticmethod
    def ints(value, what, length=None):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                  for v in value):
            raise _Refuse(f"'{what}' must be a list of integers")
        if length is not None and value and len(value) != length:
            raise _Refuse(f"'{what}' must have {length} items, not {len(value)}")
        return value

    @staticmethod
    def positive(values, what):
        if any(v < 1 for v in values):
            raise _Refuse(f"'{what}' {values} must be positive integers")

    def pads(self, value, spatial, what="padding"):
        """NNEF [(b, e), ...] -> ONNX pads [b..., e...]; [] -> None (automatic: SAME_UPPER)."""
        if not isinstance(value, list):
            raise _Refuse(f"'{what}' must be a list of (begin, end) pairs")
        if not value:
            return None
        if len(value) != spatial or not all(isinstance(p, tuple) and len(p) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in p) for p in value):
            raise _Refuse(f"'{what}' must be {spatial} (begin, end) pairs of non-negative integers")
        return [p[0] for p in value] + [p[1] for p in value]

    def declared_elements(self):
        """Every external/variable/constant shape counted against the limits before any is read."""
        for st in self.graph.statements:
            if st.op not in ("external", "variable", "constant"):
                continue
            shape = st.args[0] if st.args else st.kwargs.get("shape")
            if isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                               for d in shape):
                try:
                    self.count_elements(shape, add="tensor" if st.op == "external" else "constant")
                except _Refuse as exc:
                    raise NNBuildError(f"line {st.line}:{st.column}: {st.op}: {exc}", path=self.path) from None

    # ---- driver
    def run(self):
        graph = self.graph
        self.declared_elements()
        for st in graph.statements:
            try:
                self.statement(st)
            except _Refuse as exc:
                raise NNBuildError(f"line {st.line}:{st.column}: {st.op}: {exc}", path=self.path) from None
        for name in graph.inputs:
            if name not in {i.name for i in self.inputs}:
                raise NNBuildError(f"graph input '{name}' is not defined by an external", path=self.path)
        for name in graph.outputs:
            if name not in self.defined:
                raise NNBuildError(f"graph output '{name}' is never computed", path=self.path)
        missing = [name for name in graph.outputs if name not in self.shapes]
        if missing or any(name not in self.shapes for name in self.defined):
            try:
                self._infer()
            except _Refuse as exc:
                raise NNBuildError(str(exc), path=self.path) from None
        self.check_computed()
        return self._model(graph.outputs)

    def _model(self, outputs):
        h = self.h
        used = {i for node in self.nodes for i in node.input} | set(outputs)
        inits = [self.nh.from_array(array, name) for name, array in self.inits.items()
                 if name in used or not outputs]
        outs = [h.make_tensor_value_info(name, self.tp.FLOAT, self.shapes.get(name)) for name in outputs]
        g = h.make_graph(self.nodes, names.c_identifier(self.graph.name), self.inputs, outs, inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], producer_name="nnbuild-nnef")

    def statement(self, st: Statement):
        op = st.op
        if len(st.outputs) != 1:
            raise _Refuse(f"{len(st.outputs)} results (a tuple result is not supported for this op)")
        out = st.outputs[0]
        if out in self.defined:
            raise _Refuse(f"'{out}' is assigned twice")
        args, kw = st.args, st.kwargs
        check_attributes(st)

        def arg(i, key, default=None, required=True):
            if i < len(args):
                if key in kw:
                    raise _Refuse(f"'{key}' given twice")
                return args[i]
            if key in kw:
                return kw[key]
            if required and default is None:
                raise _Refuse(f"missing argument '{key}'")
            return default

        if op in ("external", "variable", "constant"):
            self.source(st, arg)
        elif op in _UNARY:
            self.node(_UNARY[op], [self.tensor(arg(0, "x"))], [out])
        elif op in _BINARY:
            a, b = self.tensor(arg(0, "x")), self.tensor(arg(1, "y"))
            a, b = self.trailing(a, b)
            self.node(_BINARY[op], [a, b], [out])
        elif op == "elu":
            self.node("Elu", [self.tensor(arg(0, "x"))], [out], alpha=self.number(arg(1, "alpha", 1.0), "alpha"))
        elif op == "leaky_relu":
            self.node("LeakyRelu", [self.tensor(arg(0, "x"))], [out], alpha=self.number(arg(1, "alpha"), "alpha"))
        elif op == "clamp":
            x, a, b = arg(0, "x"), arg(1, "a"), arg(2, "b")
            if not isinstance(a, Ref) and not isinstance(b, Ref):
                self.node("Clip", [self.tensor(x), self.tensor(a), self.tensor(b)], [out])
            else:
                low = self.fresh(out)
                xa, aa = self.trailing(self.tensor(x), self.tensor(a))
                self.node("Max", [xa, aa], [low])
                lb, bb = self.trailing(low, self.tensor(b))
                self.node("Min", [lb, bb], [out])
        elif op == "softmax":
            x = self.tensor(arg(0, "x"))
            axes = self.axes(arg(1, "axes", [1]), len(self.shape(x)))
            if len(axes) != 1:
                raise _Refuse("softmax over several axes is not supported")
            self.node("Softmax", [x], [out], axis=axes[0])
        elif op == "conv":
            self.conv(st, arg, out)
        elif op in ("max_pool", "avg_pool", "box"):
            self.pool(st, arg, out)
        elif op == "linear":
            x, w = self.tensor(arg(0, "input")), self.tensor(arg(1, "filter"))
            bias = arg(2, "bias", 0.0)
            inputs = [x, w]
            if isinstance(bias, Ref) or self.number(bias, "bias") != 0.0:
                inputs.append(self.vector(bias, "bias"))
            self.node("Gemm", inputs, [out], transB=1)
        elif op == "matmul":
            a, b = self.tensor(arg(0, "A")), self.tensor(arg(1, "B"))
            ta, tb = arg(2, "transposeA", False), arg(3, "transposeB", False)
            a = self.swap_last(a) if ta else a
            b = self.swap_last(b) if tb else b
            self.node("MatMul", [a, b], [out])
        elif op == "reshape":
            self.reshape(st, arg, out)
        elif op == "transpose":
            x = self.tensor(arg(0, "input"))
            axes = self.ints(arg(1, "axes"), "axes")
            rank = len(self.shape(x))
            if len(axes) > rank or sorted(axes) != list(range(len(axes))):
                raise _Refuse(f"axes {axes} is not a permutation")
            self.node("Transpose", [x], [out], perm=axes + list(range(len(axes), rank)))
        elif op in ("squeeze", "unsqueeze"):
            x = self.tensor(arg(0, "input"))
            axes = self.ints(arg(1, "axes"), "axes")
            self.node(op.capitalize(), [x, self.const(axes, dtype=np.int64)], [out])
        elif op == "concat":
            values = arg(0, "values")
            if not isinstance(values, list) or not values:
                raise _Refuse("'values' must be a non-empty list of tensors")
            axis = arg(1, "axis")
            inputs = [self.tensor(v) for v in values]
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise _Refuse("'axis' must be an integer")
            self.axes([axis], len(self.shape(inputs[0])), "axis")
            self.node("Concat", inputs, [out], axis=axis)
        elif op == "pad":
            self.pad(arg, out)
        elif op == "slice":
            self.slice(arg, out)
        elif op == "tile":
            x = self.tensor(arg(0, "input"))
            repeats = self.ints(arg(1, "repeats"), "repeats", len(self.shape(x)))
            if len(repeats) != len(self.shape(x)) or any(r < 1 for r in repeats):
                raise _Refuse(f"'repeats' must be {len(self.shape(x))} positive integers")
            self.node("Tile", [x, self.const(repeats, dtype=np.int64)], [out])
        elif op in _REDUCE:
            self.reduce(st, arg, out)
        elif op in ("nearest_upsample", "multilinear_upsample"):
            self.upsample(st, arg, out)
        elif op == "local_response_normalization":
            self.lrn(arg, out)
        elif op == "batch_normalization":
            x = self.tensor(arg(0, "input"))
            mean, var = self.vector(arg(1, "mean"), "mean"), self.vector(arg(2, "variance"), "variance")
            channels = self.shape(mean)[0]
            params = []
            for i, key, default in ((4, "scale", 1.0), (3, "offset", 0.0)):
                value = arg(i, key, default)
                if isinstance(value, Ref):
                    params.append(self.vector(value, key))
                else:
                    params.append(self.const(np.full(channels, self.number(value, key))))
            eps = self.number(arg(5, "epsilon"), "epsilon")
            if eps < 0.0:
                raise _Refuse(f"'epsilon' {eps} is negative")
            self.node("BatchNormalization", [x, params[0], params[1], mean, var], [out], epsilon=eps)
        else:
            raise _Refuse("unsupported NNEF operation")
        self.defined.add(out)

    def source(self, st, arg):
        out = st.outputs[0]
        if st.dtype not in (None, "scalar"):
            raise _Refuse(f"tensor type <{st.dtype}> is not supported (scalar only)")
        shape = self.ints(arg(0, "shape"), "shape")
        if len(shape) > MAX_RANK or any(d <= 0 for d in shape):
            raise _Refuse(f"shape {shape} must have at most {MAX_RANK} positive extents")
        count = self.count_elements(shape)    # added up by declared_elements
        if st.op == "external":
            self.inputs.append(self.h.make_tensor_value_info(out, self.tp.FLOAT, shape))
        elif st.op == "variable":
            label = arg(1, "label")
            self.inits[out] = read_dat(_dat_path(self.folder, label, f"'{out}': "), shape)
        else:
            value = arg(1, "value")
            values = value if isinstance(value, list) else [value]
            values = [self.number(v, "value") for v in values]
            if len(values) == 1:
                array = np.full(shape, float(values[0]), dtype=np.float32)
            elif len(values) == count:
                array = np.asarray(values, dtype=np.float32).reshape(shape)
            else:
                raise _Refuse(f"{len(values)} values for shape {shape}")
            self.inits[out] = array
        self.shapes[out] = tuple(shape)
        self.defined.add(out)

    def count_elements(self, shape, what="shape", add=None):
        """The element count of `shape`, refused (before anything is allocated) above
        limits.MAX_TENSOR_ELEMENTS, and added to the graph's total of its kind: "constant"
        (variables, constants) against limits.MAX_TOTAL_CONSTANT_ELEMENTS, "tensor" (the input,
        every computed tensor) against limits.MAX_TOTAL_TENSOR_ELEMENTS."""
        count = 1
        for d in shape:
            count *= int(d)
        if count > MAX_ELEMENTS:
            raise _Refuse(f"{what} {list(shape)} has {count:,} elements, above the limit of "
                          f"{MAX_ELEMENTS:,} per tensor (limits.MAX_TENSOR_ELEMENTS)")
        if add is None:
            return count
        self.total[add] += count
        limit, name = ((limits.MAX_TOTAL_CONSTANT_ELEMENTS, "MAX_TOTAL_CONSTANT_ELEMENTS") if add == "constant"
                       else (limits.MAX_TOTAL_TENSOR_ELEMENTS, "MAX_TOTAL_TENSOR_ELEMENTS"))
        if self.total[add] > limit:
            raise _Refuse(f"{what} {list(shape)} brings the graph's {add}s to {self.total[add]:,} elements, "
                          f"above the limit of {limit:,} in total (limits.{name})")
        return count

    def check_computed(self):
        """Every computed tensor's inferred shape within the limits, naming its statement (shape
        inference is symbolic: nothing of that size exists yet)."""
        where = {st.outputs[0]: st for st in self.graph.statements if st.outputs}
        for name, shape in list(self.shapes.items()):
            st = where.get(name)
            if name in self.inits or st is None or st.op in ("external", "variable", "constant"):
                continue
            try:
                self.count_elements(shape, f"result '{name}' of shape", "tensor")
            except _Refuse as exc:
                raise NNBuildError(f"line {st.line}:{st.column}: {st.op}: {exc}", path=self.path) from None

    def swap_last(self, name):
        rank = len(self.shape(name))
        if rank < 2:
            raise _Refuse("transposing a tensor of rank below 2")
        out = self.fresh(name)
        self.node("Transpose", [name], [out], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        return out

    def conv(self, st, arg, out):
        x, w = self.tensor(arg(0, "input")), self.tensor(arg(1, "filter"))
        bias = arg(2, "bias", 0.0)
        border = arg(3, "border", "constant")
        wshape = self.shape(w)
        spatial = len(wshape) - 2
        if spatial < 1:
            raise _Refuse(f"filter of shape {list(wshape)} is not [O, I, k...]")
        padding = self.pads(arg(4, "padding", [], required=False), spatial)
        stride = self.ints(arg(5, "stride", [], required=False), "stride", spatial) or [1] * spatial
        dilation = self.ints(arg(6, "dilation", [], required=False), "dilation", spatial) or [1] * spatial
        groups = arg(7, "groups", 1)
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 0:
            raise _Refuse("'groups' must be a non-negative integer")
        if groups == 0:
            groups = self.shape(x)[1]
        if border != "constant" and (padding is None or any(padding)):
            raise _Refuse(f"border '{border}' with non-zero or automatic padding is not supported "
                          "(constant only)")
        self.positive(stride, "stride")
        self.positive(dilation, "dilation")
        attrs = dict(strides=stride, dilations=dilation, group=groups, kernel_shape=list(wshape[2:]))
        if padding is None:
            attrs["auto_pad"] = "SAME_UPPER"
        else:
            attrs["pads"] = padding
        inputs = [x, w]
        if isinstance(bias, Ref) or self.number(bias, "bias") != 0.0:
            if isinstance(bias, Ref):
                inputs.append(self.vector(bias, "bias"))
            else:
                inputs.append(self.const(np.full(wshape[0], self.number(bias, "bias"))))
        self.node("Conv", inputs, [out], **attrs)

    def pool(self, st, arg, out):
        x = self.tensor(arg(0, "input"))
        size = self.ints(arg(1, "size"), "size")
        rank = len(size)
        border = arg(2, "border", "constant")
        padding = self.pads(arg(3, "padding", [], required=False), rank)
        stride = self.ints(arg(4, "stride", [], required=False), "stride", rank) or [1] * rank
        dilation = self.ints(arg(5, "dilation", [], required=False), "dilation", rank) or [1] * rank
        normalize = arg(6, "normalize", False, required=False) if st.op == "box" else st.op == "avg_pool"
        for values, what in ((size, "size"), (stride, "stride"), (dilation, "dilation")):
            self.positive(values, what)
        if rank < 3 or size[:2] != [1, 1] or stride[:2] != [1, 1] or dilation[:2] != [1, 1]:
            raise _Refuse("size/stride/dilation over the batch and channel axes must be 1 (rank >= 3)")
        if padding is not None and (padding[0:2] != [0, 0] or padding[rank:rank + 2] != [0, 0]):
            raise _Refuse("padding over the batch and channel axes is not supported")
        if border not in ("constant", "ignore"):
            raise _Refuse(f"border '{border}' is not supported (constant or ignore)")
        if any(d != 1 for d in dilation) and st.op != "max_pool":
            raise _Refuse("dilated average pooling is not supported")
        padded = padding is None or any(padding)
        attrs = dict(kernel_shape=size[2:], strides=stride[2:])
        if padding is None:
            attrs["auto_pad"] = "SAME_UPPER"
        else:
            attrs["pads"] = padding[2:rank] + padding[rank + 2:]
        if st.op == "max_pool":
            if border == "constant" and padded:
                raise _Refuse("max_pool with border 'constant' over padding is not supported "
                              "(padding values would be 0, ONNX ignores them)")
            if any(d != 1 for d in dilation):
                attrs["dilations"] = dilation[2:]
            self.node("MaxPool", [x], [out], **attrs)
            return
        include = 1 if border == "constant" else 0
        if normalize:
            self.node("AveragePool", [x], [out], count_include_pad=include, **attrs)
            return
        if padded and not include:
            raise _Refuse("an unnormalised box with border 'ignore' over padding is not supported")
        mean = self.fresh(out)
        self.node("AveragePool", [x], [mean], count_include_pad=1, **attrs)
        self.node("Mul", [mean, self.const(float(np.prod(size)))], [out])

    def axes(self, value, rank, what="axes"):
        axes = self.ints(value, what)
        if not axes or len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
            raise _Refuse(f"'{what}' {axes} must name distinct axes of a rank-{rank} tensor")
        return axes

    def pad(self, arg, out):
        x = self.tensor(arg(0, "input"))
        rank = len(self.shape(x))
        padding = self.pads(arg(1, "padding"), rank)
        border = arg(2, "border", "constant")
        if border not in _PAD_MODES:
            raise _Refuse(f"border '{border}' is not supported ({', '.join(_PAD_MODES)})")
        value = self.number(arg(3, "value", 0.0), "value")
        if padding is None:
            raise _Refuse("'padding' must give a (begin, end) pair per axis")
        inputs = [x, self.const(padding, dtype=np.int64)]
        if value != 0.0:
            if border != "constant":
                raise _Refuse(f"a pad value with border '{border}'")
            inputs.append(self.const(value))
        self.node("Pad", inputs, [out], mode=_PAD_MODES[border])

    def slice(self, arg, out):
        """NNEF slice: negative begin/end count from the end, an end of 0 means the axis' extent."""
        x = self.tensor(arg(0, "input"))
        shape = self.shape(x)
        axes = self.axes(arg(1, "axes"), len(shape))
        begin = self.ints(arg(2, "begin"), "begin", len(axes))
        end = self.ints(arg(3, "end"), "end", len(axes))
        stride = self.ints(arg(4, "stride", [], required=False), "stride", len(axes)) or [1] * len(axes)
        if not len(begin) == len(end) == len(axes) or any(s < 1 for s in stride):
            raise _Refuse("'begin', 'end' and 'stride' (positive) must have one item per axis")
        end = [shape[a] if e == 0 else e for a, e in zip(axes, end)]
        self.node("Slice", [x, self.const(begin, dtype=np.int64), self.const(end, dtype=np.int64),
                            self.const(axes, dtype=np.int64), self.const(stride, dtype=np.int64)], [out])

    def reduce(self, st, arg, out):
        x = self.tensor(arg(0, "input"))
        axes = self.axes(arg(1, "axes"), len(self.shape(x)))
        onnx_op = _REDUCE[st.op]
        if st.op == "sum_reduce" and arg(2, "normalize", False, required=False) is True:
            onnx_op = "ReduceMean"
        if onnx_op == "ReduceSum":  # opset 13: axes is an input for ReduceSum only
            self.node(onnx_op, [x, self.const(axes, dtype=np.int64)], [out], keepdims=1)
        else:
            self.node(onnx_op, [x], [out], axes=axes, keepdims=1)

    def upsample(self, st, arg, out):
        x = self.tensor(arg(0, "input"))
        rank = len(self.shape(x))
        factor = self.ints(arg(1, "factor"), "factor", rank - 2)
        if len(factor) != rank - 2 or any(f < 1 for f in factor):
            raise _Refuse(f"'factor' must be {rank - 2} positive integers")
        scales = self.const([1.0, 1.0] + [float(f) for f in factor])
        if st.op == "nearest_upsample":  # each cell repeated factor times: floor(out / factor)
            self.node("Resize", [x, "", scales], [out], mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            return
        method, border = arg(2, "method", "symmetric"), arg(3, "border", "replicate")
        if method not in _LINEAR_METHODS:
            raise _Refuse(f"method '{method}' is not supported ({', '.join(_LINEAR_METHODS)})")
        if border != "replicate" and method != "aligned":   # aligned reads no cell beyond the edge
            raise _Refuse(f"border '{border}' is not supported (replicate)")
        self.node("Resize", [x, "", scales], [out], mode="linear",
                  coordinate_transformation_mode=_LINEAR_METHODS[method])

    def lrn(self, arg, out):
        """Across channels only (ONNX LRN): size [1, n, 1, ...]; NNEF's normalised box is alpha / n."""
        x = self.tensor(arg(0, "input"))
        rank = len(self.shape(x))
        size = self.ints(arg(1, "size"), "size", rank)
        if len(size) != rank or size[0] != 1 or size[1] < 1 or any(s != 1 for s in size[2:]):
            raise _Refuse(f"size {size} is not [1, n, 1, ...] (normalisation across channels only)")
        alpha = self.number(arg(2, "alpha", 1.0), "alpha")
        beta = self.number(arg(3, "beta", 0.5), "beta")
        bias = self.number(arg(4, "bias", 1.0), "bias")
        if alpha < 0.0 or bias <= 0.0:
            raise _Refuse(f"alpha {alpha} must be non-negative and bias {bias} positive "
                          "(else the normaliser's base can be negative: NaN)")
        self.node("LRN", [x], [out], size=size[1], alpha=alpha, beta=beta, bias=bias)

    def reshape(self, st, arg, out):
        x = self.tensor(arg(0, "input"))
        shape = self.ints(arg(1, "shape"), "shape")
        start = arg(2, "axis_start", 0, required=False)
        count = arg(3, "axis_count", -1, required=False)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, count)):
            raise _Refuse("'axis_start'/'axis_count' must be integers")
        if sum(1 for d in shape if d == -1) > 1 or any(d < -1 for d in shape):
            raise _Refuse(f"shape {shape} is not valid")
        if start != 0 or count != -1:
            full = list(self.shape(x))
            if start < 0 or start > len(full):
                raise _Refuse(f"axis_start {start} is out of range")
            end = len(full) if count == -1 else start + count
            if count < -1 or end > len(full):
                raise _Refuse(f"axis_count {count} is out of range")
            middle = [full[start + i] if d == 0 else d for i, d in enumerate(shape)]
            shape = full[:start] + middle + full[end:]
        self.node("Reshape", [x, self.const(shape, dtype=np.int64)], [out])
