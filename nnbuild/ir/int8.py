"""A full-integer (int8) quantized model as the int8 precision reads it: the graph of tensors and
operators with every tensor's quantization (scales, zero points, per-channel axis) and constants
(int8 weights, int32 biases), kept as the converter wrote them, so the generated C and the bit-exact
model (nnbuild.numerics.tflm_int8) compute from the same numbers. The front-end (TFLite) builds
it and checks it; the stages after it never reinterpret a quantization."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

import numpy as np

from nnbuild.ir.graph import argument_name

#: what nnbuild.kinds and nnbuild.codegen call this model kind
KIND = "int8"


@dataclass
class QuantizedModel:
    """`graph`: tensors (index, name, type_name, shape with the batch axis first, data, quantization)
    and operators (index, op, inputs, outputs, options) in execution order, its inputs and outputs;
    `ops`: the operators that compute, each with its resolved sample shapes (see the front-end)."""

    name: str
    graph: object
    ops: Tuple[dict, ...]
    source_files: Tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
    kind: str = KIND
    #: no float layers: the traceability report lists `ops` instead
    layers: tuple = ()

    def _tensor(self, index):
        return self.graph.tensors[index]

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return tuple(self._tensor(self.graph.inputs[0]).shape[1:])

    @property
    def output_shape(self) -> Tuple[int, ...]:
        return tuple(self._tensor(self.graph.outputs[0]).shape[1:])

    @property
    def input_size(self) -> int:
        """Values of all the inputs together."""
        return sum(int(np.prod(self._tensor(i).shape[1:])) for i in self.graph.inputs)

    @property
    def output_size(self) -> int:
        """Values of all the outputs together."""
        return sum(int(np.prod(self._tensor(o).shape[1:])) for o in self.graph.outputs)

    @property
    def several_io(self) -> bool:
        """True for a model of several inputs or several outputs (its C API takes each)."""
        return len(self.graph.inputs) > 1 or len(self.graph.outputs) > 1

    def arguments(self):
        """The C function's arguments of a model of several inputs or outputs, in order (every input,
        then every output, in the model's order), as nnbuild.ir.graph.Model.arguments gives them,
        with each one's "scale" and "zero_point"."""
        out, taken = [], set()
        for role, tensors in (("in", self.graph.inputs), ("out", self.graph.outputs)):
            offset = 0
            for index in tensors:
                t = self._tensor(index)
                shape = tuple(int(d) for d in t.shape[1:])
                size = int(np.prod(shape))
                out.append({"role": role, "tensor": index, "label": t.name, "name": argument_name(role, t.name, taken),
                            "shape": shape, "size": size, "offset": offset,
                            "scale": float(t.quantization.scales[0]), "zero_point": int(t.quantization.zero_points[0])})
                offset += size
        return out

    def io_quantization(self, which):
        """(scale, zero point) of the model's "input" or "output" tensor."""
        index = self.graph.inputs[0] if which == "input" else self.graph.outputs[0]
        q = self._tensor(index).quantization
        return float(q.scales[0]), int(q.zero_points[0])
