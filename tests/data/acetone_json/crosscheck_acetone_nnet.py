"""Cross-check, out of CI, of nnbuild's reading of an ACETONE JSON against acetone-nnet itself.

    python3 -m venv /tmp/acetone-venv && /tmp/acetone-venv/bin/pip install acetone-nnet
    /tmp/acetone-venv/bin/pip install "tensorflow==2.12.*" "onnx==1.14.1" "onnxruntime==1.15.1"
    /tmp/acetone-venv/bin/python tests/data/acetone_json/crosscheck_acetone_nnet.py [lenet|mlp|merge|lenet_plain ...]

(acetone-nnet 1.0.post1 imports keras.engine: plain `pip install acetone-nnet` takes TensorFlow 2.21
with Keras 3 and fails; TensorFlow 2.12 then needs an onnx built for protobuf 4.)

For each fixture: acetone-nnet generates its C (CodeGenerator, test inputs given) and its own Python
inference (output_python.txt); the C is built with its Makefile and run (output_c.txt); nnbuild's
reference runs the same inputs (channels-last, as acetone-nnet takes them with data_format
channels_last). Prints the largest differences. nnbuild is imported from this checkout.
"""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from nnbuild import frontends  # noqa: E402
from nnbuild.ir import reference  # noqa: E402


def numbers(path):
    rows = []
    for line in Path(path).read_text().splitlines():
        values = [float.fromhex(v) if "0x" in v else float(v)
                  for v in re.split(r"[\s,\[\]]+", line.strip()) if v]
        if values:
            rows.append(values)
    return np.array(rows)


def plain(name, out_root):
    """<name>.json without the layers acetone-nnet 1.0's JSON reader mishandles (BatchNormalization
    is built but never linked; a skipped Dropout shifts its layer list), indices renumbered."""
    import json
    doc = json.loads((HERE / f"{name}.json").read_text())
    layers, renumber = [], {}
    for entry in doc["config"]["layers"]:
        cfg = entry["config"]
        if entry["class_name"] in ("BatchNormalization", "Dropout"):
            renumber[cfg["idx"]] = renumber[cfg["prev_layer_idx"][0]]
            continue
        renumber[cfg.get("idx", 0)] = len(layers)
        if layers:
            cfg["idx"] = len(layers)
            cfg["prev_layer_idx"] = [renumber[i] for i in cfg["prev_layer_idx"]]
        layers.append(entry)
    doc["config"]["layers"] = layers
    out_root.mkdir(parents=True, exist_ok=True)
    path = out_root / f"{name}_plain.json"
    path.write_text(json.dumps(doc))
    return path


def check(name, out_root=Path("/tmp/acetone-crosscheck")):
    from acetone_nnet import CodeGenerator
    path = plain(name[:-len("_plain")], out_root) if name.endswith("_plain") else HERE / f"{name}.json"
    model = frontends.load(path)
    dtype = np.float64 if model.meta["dtype"] == "float64" else np.float32
    xs = np.random.default_rng(5).normal(size=(3,) + tuple(model.input_shape)).astype(dtype)
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    net = CodeGenerator(file=str(path), test_dataset=xs.reshape(len(xs), 1, -1), function_name="inference",
                        nb_tests=len(xs), verbose=False)
    net.generate_c_files(out)
    net.compute_inference(out)
    python = numbers(out / "output_python.txt")
    ours = reference.run(model, xs.astype(np.float64), np.float64).reshape(len(xs), -1)
    print(f"{name}: acetone-nnet Python vs nnbuild reference: max |diff| = {np.abs(python - ours).max():.3g}")
    build = subprocess.run(["make", "-C", str(out)], capture_output=True, text=True)
    if build.returncode:
        print(f"{name}: acetone-nnet's C did not build:\n{build.stdout[-2000:]}{build.stderr[-2000:]}")
        return
    exe = next(p for p in out.iterdir() if p.is_file() and p.stat().st_mode & 0o111 and p.suffix == "")
    subprocess.run([str(exe), str(out / "output_c.txt")], check=True, capture_output=True, cwd=out)
    c_out = numbers(out / "output_c.txt")
    print(f"{name}: acetone-nnet C vs nnbuild reference: max |diff| = {np.abs(c_out - ours).max():.3g}")


if __name__ == "__main__":
    for fixture in sys.argv[1:] or ["lenet", "mlp", "merge", "lenet_plain"]:
        try:
            check(fixture)
        except Exception as exc:  # report each fixture's outcome, go on with the next
            print(f"{fixture}: acetone-nnet failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
