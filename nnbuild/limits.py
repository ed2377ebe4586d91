"""What an input file may cost: every limit a reader checks before it reads or allocates, in one place,
so the manual can state them and an error can name the one it hit.

Model and data files are untrusted (they come from a training team, a supplier or a download): a
small file must not make the build host read gigabytes, allocate gigabytes or recurse without end.
Each reader checks the declared sizes (HDF5 dataset headers, .npy headers, NNet layer sizes, JSON
nesting) against these limits first, and refuses in one line naming the file and the limit.

Base layer: imports nothing.
"""

#: elements of one weight or data tensor (2^24: 64 MB of float32, beyond any target's memory)
MAX_TENSOR_ELEMENTS = 2 ** 24
#: bytes of one tensor as stored in the file (float64 at most)
MAX_TENSOR_BYTES = MAX_TENSOR_ELEMENTS * 8
#: elements of all the weights read from one model file together
MAX_MODEL_ELEMENTS = 2 ** 25
#: bytes of all the weights read from one model file together (as stored)
MAX_MODEL_BYTES = MAX_MODEL_ELEMENTS * 8
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
