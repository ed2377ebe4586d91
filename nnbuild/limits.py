"""Every bound nnbuild puts on the cost of reading untrusted input, in one place.

Model, data and environment files come from outside the build (a training team, a supplier, a
download). A small file can declare huge tensors, expand a constant into gigabytes or chain
thousands of layers; each reader and pass checks these limits *before* it allocates or loops, and
refuses in one line naming the file, the node or layer, and the limit by the name it has here.

Keep this a flat list of named constants with a comment each (no logic, no imports): readers of
other formats add theirs here. The manual states them (docs: "Limits").
"""

#: Largest model file read (bytes): checked on the file size before the parser sees it.
MAX_MODEL_FILE_BYTES = 256 * 1024 * 1024

#: Largest tensor (elements), activation or constant: 2^22 is 16 MB of float32, beyond the memory of
#: every board nnbuild targets; the reference and the code generator hold per-element index maps of
#: every tensor, so a bigger one costs gigabytes on the build host before any target check.
MAX_TENSOR_ELEMENTS = 2 ** 22

#: Largest sum of elements over a model's constants (initializers, folded constants, weights).
MAX_TOTAL_CONSTANT_ELEMENTS = 2 ** 25

#: Largest sum of elements over a model's computed tensors (every layer's output).
MAX_TOTAL_TENSOR_ELEMENTS = 2 ** 25

#: Most nodes in a source graph (an ONNX graph's nodes, before unused ones are dropped).
MAX_NODES = 10_000

#: Most layers in an IR model (the front-ends may add layout layers; the passes refuse more).
MAX_LAYERS = 20_000
