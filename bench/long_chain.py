"""CPU seconds of loading and of the default passes for a chain of N ReLU (ONNX file, NNEF folder,
and an IR model built directly): the passes must stay linear in the layer count.

    PYTHONPATH=. python3 bench/long_chain.py [--sizes 4000,8000,20000] [--formats onnx,nnef,ir]

Run from a checkout (PYTHONPATH=. makes that checkout's nnbuild the one measured). Files go to a
temporary folder. Sizes above nnbuild.limits.MAX_NODES (ONNX, NNEF) are refused by the loader in
about a second: the refusal's time is printed instead.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def onnx_chain(folder, n):
    import onnx
    from onnx import helper, TensorProto
    nodes, prev = [], "x"
    for k in range(n):
        out = "y" if k == n - 1 else f"t{k}"
        nodes.append(helper.make_node("Relu", [prev], [out], name=f"r{k}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = folder / f"chain{n}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def nnef_chain(folder, n):
    lines = ["version 1.0;", "graph chain(x) -> (y) {", "  x = external(shape = [1, 4]);"]
    prev = "x"
    for k in range(n):
        out = "y" if k == n - 1 else f"t{k}"
        lines.append(f"  {out} = relu({prev});")
        prev = out
    lines.append("}")
    path = folder / f"chain{n}.nnef"
    path.mkdir()
    (path / "graph.nnef").write_text("\n".join(lines) + "\n")
    return path


def ir_chain(n):
    from nnbuild.ir import graph as g
    layers = [g.Dense("d", np.ones((4, 4), np.float32), None)]
    layers += [g.Activation(f"r{k}", "relu") for k in range(n - 1)]
    return g.Model("chain", (4,), layers)


def cpu(fn):
    start = time.process_time()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 (a refusal is a result here)
        return time.process_time() - start, None, str(exc)
    return time.process_time() - start, out, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4000,8000,20000")
    parser.add_argument("--formats", default="onnx,nnef,ir")
    args = parser.parse_args()
    from nnbuild import frontends, passes
    import nnbuild
    print(f"nnbuild from {Path(nnbuild.__file__).parent}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            for n in [int(s) for s in args.sizes.split(",")]:
                if fmt == "ir":
                    load_s, model, refused = 0.0, ir_chain(n), None
                else:
                    path = (onnx_chain if fmt == "onnx" else nnef_chain)(Path(tmp), n)
                    load_s, model, refused = cpu(lambda: frontends.load(path))
                if refused:
                    print(f"{fmt:5} {n:6}: refused in {load_s:.2f} s: {refused[-90:]}")
                    continue
                pass_s, _, refused = cpu(lambda: passes.run(model))
                print(f"{fmt:5} {n:6}: load {load_s:7.2f} s  passes {pass_s:7.2f} s"
                      + (f"  refused: {refused[-80:]}" if refused else ""))


if __name__ == "__main__":
    main()
