"""The standing hostile-input campaign: for every format nnbuild reads, valid files mutated at
random (seeded) and the attacks found by hand (files that point outside themselves, bombs of cost,
code in names and templates), each as a Case that writes its files into a fresh folder and names
the command to run on them. tests/test_fuzz_campaign.py runs every case under strace with a canary
folder beside it.

Every attack that reaches outside the case's folder points into OUTSIDE (a sibling folder holding
canary files) or at /proc/self/environ, so the runner can tell a read of any of them."""

import json
import random
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List

import h5py
import numpy as np

from conftest import REPO
from keras_files import dense, write_full_model, write_pair
from tpg_helpers import small_graph, write, write_env

#: the canary folder's name, beside every case's folder
OUTSIDE = "outside"
XOR = REPO / "firmware_examples" / "xor" / "xor.h5"
GRAVITY = REPO / "firmware_examples" / "gravity_digits" / "gravity_digits.g"
ACETONE = REPO / "tests" / "data" / "acetone_json" / "mlp.json"
KERAS3 = REPO / "tests" / "data" / "keras3" / "merge.keras"
MULTIITEM = REPO / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"


@dataclass
class Case:
    """`make(folder)` writes the case's files and returns the arguments of `python -m nnbuild`
    (or of `scons` when `scons` is set); `outputs` are the folders the command may write."""

    name: str
    make: Callable[[Path], List[str]]
    outputs: List[str] = field(default_factory=lambda: ["out"])
    scons: bool = False


def canary(folder, name="canary.bin", data=b"CANARY"):
    """A file in the canary folder beside `folder`."""
    path = folder.parent / OUTSIDE / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def generate(model, *extra):
    return ["generate", str(model), "-o", "out", *extra]


def mutated_bytes(data, rng, edits=8):
    """Random byte edits: flips, zeroed runs, a truncation or an appended tail."""
    data = bytearray(data)
    for _ in range(edits):
        at = rng.randrange(len(data))
        what = rng.random()
        if what < 0.5:
            data[at] ^= 1 << rng.randrange(8)
        elif what < 0.8:
            data[at:at + rng.randrange(1, 16)] = bytes(min(16, len(data) - at))
        else:
            data[at] = rng.choice(b"\x00\xff\x7f\x80")
    if rng.random() < 0.3:
        del data[rng.randrange(len(data) // 2, len(data)):]
    return bytes(data)


def deep_json(depth=100_000):
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------------------------- Keras HDF5


def xor_layers(kernel2=None):
    rng = np.random.default_rng(0)
    return [dense("dense_1", rng.standard_normal((2, 2)), np.zeros(2), "tanh", input_dim=2),
            dense("dense_2", rng.standard_normal((2, 1)) if kernel2 is None else kernel2, np.zeros(1), "sigmoid")]


def h5_with_dataset_replaced(folder, replace):
    """A valid Keras model whose second kernel is replaced by `replace(file, dataset_path)`."""
    path = write_full_model(folder / "m.h5", xor_layers())
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and "dense_2" in n
                     and "kernel" in n else None)
        parent, leaf = names[0].rsplit("/", 1)
        del f[names[0]]
        replace(f[parent], leaf, folder)
    return path


def external_link(group, leaf, folder):
    target = canary(folder, "stolen.h5", b"")
    with h5py.File(target, "w") as g:
        g["kernel"] = np.ones((2, 1), dtype=np.float32)
    group[leaf] = h5py.ExternalLink(str(target), "/kernel")


def external_storage(group, leaf, folder):
    group.create_dataset(leaf, shape=(2, 1), dtype="<f4",
                         external=[(str(canary(folder, "raw.bin", b"\0" * 8)), 0, 8)])


def environ_storage(group, leaf, folder):
    group.create_dataset(leaf, shape=(2, 1), dtype="<f4", external=[("/proc/self/environ", 0, 8)])


def virtual_dataset(group, leaf, folder):
    target = canary(folder, "virtual.h5", b"")
    with h5py.File(target, "w") as g:
        g["kernel"] = np.ones((2, 1), dtype=np.float32)
    layout = h5py.VirtualLayout(shape=(2, 1), dtype="<f4")
    layout[:] = h5py.VirtualSource(str(target), "kernel", shape=(2, 1))
    group.create_virtual_dataset(leaf, layout)


def huge_chunked(group, leaf, folder):
    group.create_dataset(leaf, shape=(2, 150_000_000), dtype="<f4", chunks=(1, 1024))


def keras_cases(seed):
    rng = random.Random(seed)
    cases = [Case(f"h5-{attack.__name__}", lambda d, a=attack: generate(h5_with_dataset_replaced(d, a)))
             for attack in (external_link, external_storage, environ_storage, virtual_dataset, huge_chunked)]
    cases.append(Case("h5-code-in-names", lambda d: generate(write_full_model(
        d / "m.h5", [dense("x */ #include </etc/passwd> /*", np.ones((2, 2)), np.zeros(2), input_dim=2)]))))
    for k in range(4):
        def mutate(d, k=k):
            (d / "m.h5").write_bytes(mutated_bytes(XOR.read_bytes(), random.Random(rng.random() + k)))
            return generate(d / "m.h5")
        cases.append(Case(f"h5-mutated-{k}", mutate))

    def pair_link(d):
        write_pair(d / "architecture.json", xor_layers())
        with h5py.File(d / "weights.h5", "r+") as f:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            parent, leaf = names[-1].rsplit("/", 1)
            del f[names[-1]]
            external_link(f[parent], leaf, d)
        return generate(d / "architecture.json")
    cases.append(Case("pair-external-link", pair_link))

    def pair_deep(d):
        write_pair(d / "architecture.json", xor_layers())
        (d / "architecture.json").write_text(deep_json())
        return generate(d / "architecture.json")
    cases.append(Case("pair-deep-json", pair_deep))

    def keras3_escape(d):
        with zipfile.ZipFile(KERAS3) as src, zipfile.ZipFile(d / "m.keras", "w") as dst:
            for item in src.infolist():
                dst.writestr(item, src.read(item))
            dst.writestr("../" + OUTSIDE + "/written.txt", "escaped")
        return generate(d / "m.keras")
    cases.append(Case("keras3-member-escapes", keras3_escape))

    def keras3_bomb(d):
        with zipfile.ZipFile(KERAS3) as src, zipfile.ZipFile(d / "m.keras", "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                data = src.read(item)
                if item.filename == "config.json":
                    data = data + b" " * 300_000_000   # 300 MB of spaces, a few hundred KB compressed
                dst.writestr(item.filename, data)
        return generate(d / "m.keras")
    cases.append(Case("keras3-zip-bomb", keras3_bomb))
    return cases


# ------------------------------------------------------------------------------------------ ONNX


def onnx_model(nodes, initializers, inputs=(("x", [1, 2]),), outputs=(("y", [1, 1]),)):
    from onnx import TensorProto, helper
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def small_onnx():
    from onnx import helper, numpy_helper
    w = numpy_helper.from_array(np.ones((2, 1), dtype=np.float32), "w")
    return onnx_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [w])


def onnx_cases(seed):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = random.Random(seed)
    cases = []

    def external(d, location):
        model = small_onnx()
        tensor = model.graph.initializer[0]
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", "0"), ("length", "8")):
            tensor.external_data.add(key=key, value=value)
        onnx.save(model, d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-external-escapes", lambda d: (canary(d, "w.bin", b"\0" * 8),
                                                          external(d, f"../{OUTSIDE}/w.bin"))[1]))
    cases.append(Case("onnx-external-absolute", lambda d: external(d, "/proc/self/environ")))

    def constant_bomb(d):
        shape = numpy_helper.from_array(np.array([16_000_000], dtype=np.int64), "shape")
        nodes = [helper.make_node("ConstantOfShape", ["shape"], [f"c{k}"]) for k in range(64)]
        model = small_onnx()
        model.graph.initializer.append(shape)
        model.graph.node.extend(nodes)
        onnx.save(model, d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-constant-bomb", constant_bomb))

    def tile_bomb(d):
        repeats = numpy_helper.from_array(np.array([1, 4_000_000], dtype=np.int64), "r")
        model = onnx_model([helper.make_node("Tile", ["x", "r"], ["y"])], [repeats], outputs=(("y", [1, 8_000_000]),))
        onnx.save(model, d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-tile-bomb", tile_bomb))

    def relu_chain(d, count=20_000):
        nodes = [helper.make_node("Relu", [f"t{k}" if k else "x"], [f"t{k + 1}" if k + 1 < count else "y"])
                 for k in range(count)]
        onnx.save(onnx_model(nodes, [], outputs=(("y", [1, 2]),)), d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-relu-chain", relu_chain))

    def attribute(d, node):
        onnx.save(onnx_model([node], [], outputs=(("y", [1, 2]),)), d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-leakyrelu-inf", lambda d: attribute(d, helper.make_node("LeakyRelu", ["x"], ["y"],
                                                                                    alpha=float("inf")))))
    cases.append(Case("onnx-elu-minus-inf", lambda d: attribute(d, helper.make_node("Elu", ["x"], ["y"],
                                                                                    alpha=float("-inf")))))
    cases.append(Case("onnx-code-in-names", lambda d: attribute(d, helper.make_node(
        "Relu", ["x"], ["y"], name="*/ system(\"id\"); /*"))))

    def pad_minus_inf(d):
        pads = numpy_helper.from_array(np.array([0, 1, 0, 1], dtype=np.int64), "pads")
        value = numpy_helper.from_array(np.array(float("-inf"), dtype=np.float32), "v")
        model = onnx_model([helper.make_node("Pad", ["x", "pads", "v"], ["p"]),
                            helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3], strides=[1])],
                           [pads, value], inputs=(("x", [1, 1, 4]),), outputs=(("y", [1, 1, 4]),))
        onnx.save(model, d / "m.onnx")
        return generate(d / "m.onnx")
    cases.append(Case("onnx-pad-minus-inf", pad_minus_inf))
    for k in range(4):
        def mutate(d, k=k):
            (d / "m.onnx").write_bytes(mutated_bytes(small_onnx().SerializeToString(), random.Random(rng.random() + k)))
            return generate(d / "m.onnx")
        cases.append(Case(f"onnx-mutated-{k}", mutate))
    return cases


# ------------------------------------------------------------------------------------------ NNEF


def nnef_graph(d, body, tensors=()):
    folder = d / "m.nnef"
    folder.mkdir()
    (folder / "graph.nnef").write_text("version 1.0;\n\ngraph G(x) -> (y)\n{\n" + body + "\n}\n")
    for name, data in tensors:
        (folder / name).write_bytes(data)
    return generate(folder)


def nnef_cases(seed):
    rng = random.Random(seed)
    cases = [
        Case("nnef-constant-bomb", lambda d: nnef_graph(d, "    x = external<scalar>(shape = [1, 2]);\n" + "".join(
            f"    c{k} = constant<scalar>(shape = [134217728], value = [0.0]);\n" for k in range(12))
            + "    y = relu(x);")),
        Case("nnef-border-comment", lambda d: nnef_graph(
            d, "    x = external<scalar>(shape = [1, 1, 4, 4]);\n"
               "    y = max_pool(x, size = [1, 1, 2, 2], border = 'evil */');")),
        Case("nnef-leaky-relu-inf", lambda d: nnef_graph(
            d, "    x = external<scalar>(shape = [1, 2]);\n    y = leaky_relu(x, alpha = inf);")),
        Case("nnef-variable-escapes", lambda d: (canary(d, "w.dat", b"\0" * 64), nnef_graph(
            d, "    x = external<scalar>(shape = [1, 2]);\n"
               f"    w = variable<scalar>(shape = [1, 2], label = '../../{OUTSIDE}/w');\n"
               "    y = add(x, w);"))[1]),
        Case("nnef-dat-lies", lambda d: nnef_graph(
            d, "    x = external<scalar>(shape = [1, 2]);\n    w = variable<scalar>(shape = [1, 2], label = 'w');\n"
               "    y = add(x, w);", [("w.dat", b"N\xef" + bytes(126))])),
        Case("nnef-relu-chain", lambda d: nnef_graph(
            d, "    x = external<scalar>(shape = [1, 2]);\n    t0 = relu(x);\n"
               + "".join(f"    t{k + 1} = relu(t{k});\n" for k in range(20_000)) + "    y = relu(t20000);")),
    ]
    for k in range(3):
        def mutate(d, k=k):
            text = (MULTIITEM / "graph.nnef").read_text()
            chars = list(text)
            r = random.Random(rng.random() + k)
            for _ in range(6):
                chars[r.randrange(len(chars))] = r.choice("()[]{},;=<>'\"*/\\0123456789 \nxyz")
            folder = d / "m.nnef"
            folder.mkdir()
            (folder / "graph.nnef").write_text("".join(chars))
            for dat in MULTIITEM.glob("*.dat"):
                (folder / dat.name).write_bytes(dat.read_bytes())
            return generate(folder)
        cases.append(Case(f"nnef-mutated-{k}", mutate))

    def long_item_name(d):
        folder = d / "m.nnef"
        folder.mkdir()
        (folder / "graph.nnef").write_text((MULTIITEM / "graph.nnef").read_text().replace("ITEM1", "I" * 300))
        for dat in MULTIITEM.glob("*.dat"):
            (folder / dat.name).write_bytes(dat.read_bytes())
        return ["multiitem", str(folder), "-o", "out", "--runs", "2"]
    cases.append(Case("multiitem-long-item-name", long_item_name))

    def deep_map(d):
        (d / "map.json").write_text(deep_json())
        return ["multiitem", str(XOR), "-o", "out", "--map", str(d / "map.json"), "--runs", "2"]
    cases.append(Case("multiitem-deep-map", deep_map))
    return cases


# --------------------------------------------------------------------- NNet, ACETONE JSON, Gravity


def nnet_text(sizes, weights=1.0):
    lines = ["// fuzz", f"{len(sizes) - 1},{sizes[0]},{sizes[-1]},{max(sizes)},",
             ",".join(map(str, sizes)) + ",", "0,",
             ",".join(["-1"] * sizes[0]) + ",", ",".join(["1"] * sizes[0]) + ",",
             ",".join(["0"] * (sizes[0] + 1)) + ",", ",".join(["1"] * (sizes[0] + 1)) + ","]
    for n_in, n_out in zip(sizes, sizes[1:]):
        lines += [",".join([str(weights)] * n_in) + "," for _ in range(n_out)]
        lines += ["0," for _ in range(n_out)]
    return "\n".join(lines) + "\n"


def text_cases(seed):
    rng = random.Random(seed)
    cases = [
        Case("nnet-huge-declared", lambda d: generate(write(d / "m.nnet", nnet_text([2, 3, 1]).replace(
            "2,3,1,", "2,3000000000,1,", 1)))),
        Case("nnet-nan-weights", lambda d: generate(write(d / "m.nnet", nnet_text([2, 3, 1], "nan")))),
        Case("acetone-deep-json", lambda d: generate(write(d / "m.json", deep_json()))),
        Case("gravity-long-module", lambda d: generate(write(d / "m.g", GRAVITY.read_text().replace(
            '.module "gravity_digits"', '.module "' + "m" * 100_000 + '"')))),
        Case("gravity-tiny-rate", lambda d: generate(write(d / "m.g", GRAVITY.read_text().replace(
            ".optimizer sgd 0.1", ".optimizer sgd 1e-49")))),
        Case("gravity-huge-avr", lambda d: generate(write(d / "m.g", GRAVITY.read_text().replace(
            ".input 8 * 8;\n.hidden 16 relu;", ".input 20000;\n.hidden 20000 relu;")), "--target", "avr")),
    ]
    doc = json.loads(ACETONE.read_text())
    for k in range(4):
        def mutate(d, k=k):
            r = random.Random(rng.random() + k)
            edited = json.loads(json.dumps(doc))
            layer = r.choice(edited["config"]["layers"])
            target = layer["config"] if r.random() < 0.8 else layer
            key = r.choice(sorted(target))
            target[key] = r.choice([None, -1, 2 ** 40, "*/ evil /*", [], {}, 1e308, "nan"])
            return generate(write(d / "m.json", json.dumps(edited)))
        cases.append(Case(f"acetone-mutated-{k}", mutate))
    return cases


# ------------------------------------------------------------------ TPG, check data, boards, examples


def check_args(model, data, *extra):
    return ["check", str(model), "--data", str(data), *extra, "--build-dir", "out"]


def xor_data(d, **arrays):
    data = {"x": np.array([[0, 0], [1, 1]], dtype=np.float32), "y": np.array([[0], [0]], dtype=np.float32), **arrays}
    np.savez(d / "d.npz", **data)
    return d / "d.npz"


def tpg_cases(seed):
    rng = random.Random(seed)

    def env_case(d, template):
        from tpg_helpers import TEST_ENV
        instructions = [dict(i) for i in TEST_ENV["instructions"]]
        instructions[0]["c"] = template
        write_env(d / "env.json", instructions=instructions)
        write(d / "g.dot", small_graph())
        obs = np.zeros((2, 6), dtype=np.float64)
        np.savez(d / "d.npz", x=obs, y=np.array([1, 1]))
        return check_args(d / "g.dot", d / "d.npz", "--environment", str(d / "env.json"))
    cases = [Case(f"tpg-template-{k}", lambda d, t=t: env_case(d, t)) for k, t in enumerate((
        "$0 = (__builtin_execv((char *)obs, (char **)0), $1 + $2);",
        "$0 = (exit(3), $1);",
        "$0 = $1; } int evil(void) { return 0;",
        "$0 = $1 + $2; /* */ #include </etc/passwd>",
    ))]

    def python_template(d):
        from tpg_helpers import TEST_ENV
        instructions = [dict(i) for i in TEST_ENV["instructions"]]
        instructions[0]["python"] = f"__import__('os').system('touch ../{OUTSIDE}/pwned')"
        write_env(d / "env.json", instructions=instructions)
        write(d / "g.dot", small_graph())
        np.savez(d / "d.npz", x=np.zeros((2, 6)), y=np.array([1, 1]))
        return check_args(d / "g.dot", d / "d.npz", "--environment", str(d / "env.json"))
    cases.append(Case("tpg-python-template", python_template))
    for k in range(3):
        def mutate(d, k=k):
            r = random.Random(rng.random() + k)
            text = list(small_graph())
            for _ in range(5):
                text[r.randrange(len(text))] = r.choice("|&#\"[]{};-> \n0123456789PTAI")
            return generate(write(d / "g.dot", "".join(text)), "--environment", "sips22-atari")
        cases.append(Case(f"tpg-mutated-{k}", mutate))
    return cases


def data_cases(seed):
    def pickled(d):
        np.savez(d / "d.npz", x=np.array([{"a": 1}], dtype=object), y=np.zeros((1, 1)))
        return check_args(XOR, d / "d.npz")

    def huge_header(d):
        path = xor_data(d)
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        header = members["x.npy"]
        members["x.npy"] = header.replace(b"(2, 2)", b"(1000000000, 2)")
        with zipfile.ZipFile(path, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        return check_args(XOR, path)
    return [Case("npz-object-array", pickled), Case("npz-huge-header", huge_header),
            Case("npz-dev-zero", lambda d: check_args(XOR, "/dev/zero"))]


def board_file(d, **changes):
    board = json.loads((REPO / "toolchains" / "host.json").read_text())
    board.update(changes, name="fuzzboard")
    (d / "fuzzboard.json").write_text(json.dumps(board))
    return d / "fuzzboard.json"


def board_cases(seed):
    def flags(d, extra):
        board = json.loads((REPO / "toolchains" / "host.json").read_text())
        return check_args(XOR, xor_data(d), "--target", str(board_file(d, cflags=board["cflags"] + extra)))
    cases = [Case(f"board-cflags-{k}", lambda d, e=e: flags(d, e)) for k, e in enumerate((
        ["-wrapper", f"sh,-c,touch ../{OUTSIDE}/pwned"],
        [f"-B../{OUTSIDE}/"],
        [f"@../{OUTSIDE}/flags"],
        ["-fplugin=../outside/evil.so"],
    ))]
    cases.append(Case("board-deep-json", lambda d: check_args(XOR, xor_data(d), "--target", str(
        write(d / "deep.json", deep_json())))))
    cases.append(Case("board-long-name", lambda d: check_args(XOR, xor_data(d), "--target", str(
        write(d / "long.json", json.dumps({**json.loads((REPO / "toolchains" / "host.json").read_text()),
                                            "name": "b" * 300}))))))
    return cases


def example_case(name, config):
    def make(d):
        folder = d / "project" / "firmware_examples" / "fuzz"
        folder.mkdir(parents=True)
        (folder / "xor.h5").write_bytes(XOR.read_bytes())
        (folder / "example.json").write_text(config if isinstance(config, str) else json.dumps(config))
        return ["-Q", "-n", "target=host", "model=fuzz"]
    return Case(f"example-{name}", make, outputs=["project"], scons=True)


def example_cases(seed):
    return [example_case("check-data-dev-zero", {"model": "xor.h5", "check_data": "/dev/zero"}),
            example_case("model-number", {"model": 5}),
            example_case("model-null", {"model": None}),
            example_case("model-list", {"model": ["xor.h5"]}),
            example_case("precision-number", {"model": "xor.h5", "precision": 5}),
            example_case("check-data-dot", {"model": "xor.h5", "check_data": "."}),
            example_case("check-inputs-fraction", {"model": "xor.h5", "check_inputs": 2.5}),
            example_case("deep", deep_json()),
            example_case("model-escapes", {"model": f"../../../{OUTSIDE}/canary.bin"})]


# ------------------------------------------------------------------------------------- TFLite

TFLITE = REPO / "tests" / "data" / "tflite" / "mlp_float32.tflite"


def tflite_patched(d, patch):
    """The MLP fixture with `patch(model, data)` applied to its bytes (positions found with the schema's
    generated classes), written to d/m.tflite."""
    import struct

    import tflite
    data = bytearray(TFLITE.read_bytes())
    model = tflite.Model.GetRootAsModel(bytes(data), 0)
    for position, fmt, value in patch(model):
        struct.pack_into(fmt, data, position, value)
    (d / "m.tflite").write_bytes(bytes(data))
    return generate(d / "m.tflite")


def tflite_cases(seed):
    rng = random.Random(seed)
    cases = []
    for k in range(6):
        def mutate(d, k=k):
            (d / "m.tflite").write_bytes(mutated_bytes(TFLITE.read_bytes(), random.Random(rng.random() + k)))
            return generate(d / "m.tflite")
        cases.append(Case(f"tflite-mutated-{k}", mutate))

    def huge_tensor(model):
        tensor = model.Subgraphs(0).Tensors(model.Subgraphs(0).Inputs(0))
        return [(tensor._tab.Vector(tensor._tab.Offset(4)) + 4, "<i", 2 ** 30)]
    cases.append(Case("tflite-huge-tensor", lambda d: tflite_patched(d, huge_tensor)))

    def buffer_beyond(model):
        buffer = next(model.Buffers(k) for k in range(model.BuffersLength()) if model.Buffers(k).DataLength())
        return [(buffer._tab.Vector(buffer._tab.Offset(4)) - 4, "<I", 2 ** 31)]
    cases.append(Case("tflite-buffer-beyond-the-file", lambda d: tflite_patched(d, buffer_beyond)))

    def tensor_count(model):
        sub = model.Subgraphs(0)
        return [(sub._tab.Vector(sub._tab.Offset(4)) - 4, "<I", 2 ** 32 - 1)]
    cases.append(Case("tflite-tensor-count", lambda d: tflite_patched(d, tensor_count)))
    return cases


FORMATS = {"keras": keras_cases, "onnx": onnx_cases, "nnef": nnef_cases, "text": text_cases, "tpg": tpg_cases,
           "data": data_cases, "boards": board_cases, "examples": example_cases, "tflite": tflite_cases}
