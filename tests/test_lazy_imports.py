"""What the CLI and option parsing import: the names they need (shapes, precisions, storages, DSP
capabilities, boards' keys) live in light modules, so `python -m nnbuild --help`, every CMake step
and every scons run start without numpy, jinja2, h5py or jsonschema unless a step needs them.
Structural (sys.modules in a fresh interpreter), not timed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nnbuild import codegen

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "jinja2", "h5py", "jsonschema", "onnx", "scipy")


def loaded_after(code):
    """The heavy packages in sys.modules after `code` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


#: `import nnbuild.cli` imports nnbuild.options and nnbuild.boards, so the modules each of the three
#: imports alone loads are among those of the parser's snippet: that one runs in the quick tier, the
#: three alone (repetitions while cli imports the other two) e2e
@pytest.mark.parametrize("code", [
    pytest.param("import nnbuild.cli", marks=pytest.mark.e2e),
    "import nnbuild.cli\nnnbuild.cli.parser()",
    pytest.param("import nnbuild.boards", marks=pytest.mark.e2e),
    pytest.param("import nnbuild.options", marks=pytest.mark.e2e),
])
def test_light_paths_load_no_heavy_package(code):
    if code.startswith("import nnbuild.cli\n"):   # what makes the three imports alone repetitions here
        code += "\nimport sys\nassert 'nnbuild.options' in sys.modules and 'nnbuild.boards' in sys.modules"
    assert loaded_after(code) == []


def test_help_loads_no_heavy_package():
    probe = ("import runpy, sys\nsys.argv = ['nnbuild', '--help']\n"
             "try:\n    runpy.run_module('nnbuild', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0\n")
    assert loaded_after(probe) == []


def test_shapes_load_jinja2_only_to_render():
    assert "jinja2" not in loaded_after("from nnbuild import codegen\ncodegen.shapes_of_kind('nn')")


def test_telling_a_model_files_kind_loads_no_hdf5():
    assert "h5py" not in loaded_after("from nnbuild import frontends\nfrontends.kind_of('model.h5')")


def test_loading_a_board_loads_no_scipy():
    assert "scipy" not in loaded_after("from nnbuild import boards\nboards.load_board('avr').analyzer")


def test_dsp_capabilities_have_one_home():
    from nnbuild.codegen import common
    assert common.DSP_CAPABILITIES is codegen.DSP_CAPABILITIES


def test_numerics_names_load_on_first_use():
    from nnbuild import numerics
    from nnbuild.numerics import plan, tables
    assert numerics.quantize is plan.quantize and numerics.tanh_table is tables.tanh_table
    assert set(numerics.LAZY) <= set(dir(numerics))
    with pytest.raises(AttributeError):
        numerics.no_such_name
