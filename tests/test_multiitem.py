"""Multi-item NNEF systems (issue 15): parser, writer, split, the IR they build."""

import json
import shutil
from pathlib import Path

import pytest

from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_items
from nnbuild.frontends import nnef_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"
#: the example's split, as a map tensor -> item (the paper's example 5)
EXAMPLE_MAP = {"o1": "ITEM1", "o2": "ITEM2", "o3": "ITEM2", "o4": "ITEM3", "o5": "ITEM3",
               "o6": "ITEM1", "o7": "ITEM1", "out": "ITEM1"}


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


def example_copy(tmp_path, replace=()):
    """The example folder in tmp_path, its document edited by (old, new) replacements."""
    folder = tmp_path / "sys.nnef"
    shutil.copytree(EXAMPLE, folder)
    text = (folder / "graph.nnef").read_text()
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    (folder / "graph.nnef").write_text(text)
    return folder


def test_example_parses_into_items_syncs_and_segments():
    system = nnef_items.load(EXAMPLE)
    assert [i.name for i in system.items] == ["ITEM1", "ITEM2", "ITEM3"]
    assert system.input == "e1" and system.output == "out"
    sync1 = system.syncs["vsync1"]
    assert (sync1.writer, sync1.tensor, sync1.reader_items, sync1.shape) == \
        ("ITEM1", "o1", ("ITEM2", "ITEM3"), (1, 4, 8, 8))
    item1 = system.item("ITEM1")
    assert [k for k, _ in item1.actions] == ["run", "send", "get", "get", "run"]
    tail = item1.segments["multiitem_cnn_ITEM1_1"]
    assert tail.inputs == ("o3", "o5") and tail.instructions == ("o6", "o7", "out")
    assert tail.model.input_shape == (512,) and tail.model.output_shape == (10,)
    assert system.whole.output_shape == (10,)
    assert system.item("ITEM3").uses("v5") == 1 and item1.uses("o1") == 1


def test_write_then_parse_is_identity():
    document = nnef_items.read_document(EXAMPLE)
    text = nnef_items.write(document)
    assert nnef_items.parse(text) == document
    assert nnef_items.write(nnef_items.parse(text)) == text


def test_paper_bracket_lists_and_plain_lists_parse_alike():
    a = nnef_items.parse("version 1.0; graphitem A G([x]) -> ([y]) { y = relu(x); }")
    b = nnef_items.parse("version 1.0; graphitem A G(x) -> (y) { y = relu(x); }")
    assert a == b


def test_json_map_split_round_trips_and_rebuilds_the_example(tmp_path):
    document = nnef_items.read_document(EXAMPLE)
    single = tmp_path / "single.nnef"
    shutil.copytree(EXAMPLE, single)
    (single / "graph.nnef").write_text(nnef_items.write_graph(nnef_items.unsplit(document, EXAMPLE)))
    (tmp_path / "map.json").write_text(json.dumps(EXAMPLE_MAP))
    split = nnef_items.split_model(single, tmp_path / "map.json")
    assert nnef_items.parse(nnef_items.write(split)) == split
    out = tmp_path / "split.nnef"
    shutil.copytree(EXAMPLE, out)
    (out / "graph.nnef").write_text(nnef_items.write(split))
    system = nnef_items.load(out)
    assert {n: (s.writer, s.reader_items) for n, s in system.syncs.items()} == {
        "sync_o1": ("ITEM1", ("ITEM2", "ITEM3")), "sync_o3": ("ITEM2", ("ITEM1",)),
        "sync_o5": ("ITEM3", ("ITEM1",))}


def test_split_map_must_cover_every_instruction(tmp_path):
    document = nnef_items.read_document(EXAMPLE)
    graph = nnef_items.unsplit(document, EXAMPLE)
    partial = {k: v for k, v in EXAMPLE_MAP.items() if k != "o4"}
    with pytest.raises(NNBuildError) as exc:
        nnef_items.split(graph, partial, EXAMPLE / "graph.nnef")
    assert "'o4' (conv) is assigned to no item" in one_line(exc)


@pytest.mark.parametrize("replace, expected", [
    # a get_var with no send_var
    ([("    vsync2 = send_var([ITEM1], o3);\n", "")],
     "item ITEM1: get_var(ITEM2, vsync2) has no matching send_var in item ITEM2"),
    # a send to an item that never gets it
    ([("    o1 = get_var(ITEM1, vsync1);\n    o4", "    o1 = external<scalar>(shape = [1, 4, 8, 8]);\n    o4")],
     "item ITEM3: send_var 'vsync1' of item ITEM1 has no matching get_var in item ITEM3"),
    ([("o3 = get_var(ITEM2, vsync2)", "o3 = get_var(ITEM9, vsync2)")], "item ITEM1: get_var(ITEM9, vsync2): unknown item ITEM9"),
    ([("vsync2 = variablesync<scalar>(shape = [1, 4, 8, 8]);\n    o1", "vsync2 = variablesync<scalar>(shape = [1, 4, 8, 9]);\n    o1")],
     "variablesync 'vsync2'"),
    ([("o5 = conv(o4, v5, v6", "o2 = conv(o4, v5, v6"), ("vsync3 = send_var([ITEM1], o5)", "vsync3 = send_var([ITEM1], o2)")],
     "'o2' is also computed by item"),
])
def test_broken_documents_fail_in_one_line_naming_item_and_variable(tmp_path, replace, expected):
    folder = example_copy(tmp_path, replace)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    text = one_line(exc)
    assert expected in text and "graph.nnef" in text


def test_sync_shape_must_match_the_sent_tensor(tmp_path):
    folder = example_copy(tmp_path, [("[1, 4, 8, 8]", "[1, 4, 8, 7]")])
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    assert "item ITEM1: variablesync 'vsync1' has shape [1, 4, 8, 7] but 'o1' is [1, 4, 8, 8]" in one_line(exc)
