"""LeNet-5 as in ACETONE (Example 13; peers.md): 28x28x1 -> conv6@5x5 tanh -> avgpool 2x2 ->
conv16@5x5 tanh -> avgpool 2x2 -> flatten 256 -> dense 120 tanh -> 84 tanh -> 10 softmax.
44,426 parameters, 281,640 MACs. Seeded weights; golden outputs from Keras (see
../make_keras_example.py for how and where to run this once)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from make_keras_example import make  # noqa: E402

EXAMPLE = {"tolerance": 1e-5, "input_range": [0.0, 1.0], "check_inputs": 8, "seed": 1, "deadline_ms": None}


def build(keras):
    L = keras.layers
    return keras.Sequential([
        keras.Input((28, 28, 1), name="image"),
        L.Conv2D(6, 5, activation="tanh", name="conv1"),
        L.AveragePooling2D(2, name="pool1"),
        L.Conv2D(16, 5, activation="tanh", name="conv2"),
        L.AveragePooling2D(2, name="pool2"),
        L.Flatten(name="flat"),
        L.Dense(120, activation="tanh", name="dense1"),
        L.Dense(84, activation="tanh", name="dense2"),
        L.Dense(10, activation="softmax", name="dense3"),
    ], name="lenet5")


if __name__ == "__main__":
    make(HERE, "lenet5", build, EXAMPLE, seed=5, count=8, input_range=(0.0, 1.0))
