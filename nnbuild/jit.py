"""Just-in-time Gravity programs: `compile("net.g")` generates the C, builds it with the system C
compiler into a cache folder and loads it with ctypes, so Python trains and runs the very code
that goes on the device.

The cache key is a digest of the generated C, the compiler and its flags: an unchanged model loads
the library already built, a changed one (layers, precision, rate...) is compiled again.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from nnbuild import files, kinds
from nnbuild.codegen import gravity as generator
from nnbuild.errors import NNBuildError
from nnbuild.ir import gravity as ir

FLAGS = ("-std=c99", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-pedantic")


def cache_root():
    """$NNBUILD_JIT_CACHE, else ~/.cache/nnbuild/jit."""
    return Path(os.environ.get("NNBUILD_JIT_CACHE") or Path.home() / ".cache" / "nnbuild" / "jit")


def system_cc():
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc)
    if not found:
        raise NNBuildError(f"the JIT needs a C compiler: '{cc}' is not on PATH (set CC)")
    return found


def build(model, precision=None, cache=None, cc=None):
    """(library path, plan, was it compiled now) for a Gravity model."""
    plan = ir.plan(model, precision)
    sources = generator.render(model, precision=precision)
    code, header = sources[f"{model.name}.c"], sources[f"{model.name}.h"]
    cc = cc or system_cc()
    key = hashlib.sha256("\0".join([code, header, cc, *FLAGS]).encode()).hexdigest()[:24]
    folder = Path(cache or cache_root()) / f"{model.name}-{key}"
    library = folder / f"lib{model.name}.so"
    if library.exists():
        return library, plan, False
    folder.mkdir(parents=True, exist_ok=True)
    files.write_text(folder / f"{model.name}.c", code)
    files.write_text(folder / f"{model.name}.h", header)
    with files.atomic(library) as tmp:
        result = subprocess.run([cc, *FLAGS, "-o", tmp, str(folder / f"{model.name}.c"), "-lm"],
                                capture_output=True, text=True)
        if result.returncode:
            raise NNBuildError(f"{Path(cc).name} failed: {(result.stderr.strip().splitlines() or ['?'])[0]}",
                               path=folder / f"{model.name}.c")
    return library, plan, True


class Program:
    """A compiled Gravity program and its own blob. Inputs and outputs are real numbers (numpy);
    fixed-point programs convert at the boundary (round half up, saturate)."""

    def __init__(self, library, plan, compiled=False, seed=1):
        self.plan, self.model, self.number = plan, plan.model, plan.number
        self.library, self.compiled = Path(library), compiled
        self._lib = ctypes.CDLL(str(library))
        names = generator.api_name
        prefix = self.model.prefix
        self._activate = getattr(self._lib, names(prefix, "activate"))
        self._activate.restype = ctypes.c_void_p
        self._activate.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._train = getattr(self._lib, names(prefix, "train"))
        self._train.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._train.restype = None
        self._initialize = getattr(self._lib, names(prefix, "initialize"))
        self._initialize.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self._initialize.restype = None
        for what in ("memory_size", "memory_hard"):
            getattr(self._lib, names(prefix, what)).restype = ctypes.c_size_t
        self.memory_size = getattr(self._lib, names(prefix, "memory_size"))()
        self.memory_hard = getattr(self._lib, names(prefix, "memory_hard"))()
        self.version = getattr(self._lib, names(prefix, "version"))()
        if self.memory_size != plan.size_bytes:
            raise NNBuildError(f"{library}: memory_size {self.memory_size} != the plan's {plan.size_bytes}")
        #: the blob, as elements of T; the C works on this very buffer
        self.memory = np.zeros(plan.size, dtype=self.number.dtype)
        self.initialize(seed)

    def _ptr(self, array):
        return array.ctypes.data_as(ctypes.c_void_p)

    def to_values(self, real):
        """Real numbers as T (fixed: round half up, saturate)."""
        real = np.asarray(real, dtype=np.float64)
        if not self.number.fixed:
            return np.ascontiguousarray(real, dtype=self.number.dtype)
        q = np.floor(real * 2.0 ** self.number.frac + 0.5)
        return np.ascontiguousarray(np.clip(q, self.number.qmin, self.number.qmax), dtype=self.number.dtype)

    def to_real(self, values):
        values = np.asarray(values, dtype=np.float64)
        return values / 2.0 ** self.number.frac if self.number.fixed else values

    def initialize(self, seed=1):
        self._initialize(self._ptr(self.memory), int(seed) & 0xFFFFFFFF)

    def activate(self, x):
        """Outputs for one input [n_in] or a batch [N, n_in] (float64)."""
        x = self.to_values(x)
        single = x.ndim == 1
        x = x.reshape(-1, self.model.inputs)
        out = np.empty((len(x), self.model.output_size), dtype=np.float64)
        start = self.plan.output_offset
        for k in range(len(x)):
            row = np.ascontiguousarray(x[k])
            self._activate(self._ptr(self.memory), self._ptr(row))
            out[k] = self.to_real(self.memory[start:start + self.model.output_size])
        return out[0] if single else out

    def train(self, x, y):
        """One SGD step per `batch` samples of x [N, n_in], y [N, n_out] (N a multiple of batch)."""
        x = self.to_values(x).reshape(-1, self.model.inputs)
        y = self.to_values(y).reshape(-1, self.model.output_size)
        batch = self.model.batch
        if len(x) != len(y) or len(x) % batch:
            raise NNBuildError(f"train takes whole batches of {batch}: got {len(x)} inputs and {len(y)} targets")
        for k in range(0, len(x), batch):
            xs, ys = np.ascontiguousarray(x[k:k + batch]), np.ascontiguousarray(y[k:k + batch])
            self._train(self._ptr(self.memory), self._ptr(xs), self._ptr(ys))

    def fit(self, x, y, epochs, seed=1):
        """`epochs` passes of SGD over (x, y), each in a seeded random order (the tail that does
        not fill a batch is left out of that epoch)."""
        order = np.random.default_rng(seed)
        whole = len(x) - len(x) % self.model.batch
        for _ in range(epochs):
            pick = order.permutation(len(x))[:whole]
            self.train(np.asarray(x)[pick], np.asarray(y)[pick])

    def weights(self):
        """[(W [n_in][n_out], b)] as real numbers."""
        return ir.unpack(self.plan, self.memory)

    def set_weights(self, weights):
        self.memory[:] = ir.pack(self.plan, weights, self.memory)

    def save_keras(self, path):
        """The trained network as a Keras 2 full-model .h5 (Dense layers, the program's activations):
        a model file every nnbuild target builds for inference."""
        from nnbuild.frontends import keras_h5
        layers = [(f"dense_{l + 1}", w, b, layer.activation)
                  for l, ((w, b), layer) in enumerate(zip(self.weights(), self.model.layers))]
        keras_h5.write_dense(path, self.model.name, layers)

    def save(self, g_path):
        """The trained program as a model file pair: `net.g` and `net.npz` beside it (W1, b1, ...)."""
        from nnbuild.frontends import gravity_g
        g_path = Path(g_path)
        gravity_g.write(self.model, g_path)
        arrays = {}
        for l, (w, b) in enumerate(self.weights(), start=1):
            arrays[f"W{l}"], arrays[f"b{l}"] = w, b
        with files.atomic(g_path.with_suffix(".npz"), suffix=".npz") as tmp:
            np.savez(tmp, **arrays)


def compile(path, precision=None, cache=None, cc=None, seed=1, **training):  # noqa: A001 - the API's name
    """A Program for a Gravity `.g` file (or a model already loaded), in its own precision unless
    `precision` says otherwise. Any other model file nnbuild reads that is a chain of Dense layers
    becomes a program holding its trained weights (`training`: cost, batch, learning_rate)."""
    model, weights = path, None
    if isinstance(path, (str, os.PathLike)):
        kind = kinds.of_file(path)
        model, _ = kind.load(path)
        if kind.NAME != ir.KIND:
            model, weights = ir.from_network(model, precision=precision or "float32", **training)
    library, plan, compiled = build(model, precision, cache, cc)
    program = Program(library, plan, compiled, seed)
    if weights is not None:
        program.set_weights(weights)
    return program
