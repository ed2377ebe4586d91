"""A full-integer (int8) quantized model as the int8 precision reads it: the graph of tensors and
operators with every tensor's quantization (scales, zero points, per-channel axis) and constants
(int8 weights, int32 biases), kept as the converter wrote them, so the generated C and the bit-exact
model (nnbuild.numerics.tflm_int8) compute from the same numbers. The front-end (TFLite) builds
it and checks it; the stages after it never reinterpret a quantization."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

import numpy as np

#: what nnbuild.kinds and nnbuild.codegen call this model kind
KIND = "int8"


@dataclass
class QuantizedModel:
    """`graph`: tensors (index, name, type_name, shape with the batch axis first, data, quantization)
    and operators (index, op, inputs, outputs, options) in execution order, one input, one output;
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
        return int(np.prod(self.input_shape))

    @property
    def output_size(self) -> int:
        return int(np.prod(self.output_shape))

    def io_quantization(self, which):
        """(scale, zero point) of the model's "input" or "output" tensor."""
        index = self.graph.inputs[0] if which == "input" else self.graph.outputs[0]
        q = self._tensor(index).quantization
        return float(q.scales[0]), int(q.zero_points[0])
