"""NNet front-end (ACAS Xu text format): the three real ACAS Xu networks of ../shared/data/nnet/
give, through nnbuild's reference, the golden outputs of that folder's README (raw inputs in, raw
scores out: clamp, normalisation and output scaling included) and what a plain numpy reading of the
file gives; a small hand-written file round-trips; hostile files are refused in one line naming the
file and the line. The e2e tier builds the acasxu example on AVR and checks the generated C against
the goldens."""

import json
import os

import numpy as np
import pytest

from conftest import SHARED, copy_project, needs_avr, scons, shared_file
from nnbuild import frontends
from nnbuild import limits
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnet
from nnbuild.ir import reference

NETS = ("1_1", "3_3", "5_9")
#: ../shared/data/nnet/README.md, "Golden values (our reader, float64, reference semantics)"
GOLDEN_INPUT = [5000.0, 0.5, -0.5, 500.0, 400.0]
GOLDENS = {
    "1_1": [17.5072124179, 18.3311613714, 16.3951714299, 10.757405097, 9.6708094014],
    "3_3": [35.2870694825, 36.0068458989, 23.1079237569, 33.907997987, 9.3624878373],
    "5_9": [14.4543936012, 14.6868414375, 0.636194956, 15.0231450425, 1.9999378476],
}
MEANS_INPUT = [19791.091, 0.0, 0.0, 650.0, 600.0]
MEANS_GOLDEN_1_1 = [-0.4084289687, 0.5207054911, 0.5012315366, 0.5027865376, 0.5034111659]


def net_path(net):
    return shared_file("data", "nnet", f"ACASXU_run2a_{net}_batch_2000.nnet")


# ----------------------------------------------------------------------------- independent numpy


def plain_numpy(path, x):
    """The file evaluated as Reluplex's nnet.cpp does, straight from its text (no nnbuild code)."""
    rows = [[float(v) for v in line.split(",") if v.strip()]
            for line in open(path) if line.strip() and not line.startswith("//")]
    n_layers = int(rows[0][0])
    sizes = [int(v) for v in rows[1]]
    mins, maxs, means, ranges = (np.array(r) for r in rows[3:7])
    at, y = 7, np.array(x, np.float64)
    n_in = sizes[0]
    for i in range(n_in):
        y[..., i] = np.where(y[..., i] > maxs[i], maxs[i], np.where(y[..., i] < mins[i], mins[i], y[..., i]))
    y = (y - means[:n_in]) / ranges[:n_in]
    for layer in range(n_layers):
        w = np.array(rows[at:at + sizes[layer + 1]])
        at += sizes[layer + 1]
        b = np.array([r[0] for r in rows[at:at + sizes[layer + 1]]])
        at += sizes[layer + 1]
        y = y @ w.T + b
        if layer < n_layers - 1:
            y = np.maximum(y, 0)
    return y * ranges[n_in] + means[n_in]


# ----------------------------------------------------------------------------- the real networks


@pytest.mark.parametrize("net", NETS)
def test_real_network_matches_the_readme_goldens(net):
    model = frontends.load(net_path(net))
    out = reference.run(model, np.array(GOLDEN_INPUT))
    np.testing.assert_allclose(out, GOLDENS[net], rtol=0, atol=1e-9)


def test_means_input_gives_the_readme_golden():
    model = frontends.load(net_path("1_1"))
    np.testing.assert_allclose(reference.run(model, np.array(MEANS_INPUT)), MEANS_GOLDEN_1_1, rtol=0, atol=1e-9)


@pytest.mark.parametrize("net", NETS)
def test_real_network_matches_plain_numpy_inside_and_outside_the_limits(net):
    path = net_path(net)
    model = frontends.load(path)
    rng = np.random.default_rng(3)
    lo = np.array([0.0, -3.141593, -3.141593, 100.0, 0.0])
    hi = np.array([60760.0, 3.141593, 3.141593, 1200.0, 1200.0])
    x = lo - (hi - lo) + 3 * (hi - lo) * rng.random((200, 5))  # two thirds of the values are clamped
    np.testing.assert_allclose(reference.run(model, x), plain_numpy(path, x), rtol=1e-12, atol=1e-9)


def test_real_network_structure_and_clamp():
    path = net_path("1_1")
    model = frontends.load(path)
    assert model.name == "ACASXU_run2a_1_1_batch_2000" and model.input_shape == (5,)
    assert [l.name for l in model.layers] == (["clamp_min", "clamp_max", "sub_mean", "div_range"]
                                              + [f"layer_{k}" for k in range(1, 8)] + ["mul_range", "add_mean"])
    dense = [l for l in model.layers if l.kind == "dense"]
    assert [l.kernel.shape for l in dense] == [(5, 50)] + [(50, 50)] * 5 + [(50, 5)]
    assert [l.activation for l in dense] == ["relu"] * 6 + ["linear"]
    # the file's first row holds the weights into neuron 1: the kernel's first column
    assert dense[0].kernel[:, 0].tolist() == [5.40062e-02, -2.61092e+00, -1.80027e-01, 2.42194e-01, 1.41407e-01]
    assert model.layers[2].constants[0][1].tolist() == [19791.091, 0.0, 0.0, 650.0, 600.0]
    assert model.layers[-2].constants[0][1].tolist() == [373.94992] * 5
    assert model.meta["format"] == "nnet" and model.meta["layer_sizes"] == [5] + [50] * 6 + [5]
    at_limit = reference.run(model, np.array([60760.0, 3.141593, -3.141593, 1200.0, 0.0]))
    beyond = reference.run(model, np.array([1e6, 10.0, -10.0, 5000.0, -3.0]))
    np.testing.assert_array_equal(at_limit, beyond)
    assert frontends.format_for(path).name == "nnet"


# ----------------------------------------------------------------------------- hand-written files


def nnet_text(sizes, mins, maxs, means, ranges, weights, biases, *, header=("// test network",), trailing=",",
              newline="\n"):
    """An NNet file's text (weights[l] is [out][in], as in the file)."""
    def line(values):
        return ",".join(repr(float(v)) if not isinstance(v, int) else str(v) for v in values) + trailing

    lines = list(header) + [line([len(sizes) - 1, sizes[0], sizes[-1], max(sizes)]), line(sizes), line([0]),
                            line(mins), line(maxs), line(means), line(ranges)]
    for w, b in zip(weights, biases):
        lines += [line(row) for row in w] + [line([v]) for v in b]
    return newline.join(lines) + newline


SMALL = dict(sizes=[2, 3, 1], mins=[-1.0, 0.0], maxs=[1.0, 10.0], means=[0.5, 5.0, 2.0], ranges=[2.0, 4.0, 3.0],
             weights=[[[1.0, -2.0], [0.5, 0.25], [-1.0, 1.0]], [[1.0, 2.0, -3.0]]],
             biases=[[0.1, -0.2, 0.3], [0.5]])


def small_expected(x):
    """SMALL by hand: clamp, normalise, relu hidden layer, linear output, scale back."""
    x = np.clip(np.asarray(x, np.float64), [-1.0, 0.0], [1.0, 10.0])
    z = (x - [0.5, 5.0]) / [2.0, 4.0]
    h = np.maximum(z @ np.array(SMALL["weights"][0]).T + SMALL["biases"][0], 0)
    return (h @ np.array(SMALL["weights"][1]).T + SMALL["biases"][1]) * 3.0 + 2.0


def write(tmp_path, text, name="net.nnet"):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1") if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("style", [dict(), dict(trailing=""), dict(newline="\r\n"), dict(header=())])
def test_small_network_round_trip(tmp_path, style):
    path = write(tmp_path, nnet_text(**SMALL, **style))
    model = frontends.load(path)
    dense = [l for l in model.layers if l.kind == "dense"]
    np.testing.assert_array_equal(dense[0].kernel, np.array(SMALL["weights"][0]).T)
    np.testing.assert_array_equal(dense[1].kernel, np.array(SMALL["weights"][1]).T)
    np.testing.assert_array_equal(dense[0].bias, SMALL["biases"][0])
    consts = [l.constants[0][1].tolist() for l in model.layers if l.kind == "elementwise"]
    assert consts == [[-1.0, 0.0], [1.0, 10.0], [0.5, 5.0], [2.0, 4.0], [3.0], [2.0]]
    x = np.array([[0.0, 0.0], [1.0, 5.0], [-3.0, 20.0], [0.3, 7.5], [2.0, -1.0], [-0.7, 9.0]])
    np.testing.assert_allclose(reference.run(model, x), small_expected(x), rtol=0, atol=1e-12)
    # the loaded model written back gives the same file's semantics
    again = nnet_text(sizes=[2, 3, 1], mins=consts[0], maxs=consts[1], means=consts[2] + consts[5],
                      ranges=consts[3] + consts[4], weights=[l.kernel.T.tolist() for l in dense],
                      biases=[l.bias.tolist() for l in dense])
    assert frontends.load(write(tmp_path, again, "again.nnet")).layers[4].kernel.tolist() == dense[0].kernel.tolist()


def test_spaces_and_blank_lines_are_allowed(tmp_path):
    text = nnet_text(**SMALL).replace(",", " , ").replace("\n0,\n", "\n\n0,\n\n")
    model = frontends.load(write(tmp_path, text))
    np.testing.assert_allclose(reference.run(model, np.array([0.3, 7.5])), small_expected([0.3, 7.5]), atol=1e-12)


# ----------------------------------------------------------------------------- hostile files


def lines_of(**changes):
    return nnet_text(**{**SMALL, **changes}).split("\n")


def replace_line(number, text):
    """SMALL's text with line `number` (1-based, header line 1) replaced."""
    lines = lines_of()
    lines[number - 1] = text
    return "\n".join(lines)


HOSTILE = {
    "empty": ("", "no data after the '//' header"),
    "header only": ("// nothing else\n// still nothing\n", "no data after the '//' header"),
    "binary junk": (b"\x00\x01\x02\xff\xfe", "not ASCII"),
    "non-ascii in data": (replace_line(5, "-1.0,0.0\xe9,"), "line 5: holds bytes that are not ASCII"),
    "truncated in the biases": ("\n".join(lines_of()[:-3]), "truncated: the layer sizes need 12 more lines"),
    "truncated mid-row": ("\n".join(lines_of()[:9] + ["1.0,"]), "line 10: truncated: the layer sizes need 12"),
    "row too short": (replace_line(9, "1.0,"), "line 9: the weights into neuron 1 (of 3) line has 1 value(s), "
                                               "expected 2"),
    "row too long": (replace_line(10, "0.5,0.25,0.75,"), "line 10: the weights into neuron 2 (of 3) line has 3"),
    "two biases on one line": (replace_line(12, "0.1,0.2,"), "line 12: the bias 1 (of 3) line has 2 value(s)"),
    "numLayers disagrees with the sizes": (replace_line(2, "3,2,1,3,"), "line 3: the layer sizes line has 3 "
                                                                        "value(s), expected 4"),
    "sizes disagree with the inputs": (replace_line(2, "2,3,1,3,"), "layer sizes run 2..1, the header says 3 inputs"),
    "maxLayerSize wrong": (replace_line(2, "2,2,1,7,"), "the largest layer size is 3, the header's maxLayerSize 7"),
    "header short": (replace_line(2, "2,2,1,"), "line 2: the numLayers, numInputs, numOutputs, maxLayerSize line "
                                                "has 3 value(s), expected 4"),
    "NaN weight": (replace_line(9, "nan,1.0,"), "line 9: weights into neuron 1 (of 3): 'nan' is not a decimal number"),
    "infinite weight": (replace_line(9, "inf,1.0,"), "'inf' is not a decimal number"),
    "overflowing weight": (replace_line(9, "1e999,1.0,"), "line 9: weights into neuron 1 (of 3): '1e999' is beyond "
                                                          "the float32 range"),
    "beyond float32": (replace_line(13, "4e38,"), "line 13: bias 2 (of 3): '4e38' is beyond the float32 range"),
    "NaN mean": (replace_line(7, "0.5,NaN,2.0,"), "line 7: means"),
    "not a number": (replace_line(8, "2.0,four,3.0,"), "line 8: ranges (one per input, then one for the outputs): "
                                                       "'four' is not a decimal number"),
    "hex number": (replace_line(9, "0x10,1.0,"), "'0x10' is not a decimal number"),
    "underscore number": (replace_line(9, "1_0,1.0,"), "'1_0' is not a decimal number"),
    "float size": (replace_line(3, "2.0,3,1,"), "line 3: layer sizes: '2.0' is not an integer"),
    "negative size": (replace_line(3, "2,-3,1,"), "layer size -3 (position 2) is not in 1..1048576"),
    "zero size": (replace_line(3, "2,0,1,"), "layer size 0 (position 2) is not in 1..1048576"),
    "huge layer count": (replace_line(2, "1000000000,2,1,3,"), "numLayers 1000000000 is not in 1..1024"),
    "huge size": (replace_line(2, "2,2,1,1000000,").replace("\n2,3,1,", "\n2,1000000,1,"),
                  "the layer sizes need 3000000 weights, more than a"),
    "size beyond the bound": (replace_line(2, "2,2,1,2000000,").replace("\n2,3,1,", "\n2,2000000,1,"),
                              "layer size 2000000 (position 2) is not in 1..1048576"),
    "many-digit integer": (replace_line(2, "2,2,1," + "9" * 5000 + ","), "is not an integer (at most 12 digits)"),
    "minimum above maximum": (replace_line(5, "2.0,-1.0,"), "line 6: input 1: minimum 2 is above maximum 1"),
    "zero range": (replace_line(8, "2.0,0.0,3.0,"), "line 8: input 2: range 0 cannot divide"),
    "subnormal range": (replace_line(8, "1e-40,4.0,3.0,"), "input 1: range 1e-40 cannot divide"),
    "too few means": (replace_line(7, "0.5,5.0,"), "line 7: the means (one per input, then one for the outputs) "
                                                   "line has 2 value(s), expected 3"),
    "missing flag and everything after": ("\n".join(lines_of()[:3]), "file ends before the obsolete flag"),
    "trailing data": (nnet_text(**SMALL) + "1.0,\n2.0,\n", "line 17: 2 line(s) of data after the last layer's biases"),
    "comment after the header": (replace_line(4, "// sneaky"), "line 4: a '//' comment after the header"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_is_refused_in_one_line(tmp_path, case):
    text, expected = HOSTILE[case]
    path = write(tmp_path, text)
    with pytest.raises(NNBuildError) as error:
        frontends.load(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(path) + ": "), message
    assert expected in message, message


def test_every_truncation_is_refused_in_one_line(tmp_path):
    text = nnet_text(**SMALL).encode()
    last_line = text.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_line):  # a cut inside the last number can leave another number ("0.5" -> "0.")
        path = write(tmp_path, text[:cut])
        with pytest.raises(NNBuildError) as error:
            frontends.load(path)
        assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_size_bound_is_checked_before_reading(tmp_path, monkeypatch):
    path = write(tmp_path, nnet_text(**SMALL))
    monkeypatch.setattr(nnet, "MAX_BYTES", 100)
    with pytest.raises(NNBuildError, match=r"file is \d+ bytes \(at most 100 read\)"):
        frontends.load(path)


def test_layer_sizes_are_bounded_before_anything_is_read(tmp_path, monkeypatch):
    """Sizes the file claims are checked against limits.py from the header lines (nothing after the flag
    line is read): 4097 x 4097 weights in one layer, 3 million neurons (6 million short lines: 1.6 GB and
    minutes before), too many weights in all."""
    def refusal(path):
        read = nnet._Lines.values
        lines_read = []
        monkeypatch.setattr(nnet._Lines, "values", lambda self, *a, **k: lines_read.append(a) or read(self, *a, **k))
        with pytest.raises(NNBuildError) as error:
            frontends.load(path)
        monkeypatch.setattr(nnet._Lines, "values", read)
        assert len(lines_read) <= 3, lines_read
        return str(error.value)

    wide = write(tmp_path, "2,4097,1,4097,\n4097,4097,1,\n0,\n", "wide.nnet")
    assert refusal(wide) == (f"{wide}: line 2: layer 1 is 4097 x 4097: 16785409 weights, more than "
                             f"{limits.MAX_TENSOR_ELEMENTS} per layer (limits.MAX_TENSOR_ELEMENTS)")
    lines = write(tmp_path, "6,1,1,1000000,\n" + "1,1000000," * 3 + "1,\n0,\n", "lines.nnet")
    assert "line 2: the layer sizes make 3000003 neurons, more than 1048576 (limits.MAX_NNET_NEURONS)" in refusal(lines)
    monkeypatch.setattr(limits, "MAX_MODEL_ELEMENTS", 8)
    assert "the layer sizes need 9 weights, more than 8 (limits.MAX_MODEL_ELEMENTS)" in refusal(
        write(tmp_path, nnet_text(**SMALL)))


def test_a_line_of_millions_of_fields_is_refused_before_it_is_split(tmp_path):
    text = replace_line(9, "1.0," * 3_000_000)
    with pytest.raises(NNBuildError, match=r"line 9: the weights into neuron 1 \(of 3\) line has 3000001 "
                                           r"comma-separated fields, expected 2 values"):
        frontends.load(write(tmp_path, text))


def test_long_rows_read_by_numpy_equal_the_decimals(tmp_path):
    """Rows beyond 8 values are converted by numpy at once: the same float64 values as float()."""
    row = ["0.1", "-2.5e-3", "1.", ".5", "+3", "1e-7", "123456.789", "-0", "7.000000000000001", "3.4e38"]
    text = nnet_text(sizes=[10, 1], mins=[-1.0] * 10, maxs=[1.0] * 10, means=[0.0] * 11, ranges=[1.0] * 11,
                     weights=[[[0.0] * 10]], biases=[[0.0]]).replace(",".join(["0.0"] * 10) + ",\n0.0,\n",
                                                                 ",".join(row) + ",\n0.0,\n")
    kernel = frontends.load(write(tmp_path, text)).layers[4].kernel
    assert kernel[:, 0].tolist() == [float(v) for v in row]


# ----------------------------------------------------------------------------- e2e: generated C


@pytest.mark.e2e
@pytest.mark.parametrize("net", NETS)
def test_generated_host_c_gives_the_goldens(tmp_path, net, run_cli):
    """The v2 C of each real network (float32) against the README's float64 goldens, by `nnbuild
    check` in this process (run_cli; the command in its own process: test_cli)."""
    data = tmp_path / "goldens.npz"
    x = [GOLDEN_INPUT] + ([MEANS_INPUT] if net == "1_1" else [])
    y = [GOLDENS[net]] + ([MEANS_GOLDEN_1_1] if net == "1_1" else [])
    np.savez(data, x=np.array(x), y=np.array(y))
    run = run_cli("check", net_path(net), "--data", data, "--json", "--tolerance", "1e-3")
    assert run.returncode == 0, run.stdout + run.stderr
    host = json.loads(run.stdout)["semantic"]["runs"]["host"]
    assert host["vs_framework"] <= 1e-3, host  # float32 C against the float64 goldens (measured: 1.3e-5 for 1_1)


@pytest.mark.e2e
@needs_avr
def test_acasxu_example_builds_on_avr_with_wcet_and_deadline(tmp_path):
    """`scons target=avr model=acasxu` in a copy of the project, ../shared beside it (a link)."""
    shared_file("data", "nnet", "ACASXU_run2a_1_1_batch_2000.nnet")
    (tmp_path / "main").mkdir()
    project = copy_project(tmp_path / "main")
    os.symlink(SHARED, tmp_path / "shared")
    result = scons(project, "target=avr", "model=acasxu")
    assert result.returncode == 0, result.stdout + result.stderr
    with open(project / "build/avr/acasxu/report.json") as f:
        report = json.load(f)
    assert report["precision"] == "float32" and report["shape"] == "v2" and report["deadline_ms"] == 1000
    assert report["measured_inputs"] == 82
    assert 0 < report["measured_cycles"] <= report["wcet_cycles"] <= 20_000_000  # 1000 ms at 20 MHz
    assert report["max_abs_error"] <= 1e-3
    assert (project / "build/avr/acasxu/gate.json").exists()
    tight = scons(project, "target=avr", "model=acasxu", "deadline=100ms")
    assert tight.returncode != 0 and "> deadline 100 ms" in tight.stderr


def test_mutated_files_load_or_are_refused_by_the_loader_itself(tmp_path):
    """Random byte edits of a valid file: each loads, or is refused by the NNet loader's own checks
    (never by the last-resort 'malformed model file' catch of an unchecked exception)."""
    text = bytearray(nnet_text(**SMALL).encode())
    rng = np.random.default_rng(12)
    alphabet = b"0123456789.,-+eE \n/naifx\xff"
    refused = 0
    for trial in range(400):
        data = bytearray(text)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            action = int(rng.integers(0, 3))
            if action == 0:
                data[at] = alphabet[int(rng.integers(0, len(alphabet)))]
            elif action == 1:
                del data[at]
            else:
                data.insert(at, alphabet[int(rng.integers(0, len(alphabet)))])
        path = write(tmp_path, bytes(data), f"m{trial}.nnet")
        try:
            frontends.load(path)
        except NNBuildError as error:
            refused += 1
            assert "\n" not in str(error) and "malformed model file" not in str(error), str(error)
    assert refused > 100
