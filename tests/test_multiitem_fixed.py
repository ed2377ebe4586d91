"""Multi-item systems in fixed point (issue 15, item 3): each segment in shape v2 with the unsplit
model's proved formats, int16 tensors handed on, bit-equal to the unsplit model's fixed-point code."""

from pathlib import Path

import pytest

from nnbuild.checks import multiitem as multiitem_check
from nnbuild.codegen import multiitem as multiitem_c
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_items
from nnbuild.kinds import multiitem as multiitem_kind
from nnbuild.numerics import graph_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"
FIXED = ("q16-acc32", "q16", "q8")


@pytest.fixture(scope="module")
def example_system():
    return nnef_items.load(EXAMPLE)


def test_segments_keep_the_unsplit_models_formats(example_system):
    whole = graph_plan.quantize_graph(example_system.whole, "q16-acc32", multiitem_c.INPUT_RANGE)
    formats = {op.name: (op.output, op.shift, op.acc_bits) for op in whole.ops}
    packed = example_system.item("ITEM1").segments["multiitem_cnn_ITEM1_1"].model
    plan = graph_plan.segment_plan(whole, packed, {"mi_packed": "o3", "mi_packed_o3_flat": "o3", "mi_packed_o3": "o3",
                                                   "mi_packed_o5_flat": "o5", "mi_packed_o5": "o5"})
    for op in plan.ops:
        if op.name in formats:
            assert (op.output, op.shift, op.acc_bits) == formats[op.name]
    # each slice of the packed vector takes its part's format, whatever the vector's nominal one
    assert plan.formats["mi_packed_o5"] == whole.formats["o5"] and plan.formats["mi_packed_o3"] == whole.formats["o3"]
    with pytest.raises(NNBuildError) as exc:
        graph_plan.segment_plan(whole, packed, {})
    assert "its input 'mi_packed' is no tensor of the whole model's plan" in str(exc.value)


def test_segment_apis_hand_integers_on_between_items(example_system, tmp_path):
    multiitem_c.generate(example_system, tmp_path, shape="v2", precision="q16-acc32", sync="flags")
    header = {p.stem: p.read_text() for p in tmp_path.glob("multiitem_cnn_ITEM*.h") if "weights" not in p.stem}
    assert "_infer(const float in[128], int16_t out[256]);" in header["multiitem_cnn_ITEM1_0"]   # reads the input
    assert "_infer(const int16_t in[512], float out[10]);" in header["multiitem_cnn_ITEM1_1"]    # writes the output
    assert "_infer(const int16_t in[256], int16_t out[256]);" in header["multiitem_cnn_ITEM2_0"]
    system_c = (tmp_path / "multiitem_cnn.c").read_text()
    assert "typedef int16_t nn_mi_value;" in system_c and "static nn_mi_value nn_mi_v_vsync1[256];" in system_c


def test_a_segment_layer_missing_from_the_unsplit_plan_is_refused(example_system):
    whole = graph_plan.quantize_graph(example_system.whole, "q8", multiitem_c.INPUT_RANGE)
    whole.ops = [op for op in whole.ops if op.name != "o3"]
    segment = example_system.item("ITEM2").segments["multiitem_cnn_ITEM2_0"].model
    with pytest.raises(NNBuildError) as exc:
        graph_plan.segment_plan(whole, segment, {"mi_packed_o1": "o1"})
    assert "layer 'o3' is not in the whole model's plan" in str(exc.value)


@pytest.mark.e2e
@pytest.mark.parametrize("precision", FIXED)
def test_host_threads_are_bit_equal_to_the_unsplit_fixed_point_code(example_system, tmp_path, precision):
    record = multiitem_check.check_host(example_system, tmp_path, shape="v2", runs=1000, max_delay_us=200,
                                        precision=precision, cases=8)
    assert record["bit_equal_runs"] == 1000 and record["firing_sequences"] and record["distinct_orders"] > 1
    assert record["timing"]["within_critical_path"] == 1000


@pytest.mark.e2e
def test_avr_schedule_in_q16_acc32_is_bit_equal_and_within_its_wcet(example_system, tmp_path):
    record = multiitem_kind.check_on_board(example_system, "avr", tmp_path, shape="v2", cases=3, precision="q16-acc32")
    assert record["bit_equal_to_unsplit_cases"] == record["cases"] >= 3 and record["max_abs_error"] < 1e-2
    assert max(record["measured_cycles"]) <= record["wcet"]["schedule_cycles"]
    assert record["timing"]["speedup_bound"] > 1.0
