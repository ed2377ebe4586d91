"""Writes multiitem_cnn.nnef/: the seed paper's example 5 (listing 3) as a multi-item NNEF document,
a small CNN split in three items with two parallel branches, weights seeded (numpy, seed 5).

    ITEM1: o1 = conv(e1)            -> send o1 to ITEM2 and ITEM3
    ITEM2: o2 = conv(o1), o3 = conv(o2) -> send o3 to ITEM1
    ITEM3: o4 = conv(o1), o5 = conv(o4) -> send o5 to ITEM1   (o3 and o5 share v5, v6 as in the paper)
    ITEM1: o6 = concat(o3, o5), o7 = reshape(o6), out = linear(o7)

Run: python3 make_model.py [folder]   (default: multiitem_cnn.nnef beside this file)
"""

import sys
from pathlib import Path

import numpy as np

from nnbuild.frontends.nnef_text import dat_bytes

SHAPES = {"v1": (4, 2, 3, 3), "v2": (1, 4), "v3": (4, 4, 3, 3), "v4": (1, 4), "v5": (4, 4, 3, 3),
          "v6": (1, 4), "v7": (4, 4, 3, 3), "v8": (1, 4), "v9": (10, 512), "v10": (1, 10)}

CONV = "padding = [(1, 1), (1, 1)], stride = [1, 1], dilation = [1, 1], groups = 1"


def variables(names):
    return "\n".join(f"    {n} = variable<scalar>(shape = {list(SHAPES[n])}, label = '{n}');" for n in names)


DOCUMENT = f"""version 1.0;

# the seed paper's example 5 (listing 3): three items, two parallel branches
graphitem ITEM1 DNN1([e1, vsync2, vsync3]) -> ([vsync1, out])
{{
    e1 = external<scalar>(shape = [1, 2, 8, 8]);
{variables(["v1", "v2", "v9", "v10"])}
    vsync1 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    vsync2 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    vsync3 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    o1 = conv(e1, v1, v2, {CONV});
    vsync1 = send_var([ITEM2, ITEM3], o1);
    o3 = get_var(ITEM2, vsync2);
    o5 = get_var(ITEM3, vsync3);
    o6 = concat([o3, o5], axis = 1);
    o7 = reshape(o6, shape = [1, -1]);
    out = linear(o7, v9, v10);
}}

graphitem ITEM2 DNN2([vsync1]) -> ([vsync2])
{{
{variables(["v3", "v4", "v5", "v6"])}
    vsync1 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    vsync2 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    o1 = get_var(ITEM1, vsync1);
    o2 = conv(o1, v3, v4, {CONV});
    o3 = conv(o2, v5, v6, {CONV});
    vsync2 = send_var([ITEM1], o3);
}}

graphitem ITEM3 DNN3([vsync1]) -> ([vsync3])
{{
{variables(["v5", "v6", "v7", "v8"])}
    vsync1 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    vsync3 = variablesync<scalar>(shape = [1, 4, 8, 8]);
    o1 = get_var(ITEM1, vsync1);
    o4 = conv(o1, v7, v8, {CONV});
    o5 = conv(o4, v5, v6, {CONV});
    vsync3 = send_var([ITEM1], o5);
}}
"""


def write(folder):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.nnef").write_text(DOCUMENT)
    rng = np.random.default_rng(5)
    for name, shape in SHAPES.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 and name not in ("v2", "v4", "v6", "v8", "v10") else 1
        weights = rng.uniform(-1.0, 1.0, size=shape) / np.sqrt(fan_in)
        (folder / f"{name}.dat").write_bytes(dat_bytes(weights.astype(np.float32)))
    return folder


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("multiitem_cnn.nnef"))
