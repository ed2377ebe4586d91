"""builtin-avr WCET and stack bounds on the v1 code shape (ACETONE V1: a table of layers with kernel
and activation function pointers, one generic loop): its calls through pointers (AVR ICALL) get
their targets from the flow facts' `indirect` entries, given by source file + line.

A small CNN built from nnbuild.ir.graph layers (every v1 kernel behind the table's ICALL, three
activations behind nn_apply's ICALL) is generated with shape v1 for the avr board, compiled with
check_main.c like pipeline.build_check_program, and measured on simavr (cycles and stack): both
static bounds must be at or above every measured case. Run with -s to see the numbers.
"""

import json

import numpy as np
import pytest

from conftest import needs_avr
from nnbuild import codegen, passes, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.runners import CHECK_MAIN, check_main_defines, simavr
from nnbuild.wcet import avr_ipet
from nnbuild.wcet.avr_stack import stack_bound

pytestmark = [pytest.mark.e2e, needs_avr]


def small_cnn():
    """6x6x2: zero padding, conv relu, max pool, avg pool, add, batchnorm tanh, concat, dense sigmoid,
    softmax: every v1 kernel, relu/tanh/sigmoid through the activation pointer."""
    from nnbuild.ir.graph import (Add, BatchNorm, Concatenate, Conv2D, Dense, Flatten, Model, Pool2D,
                                  ZeroPadding2D)
    rng = np.random.default_rng(11)

    def f(*s):
        return (rng.normal(size=s) * 0.5).astype(np.float32)

    layers = [ZeroPadding2D("zp", (1, 0, 1, 0)),
              Conv2D("c1", f(3, 3, 2, 3), f(3), padding=(1, 1, 1, 1), activation="relu"),
              Pool2D("mp", "max", (2, 2), (2, 2), (0, 0, 0, 0)),
              Pool2D("ap", "avg", (2, 2), (2, 2), (0, 0, 0, 0), source_type="AveragePooling2D"),
              Add("add"),
              BatchNorm("bn", np.abs(f(3)) + 0.5, f(3), f(3), np.abs(f(3)) + 0.5, 1e-3, activation="tanh"),
              Concatenate("cat", 2),
              Flatten("fl"),
              Dense("d1", f(54, 5), f(5), "sigmoid"),
              Dense("d2", f(5, 4), f(4), "softmax")]
    edges = {"zp": ("input",), "c1": ("zp",), "mp": ("c1",), "ap": ("c1",), "add": ("mp", "ap"),
             "bn": ("add",), "cat": ("bn", "mp"), "fl": ("cat",), "d1": ("fl",), "d2": ("d1",)}
    return Model("v1net", (6, 6, 2), layers, edges=edges)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from nnbuild.compilers import family
    work = tmp_path_factory.mktemp("v1avr")
    board = pipeline.load_board("avr")
    model, log = passes.run(small_cnn(), None)
    files = codegen.generate(model, work / "gen", shape="v1", storage=board.get("weights_storage", "const"),
                             passes_log=log)
    sources = [f for f in files if str(f).endswith(".c")] + [CHECK_MAIN]
    defines = check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size)
    elf = family(board).build_executable(board, sources, work / "check.elf", include_dirs=[work / "gen"],
                                         defines=[d[2:] for d in defines])
    facts = json.loads((work / "gen" / f"{model.name}.flowfacts.json").read_text())
    return board, model, elf, facts, work


def test_v1_flow_facts_name_both_pointer_calls_by_line(built):
    _, _, _, facts, _ = built
    sites = facts["indirect"]
    assert len(sites) == 2 and all("file" in s and "line" in s for s in sites)
    targets = sorted(t for s in sites for t in s["targets"])
    assert {"nn_conv2d", "nn_dense", "nn_pool2d", "nn_add", "nn_copy", "nn_softmax", "nn_relu",
            "nn_tanh", "nn_sigmoid"} <= set(targets)


def test_v1_bounds_cover_simavr(built):
    board, model, elf, facts, work = built
    entry = f"{model.name}_infer"
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-3, 3, (5, model.input_size)), np.zeros((1, model.input_size)),
                        np.full((1, model.input_size), 3.0)]).astype(np.float32)
    harness = simavr.build_harness(work / "simavr_run")
    _, cycles, stack = simavr.run_cases(elf, x, model.output_size, entry_symbol=entry, mcu=board["mcu"],
                                        freq=board["clock_hz"], harness=harness, nm=board["nm"],
                                        with_stack=True)
    sb = stack_bound(elf, entry, board, facts)
    res = avr_ipet.analyze(elf, entry, facts, board, str(work / "wcet"))
    print(f"\nv1 on AVR: WCET bound {res.cycles} >= measured max {cycles.max()} cycles "
          f"(ratio {res.cycles / cycles.max():.2f}); stack bound {sb['bytes']} >= measured max {stack.max()} "
          f"bytes; deepest path {' -> '.join(sb['path'])}")
    assert res.cycles >= cycles.max() > 1000
    assert sb["bytes"] >= stack.max() > 0
    # the deepest stack path goes through a pointer call from the generic loop
    assert sb["path"][0] == entry and sb["path"][1].startswith("nn_")
    # the facts as a JSON path work the same
    path = work / "gen" / f"{model.name}.flowfacts.json"
    assert stack_bound(elf, entry, board, str(path))["bytes"] == sb["bytes"]


def test_v1_icall_without_a_fact_is_refused_naming_function_and_address(built):
    board, model, elf, facts, work = built
    entry = f"{model.name}_infer"
    with pytest.raises(NNBuildError, match=r"indirect call 'icall': callee unknown in \w+\+0x[0-9a-f]+ at 0x"):
        stack_bound(elf, entry, board)
    loop_only = dict(facts, indirect=[s for s in facts["indirect"] if "nn_conv2d" in s["targets"]])
    # nn_apply's pointer call: an ICALL, or an IJMP when avr-gcc makes it a sibling call
    with pytest.raises(NNBuildError, match=r"stack: (indirect call 'icall': callee unknown|ijmp to a target "
                                           r"the analysis cannot follow) in nn_[\w.]+\+0x[0-9a-f]+ at 0x"):
        stack_bound(elf, entry, board, loop_only)
    with pytest.raises(NNBuildError, match=r"indirect i(call|jmp) in nn_[\w.]+ at nn_[\w.]+\+0x[0-9a-f]+ "
                                           r"\(0x[0-9a-f]+\)"):
        avr_ipet.analyze(elf, entry, loop_only, board, None)
