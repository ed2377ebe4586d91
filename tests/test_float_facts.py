"""Value facts of float32 multiply-accumulates (nnbuild.numerics.float_facts), their flow-facts
entries (codegen) and how the analyser places them on calls (avr_paths). Quick tier: no compiler."""

import json

import numpy as np
import pytest

from conftest import REPO
from nnbuild import codegen, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.numerics import float_facts as F
from nnbuild.wcet import avr_paths

F1TENTH = REPO / "firmware_examples/f1tenth/architecture.json"


def test_threshold_makes_every_kept_product_normal():
    """keep_exp = 127 - smallest weight exponent: a kept input and any non-zero weight have
    eW + eX >= 127, so __mulsf3's exponent sum eW + eX - 127 is never negative (its
    denormalisation loop does not run; the extreme pair's product 2^-127 is packed loop-free)."""
    kernel = np.array([[0.75, -2.0 ** -20], [0.0, 3.0]], dtype=np.float32)
    facts = F.mac_facts(kernel)
    assert facts.weights_normal and facts.weight_exp_min == 127 - 20 and facts.keep_exp == 20
    smallest_kept = np.float32(2.0 ** (facts.keep_exp - 127))
    e_w, e_x = F.biased_exponents([np.float32(-2.0 ** -20), smallest_kept])
    assert e_w + e_x == 127
    assert np.float32(-2.0 ** -20) * smallest_kept == np.float32(-2.0 ** -127)
    assert F.flushed([smallest_kept], facts.keep_exp)[0] == smallest_kept
    below = np.nextafter(smallest_kept, np.float32(0))
    assert F.flushed([below, -below], facts.keep_exp).view(np.uint32).tolist() == [0, 0x80000000]
    assert facts.flush_error == pytest.approx((2.0 ** -20 + 3.0) * 2.0 ** -107)


def test_large_weights_still_flush_subnormals():
    facts = F.mac_facts(np.full((3, 2), 8.0, np.float32))
    assert facts.keep_exp == 1
    sub = np.float32(1e-40)
    assert F.flushed([sub, np.inf, np.nan, 1.0], 1)[[0, 1, 3]].tolist() == [0.0, np.inf, 1.0]


@pytest.mark.parametrize("bad", [1e-42, np.inf, np.nan])
def test_subnormal_or_non_finite_weights_claim_nothing(bad):
    facts = F.mac_facts(np.array([[0.5, bad]], dtype=np.float32))
    assert not facts.weights_normal and facts.keep_exp == 1


def test_f1tenth_avr_flow_facts_tag_every_mac_and_tanh(tmp_path):
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    codegen.generate(model, tmp_path, storage="avr-progmem-far")
    facts = json.loads((tmp_path / "f1tenth.flowfacts.json").read_text())
    lines = (tmp_path / "f1tenth.c").read_text().splitlines()
    by_op = {}
    for v in facts["values"]:
        by_op.setdefault(v["op"], []).append(lines[v["line"] - 1])
    assert len(by_op["mul"]) == 5 and all("NN_READF(w) *" in l for l in by_op["mul"])   # 5 weight chunks
    assert all(("pos += p.f" in l or "neg -= p.f" in l or "d = e + 1.0f" in l or "expf(x + x)" in l
                or "return (e - 1.0f) / d;" in l) for l in by_op["add"])
    assert [l.strip() for l in by_op["div"]] == ["return (e - 1.0f) / d;"]
    assert [l.strip() for l in by_op["exp"]] == ["e = expf(x + x); /* x + x is 2x exactly */"]
    assert {t for v in facts["values"] for t in v["tags"]} == set(F.MUL_TAGS + F.ADD_TAGS + F.EQUAL_TAGS + F.DIV_TAGS
                                                                  + F.EXP_TAGS)
    # e + 1.0f's fact holds only for the call adding +1.0 (gcc -Os emits it on the return line, beside e - 1.0f)
    assert [v["adds"] for v in facts["values"] if "adds" in v] == ["0x3f800000", "0x3f800000"]
    weights = (tmp_path / "f1tenth_weights.c").read_text()
    for layer in model.layers:
        keep = F.mac_facts(layer.kernel).keep_exp
        assert f"const uint8_t f1tenth_{layer.name}_keep_exp = {keep}u;" in weights


def test_arm_threshold_makes_every_kept_product_normal():
    """normal_products (ARM's split layers): keep_exp = 128 - smallest weight exponent, so a kept
    input and any non-zero weight have eW + eX >= 128 and their product is at least 2^-126: never
    subnormal, so __aeabi_fadd never adds two subnormals in a split sum (fadd:same-sign)."""
    kernel = np.array([[0.75, -2.0 ** -20], [0.0, 3.0]], dtype=np.float32)
    facts = F.mac_facts(kernel, normal_products=True)
    assert facts.keep_exp == 21 and facts.exp_sum_min == 128 and "eW + eX >= 128" in facts.why()
    smallest_kept = np.float32(2.0 ** (facts.keep_exp - 127))
    assert np.float32(-2.0 ** -20) * smallest_kept == np.float32(-2.0 ** -126)   # the smallest normal
    assert facts.flush_error == pytest.approx((2.0 ** -20 + 3.0) * 2.0 ** -106)
    assert F.mac_facts(np.full((3, 2), 8.0, np.float32), normal_products=True).keep_exp == 1


def test_f1tenth_soft_float_arm_code_splits_every_layer_with_the_arm_tags(tmp_path):
    """A board without FPU (board key soft_float: arm, rp2040) gets the flush and sign split with
    libgcc's tags, one neuron at a time; neg grows by |p| (an addition, as pos)."""
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    codegen.generate(model, tmp_path, storage="const", soft_float=True)
    facts = json.loads((tmp_path / "f1tenth.flowfacts.json").read_text())
    code = (tmp_path / "f1tenth.c").read_text()
    lines = code.splitlines()
    mac = [v for v in facts["values"] if v["op"] in ("mul", "add") and "p.f" in lines[v["line"] - 1]]
    assert [v["tags"] for v in mac if v["op"] == "mul"] == [
        ["fmul:no.subnormal"] + (["fmul:in.range"] if np.all(np.abs(l.kernel) < 1) else []) for l in model.layers]
    assert sorted(lines[v["line"] - 1].strip() for v in mac if v["op"] == "add") == ["neg += p.f;"] * 3 + ["pos += p.f;"] * 3
    # every bias zero or normal: no operand of the sums is subnormal (fadd:no.subnormal), the one
    # pos - neg of each neuron included
    assert all(F.zero_or_normal(l.bias) for l in model.layers)
    assert all(v["tags"] == list(F.FADD_SAME_SIGN_TAGS + F.FADD_NO_SUBNORMAL_TAGS) for v in mac if v["op"] == "add")
    joins = [v for v in facts["values"] if lines[v["line"] - 1].strip() == "acc = pos - neg;"]
    assert [v["tags"] for v in joins] == [list(F.FADD_NO_SUBNORMAL_TAGS)] * 3
    assert "acc0" not in code and code.count("p.u &= 0x7FFFFFFFUL;") == 3
    weights = (tmp_path / "f1tenth_weights.c").read_text()
    for layer in model.layers:
        keep = F.mac_facts(layer.kernel, normal_products=True).keep_exp
        assert f"const uint8_t f1tenth_{layer.name}_keep_exp = {keep}u;" in weights


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_host_code_has_no_value_facts(tmp_path):
    model, _ = pipeline.load_model(F1TENTH, "f1tenth")
    codegen.generate(model, tmp_path)
    facts = json.loads((tmp_path / "f1tenth.flowfacts.json").read_text())
    # no AVR multiply facts (they hold for the AVR flush shape only); the ARM soft-float tags, proved
    # from the weights and the tanh outputs whatever the code shape, are there for the ARM boards
    mul_tags = {t for v in facts.get("values", []) if v["op"] == "mul" for t in v["tags"]}
    assert mul_tags == {"fmul:one.normal", "fmul:no.subnormal", "fmul:normal.product"}
    assert "nn_bits" not in (tmp_path / "f1tenth.c").read_text()


def test_value_facts_go_to_the_routines_of_their_op():
    placed = avr_paths.value_facts({"values": [
        {"file": "gen/m.c", "line": 7, "op": "mul", "tags": ["__mulsf3:AB.normal"]},
        {"file": "m.c", "line": 7, "op": "add", "tags": ["__addsf3x:same-sign"]}]})
    at = placed[("m.c", 7)]
    assert avr_paths.value_fact_tags(at, ["__mulsf3"]) == {"__mulsf3:AB.normal"}
    assert avr_paths.value_fact_tags(at, ["__subsf3"]) == {"__addsf3x:same-sign"}
    assert avr_paths.value_fact_tags(at, ["__divsf3"]) == frozenset()


def test_an_addend_fact_applies_only_to_the_call_adding_that_constant():
    """e + 1.0f and e - 1.0f on one line: __addsf3 with B = +1.0 adds +1.0; __subsf3 with B = +1.0
    adds -1.0 (opposite signs: no fact); __subsf3 with B = -1.0 adds +1.0; an unknown B gets nothing."""
    placed = avr_paths.value_facts({"values": [
        {"file": "m.c", "line": 9, "op": "add", "tags": ["__addsf3x:same-sign"], "adds": "0x3f800000"}]})
    at = placed[("m.c", 9)]
    assert avr_paths.value_fact_tags(at, ["__addsf3"], 0x3F800000) == {"__addsf3x:same-sign"}
    assert avr_paths.value_fact_tags(at, ["__subsf3"], 0x3F800000) == frozenset()
    assert avr_paths.value_fact_tags(at, ["__subsf3"], 0xBF800000) == {"__addsf3x:same-sign"}
    assert avr_paths.value_fact_tags(at, ["__addsf3"], None) == frozenset()
    with pytest.raises(NNBuildError, match=r"m.c:4: 'adds' is for op 'add'"):
        avr_paths.value_facts({"values": [{"file": "m.c", "line": 4, "op": "mul", "tags": [], "adds": "0x0"}]})


def test_unknown_value_fact_op_is_one_clear_error():
    with pytest.raises(NNBuildError, match=r"m.c:3: unknown op 'sqrt'"):
        avr_paths.value_facts({"values": [{"file": "m.c", "line": 3, "op": "sqrt", "tags": []}]})


def test_every_value_fact_entry_names_its_code():
    """Each avr_libloops.json entry under a value-fact tag says which generated code writes the
    fact ("emitted_by"), so the simavr tests trace it on that code (test_wcet_avr_value_facts.py
    selects F1/10's by it); every value-fact tag has such an entry."""
    from nnbuild.wcet import avr_loops
    from test_wcet_avr_context import fact_code, value_fact_entry
    entries = [e for e in avr_loops.load_table() + avr_loops.load_paths() if value_fact_entry(e)]
    assert all(fact_code(e) for e in entries)
    assert {t for e in entries for t in e["within"]} >= F.VALUE_ONLY_TAGS
