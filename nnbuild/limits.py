"""Every bound nnbuild puts on the cost of reading untrusted input, in one place, so the manual can
state them and an error can name the one it hit.

Model, data and environment files come from outside the build (a training team, a supplier, a
download): a small file must not make the build host read gigabytes, allocate gigabytes, expand a
constant into gigabytes, chain thousands of layers or recurse without end. Each reader and pass
checks the declared sizes (HDF5 dataset headers, .npy headers, NNet layer sizes, ONNX dims, JSON
nesting) against these limits *before* it reads, allocates or loops, and refuses in one line naming
the file, the node or layer, and the limit by the name it has here.

Keep this a flat list of named constants with a comment each (no logic, no imports: base layer);
readers of other formats add theirs here. docs/security.md states them.
"""

#: Largest model file read (bytes): checked on the file size before the parser sees it.
MAX_MODEL_FILE_BYTES = 256 * 1024 * 1024

#: Largest tensor (elements), activation, constant or weight: 2^22 is 16 MB of float32, beyond the
#: memory of every board nnbuild targets; the reference and the code generator hold per-element index
#: maps of every tensor, so a bigger one costs gigabytes on the build host before any target check.
MAX_TENSOR_ELEMENTS = 2 ** 22
#: bytes of one tensor as stored in the file (float64 at most)
MAX_TENSOR_BYTES = MAX_TENSOR_ELEMENTS * 8

#: Largest sum of elements over a model's constants (initializers, folded constants, weights).
MAX_TOTAL_CONSTANT_ELEMENTS = 2 ** 25
#: Largest sum of elements over a model's computed tensors (every layer's output).
MAX_TOTAL_TENSOR_ELEMENTS = 2 ** 25
#: elements of all the weights read from one model file together
MAX_MODEL_ELEMENTS = MAX_TOTAL_CONSTANT_ELEMENTS
#: bytes of all the weights read from one model file together (as stored)
MAX_MODEL_BYTES = MAX_MODEL_ELEMENTS * 8

#: Most nodes in a source graph (an ONNX graph's nodes, before unused ones are dropped; a TFLite
#: subgraph's operators).
MAX_NODES = 10_000
#: Most tensors, buffers or operator codes a TFLite file declares (each vector's count is also checked
#: against what the file's size can hold).
MAX_TFLITE_ENTRIES = 100_000
#: Largest rank of a tensor a TFLite file declares (TFLite's kernels take at most 6).
MAX_TENSOR_RANK = 8
#: Most inputs and outputs of a model together: each is one argument of the generated C function, and
#: C99 (5.2.4.1) guarantees 127 parameters in a function definition.
MAX_MODEL_IO = 127
#: Most layers in an IR model (the front-ends may add layout layers; the passes refuse more).
MAX_LAYERS = 20_000

#: size of an HDF5 file opened (.h5, Keras2C weights.h5, the weights member of a .keras archive)
MAX_HDF5_BYTES = 512 * 2 ** 20
#: links and objects walked in one HDF5 file (a Keras layer has about ten)
MAX_HDF5_OBJECTS = 100_000
#: bytes of one HDF5 attribute (model_config, weight_names) as declared in its header
MAX_ATTRIBUTE_BYTES = 64 * 2 ** 20
#: size of a JSON file read (model configs, ACETONE JSON with its inline weights, boards, examples)
MAX_JSON_BYTES = 32 * 2 ** 20
#: nesting depth of a JSON document (Keras configs nest about 12 deep)
MAX_JSON_DEPTH = 64
#: size of an NNet text file (the ACAS Xu networks are 167 KB)
MAX_NNET_BYTES = 64 * 2 ** 20
#: neurons of an NNet network, all layers together (two text lines each: weights and bias; ACAS Xu: 305)
MAX_NNET_NEURONS = 2 ** 20
#: size of a check data file (.npz)
MAX_DATA_BYTES = 256 * 2 ** 20
#: elements of all the arrays of a check data file together
MAX_DATA_ELEMENTS = 2 ** 25
