"""Generated files are taken by their role (codegen.output_roles), never by a suffix a model name
can end with too: a model named `model_weights` compiles each file once."""

import shutil

import numpy as np
import pytest

from conftest import REPO
from nnbuild import codegen, kinds, pipeline

XOR = REPO / "firmware_examples" / "xor" / "xor.h5"


@pytest.mark.parametrize("shape", ["mlp", "v2", "gravity"])
def test_roles_name_each_file_once(shape):
    roles = codegen.output_roles("model_weights", shape)
    assert list(roles.values()) == codegen.outputs("model_weights", shape)
    assert roles["code"] == "model_weights.c" and roles["trace"] == "model_weights.trace.json"
    assert roles.get("weights", "model_weights_weights.c") == "model_weights_weights.c"


def test_a_model_named_like_a_weights_file_compiles_each_source_once():
    the_plan = pipeline.plan(name="model_weights", model=str(XOR), board="host", kind=kinds.of_file(str(XOR)))
    check = next(t for t in the_plan.tasks if t.step == "program")
    sources = check.sources["sources"]
    assert len(sources) == len(set(sources)) == 3
    assert sources[:2] == ["gen/model_weights.c", "gen/model_weights_weights.c"]


def test_check_builds_a_model_named_model_weights(tmp_path):
    model = tmp_path / "model_weights.h5"
    shutil.copy(XOR, model)
    data = tmp_path / "d.npz"
    np.savez(data, x=np.array([[0, 1], [1, 1]], dtype=np.float32), y=np.array([[1.0], [0.0]]))
    results = pipeline.check(model, data, tolerance=1e-3, build_dir=tmp_path / "b")
    assert results["runs"]["host"]["vs_framework"] < 1e-3
