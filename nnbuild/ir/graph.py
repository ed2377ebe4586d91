"""The model graph every front-end produces and every generator consumes.

Layers are plain frozen dataclasses in execution order (a chain). Each carries the name and type it
had in the source model so generated code can be traced back to it. Weights keep the dtype of the
file (float32 for Keras) so the reference executor can run at float32 or float64.
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

#: Element-wise activations with exactly defined semantics (see nnbuild.ir.semantics).
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")


@dataclass(frozen=True)
class Dense:
    """y = act(x @ kernel + bias); kernel is [inputs, units] (Keras layout)."""

    name: str
    kernel: np.ndarray
    bias: Optional[np.ndarray]
    activation: str = "linear"
    source_type: str = "Dense"

    kind = "dense"

    @property
    def units(self) -> int:
        return int(self.kernel.shape[1])

    @property
    def inputs(self) -> int:
        return int(self.kernel.shape[0])

    def output_shape(self, input_shape: Tuple[int, ...]) -> Tuple[int, ...]:
        return (self.units,)


@dataclass(frozen=True)
class Activation:
    """y = act(x), element-wise (softmax over the last axis)."""

    name: str
    activation: str
    source_type: str = "Activation"

    kind = "activation"

    def output_shape(self, input_shape: Tuple[int, ...]) -> Tuple[int, ...]:
        return tuple(input_shape)


@dataclass
class Model:
    """A loaded model: a chain of layers from one input tensor to one output tensor."""

    name: str
    input_shape: Tuple[int, ...]
    layers: list
    source_files: Tuple[str, ...] = ()
    #: Facts about the source (format, keras_version, ignored layers) for traceability.
    meta: dict = field(default_factory=dict)

    def shapes(self):
        """The tensor shape after each layer, input first."""
        shapes = [tuple(self.input_shape)]
        for layer in self.layers:
            shapes.append(tuple(layer.output_shape(shapes[-1])))
        return shapes

    @property
    def output_shape(self) -> Tuple[int, ...]:
        return self.shapes()[-1]

    @property
    def input_size(self) -> int:
        return int(np.prod(self.input_shape))

    @property
    def output_size(self) -> int:
        return int(np.prod(self.output_shape))
