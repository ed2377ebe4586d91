"""Flow facts of the float32 CNN shapes: the padded convolutions' tap loops in v2 carry
total_iterations, the body executions over one inference (taps inside the input only), checked here
against a count of the loop nest's own tests; the multiply-accumulate lines of v1 and v2 carry the
__mulsf3 tags the weights' exponents prove. builtin-avr uses both (tests/test_wcet_avr_adversarial.py
runs the searches against such bounds)."""

import json

import numpy as np
import pytest

from nnbuild import codegen, passes
from nnbuild.codegen import cnn
from nnbuild.numerics import float_facts
from nnbuild.ir.graph import Conv2D, Flatten, Dense, Model


def conv_model(padding, strides, dilation, kernel=(3, 3)):
    rng = np.random.default_rng(3)
    layers = [Conv2D("c", rng.normal(size=kernel + (2, 3)).astype(np.float32), np.zeros(3, np.float32),
                     strides=strides, dilation=dilation, padding=padding, activation="relu"),
              Flatten("f")]
    return Model("tapnet", (7, 6, 2), layers)


def counted(oh, ow, kh, kw, st, dl, pad, h, w, rows, cg):
    """(kx loop body passes, c loop body passes) of the generic conv nest, by running its tests."""
    kx = c = 0
    for oy in range(oh):
        for ox in range(ow):
            for _ in range(rows):
                for ky in range(kh):
                    if 0 <= oy * st[0] + ky * dl[0] - pad[0] < h:
                        for kxx in range(kw):
                            kx += 1
                            if 0 <= ox * st[1] + kxx * dl[1] - pad[2] < w:
                                c += cg
    return kx, c


@pytest.mark.parametrize("padding, strides, dilation", [((1, 1, 1, 1), (1, 1), (1, 1)), ((0, 1, 2, 0), (2, 1), (1, 1)),
                                                        ((2, 2, 2, 2), (1, 2), (2, 1))])
def test_padded_conv_tap_loops_carry_their_totals(tmp_path, padding, strides, dilation):
    model, log = passes.run(conv_model(padding, strides, dilation), None)
    codegen.generate(model, tmp_path, shape="v2", storage="const", passes_log=log)
    facts = json.loads((tmp_path / "tapnet.flowfacts.json").read_text())
    totals = [f for f in facts["loops"] if "total_iterations" in f]
    conv = model.layers[0]
    h, w = 7, 6
    kh, kw = conv.kernel.shape[:2]
    oh = (h + padding[0] + padding[1] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + padding[2] + padding[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    want = counted(oh, ow, kh, kw, strides, dilation, padding, h, w, 3, 2)
    assert [f["total_iterations"] for f in totals] == list(want)
    assert [f["max_iterations"] for f in totals] == [kw, 2]


def test_valid_taps_counts_the_taps_inside():
    assert cnn.valid_taps(7, 3, 1, 1, 1, 7) == 19      # 'same' 3x3: two border rows lose one tap
    assert cnn.valid_taps(5, 3, 1, 1, 0, 7) == 15      # no padding: every tap is inside
    assert cnn.valid_taps(4, 3, 2, 2, 2, 7) == 10     # dilated, strided: 2 + 3 + 3 + 2


def f32(exponent, mantissa=0, sign=0):
    return np.array([(sign << 31) | (exponent << 23) | mantissa], np.uint32).view(np.float32)[0]


def test_weight_tags_follow_the_exponent_range():
    tags, why = float_facts.weight_tags([f32(126), f32(128, 5, 1), 0.0, -0.0])
    assert set(tags) == {"__mulsf3:C.e<=128", "__mulsf3:C.e>=126", "__mulsf3:C.e>=122", "__mulsf3:C.e>=118"}
    assert "[126, 128]" in why
    assert float_facts.weight_tags([f32(119), f32(131)])[0] == ("__mulsf3:C.e>=118",)
    assert float_facts.weight_tags([f32(100), f32(127)])[0] == ("__mulsf3:C.e<=128",)
    assert float_facts.weight_tags([f32(100), f32(129)]) == ((), None)


@pytest.mark.parametrize("bad", [f32(0, 1), np.inf, np.nan])
def test_weight_tags_claim_nothing_for_subnormal_or_non_finite_weights(bad):
    assert float_facts.weight_tags([1.0, bad]) == ((), None)
    assert float_facts.weight_tags([0.0, -0.0]) == ((), None)


@pytest.mark.parametrize("shape, conv, dense", [("v2", "c", "d"), ("v1", "kernel_conv2d", "kernel_dense")])
def test_mac_lines_carry_the_weight_tags(tmp_path, shape, conv, dense):
    """Conv weights in [0.5, 4) (exponents 126..128) and dense weights of exponent 120: each MAC line
    gets its own layer's tags (v1: its kernel's, over all entries)."""
    rng = np.random.default_rng(5)
    kc = (rng.uniform(0.5, 3.9, (3, 3, 2, 3)) * rng.choice([-1, 1], (3, 3, 2, 3))).astype(np.float32)
    kd = np.full((126, 2), f32(120), np.float32)
    layers = [Conv2D("c", kc, np.zeros(3, np.float32), padding=(1, 1, 1, 1), activation="relu"), Flatten("f"),
              Dense("d", kd, np.zeros(2, np.float32), "linear")]
    model, log = passes.run(Model("tapnet", (7, 6, 2), layers), None)
    codegen.generate(model, tmp_path, shape=shape, storage="const", passes_log=log)
    facts = json.loads((tmp_path / "tapnet.flowfacts.json").read_text())
    tags, arm_tags = {}, {}
    for v in facts["values"]:
        if v["op"] == "mul":   # the AVR __mulsf3 tags here; the ARM fmul tags beside them
            tags.setdefault(v["layer"], set()).update(t for t in v["tags"] if t.startswith("__mulsf3:"))
            arm_tags.setdefault(v["layer"], set()).update(t for t in v["tags"] if t.startswith("fmul:"))
    if shape == "v2":   # every weight normal: the ARM soft-float facts' one-normal-factor tag
        assert arm_tags == {conv: {"fmul:one.normal"}, dense: {"fmul:one.normal"}}
    assert tags == {conv: {"__mulsf3:C.e<=128", "__mulsf3:C.e>=126", "__mulsf3:C.e>=122", "__mulsf3:C.e>=118"},
                    dense: {"__mulsf3:C.e<=128", "__mulsf3:C.e>=118"}}
