"""Make the PyTorch-exported recurrent fixtures of tests/test_recurrent.py: small LSTM/GRU modules
exported by both of torch.onnx's exporters (TorchScript, `dynamo=False`, and the default dynamo
one), and PyTorch's own outputs on fixed inputs.

PyTorch is not a dependency of nnbuild: this script runs once, by hand, in its own virtual
environment, outside CI, and its outputs are committed:

    python3 -m venv /tmp/torch-venv
    /tmp/torch-venv/bin/pip install torch==2.13.0 onnx onnxscript
    /tmp/torch-venv/bin/python tests/data/onnx_recurrent/make_fixtures.py

It writes, beside itself, for each case C in CASES: C.onnx (weights inside the file) and C.npz
with x (inputs [cases, *sample shape]) and y (PyTorch's outputs [cases, outputs]).
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES = 4
STEPS, FEATURES, HIDDEN, OUTPUTS = 6, 4, 8, 3

#: name -> (cell, batch_first, bidirectional, layers, what the head reads, exporter)
MODELS = {
    "lstm_batch_first_ts": ("LSTM", True, False, 1, "last step", "torchscript"),
    "lstm_time_major_dynamo": ("LSTM", False, False, 1, "last step", "dynamo"),
    "lstm_bidirectional_dynamo": ("LSTM", True, True, 1, "last step", "dynamo"),
    "lstm_two_layers_ts": ("LSTM", True, False, 2, "last step", "torchscript"),
    "gru_hidden_ts": ("GRU", True, False, 1, "h_n", "torchscript"),
    "gru_batch_first_dynamo": ("GRU", True, False, 1, "last step", "dynamo"),
}


def module(torch, cell, batch_first, bidirectional, layers, head):
    class Sequence(torch.nn.Module):
        """A recurrent layer, its last step (or final hidden state) into a Linear head."""

        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, cell)(FEATURES, HIDDEN, batch_first=batch_first,
                                               bidirectional=bidirectional, num_layers=layers)
            self.fc = torch.nn.Linear(HIDDEN * (2 if bidirectional else 1), OUTPUTS)

        def forward(self, x):
            out, state = self.rnn(x)
            if head == "h_n":
                h = state[0] if isinstance(state, tuple) else state
                return self.fc(h[-1])
            return self.fc(out[:, -1, :] if batch_first else out[-1])
    return Sequence()


def main():
    import torch
    for k, (name, (cell, batch_first, bidirectional, layers, head, exporter)) in enumerate(MODELS.items()):
        torch.manual_seed(100 + k)
        model = module(torch, cell, batch_first, bidirectional, layers, head).eval()
        shape = (1, STEPS, FEATURES) if batch_first else (STEPS, 1, FEATURES)
        x = torch.randn(*shape)
        path = HERE / f"{name}.onnx"
        torch.onnx.export(model, (x,), str(path), dynamo=exporter == "dynamo", external_data=False,
                          **({} if exporter == "dynamo" else {"opset_version": 17}))
        xs = torch.randn(CASES, *shape)
        with torch.no_grad():
            ys = torch.stack([model(xi) for xi in xs])
        np.savez(HERE / f"{name}.npz", x=xs.numpy().reshape(CASES, STEPS, FEATURES),
                 y=ys.numpy().reshape(CASES, -1))
        print(name, "written")
    (HERE / "fixtures.txt").write_text(f"torch {torch.__version__}\n")


if __name__ == "__main__":
    main()
