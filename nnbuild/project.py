"""Examples as build inputs: `model=f1tenth` means firmware_examples/f1tenth/example.json.

example.json keys: model (file, relative to the example dir), main (optional firmware main.c),
precision, deadline_ms, tolerance, input_range [lo, hi], check_inputs (count), seed; for a Tangled
Program Graph also environment (its description: a JSON file, or a name shipped with nnbuild),
check_data (recorded observations to check with instead of random ones) and requires (said when the
model file is missing, e.g. third-party data in ../shared).
"""

import json
from pathlib import Path

from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "firmware_examples"
DEFAULTS = {"tolerance": 1e-4, "input_range": [-1.0, 1.0], "check_inputs": 32, "seed": 1,
            "deadline_ms": None, "precision": "float32"}


def available_examples(root=EXAMPLES_DIR):
    return sorted(p.parent.name for p in Path(root).glob("*/example.json"))


def resolve(model, root=EXAMPLES_DIR):
    """An example name, or a model file path, as a dict of build inputs with defaults filled in."""
    root = Path(root)
    config_path = root / model / "example.json"
    if config_path.is_file():
        with open(config_path) as f:
            config = {**DEFAULTS, **json.load(f)}
        base = config_path.parent
        config["name"] = c_identifier(model)
        config["model"] = str((base / config["model"]).resolve()) if ".." in config["model"] else str(base / config["model"])
        if not Path(config["model"]).exists():
            raise NNBuildError(f"model file of example '{model}' not found: {config['model']}"
                               + (f" ({config['requires']})" if config.get("requires") else ""), path=config_path)
        if config.get("environment"):
            config["environment"] = environment_path(config["environment"], base)
        if config.get("check_data"):
            config["check_data"] = str((base / config["check_data"]).resolve())
            if not Path(config["check_data"]).exists():
                raise NNBuildError(f"check data of example '{model}' not found: {config['check_data']}"
                                   + (f" ({config['requires']})" if config.get("requires") else ""), path=config_path)
        main = base / config.get("main", "main.c")
        config["main"] = str(main) if main.is_file() else None
        return config
    path = Path(model)
    if path.is_file():
        return {**DEFAULTS, "name": c_identifier(path.stem if path.stem != "architecture" else path.parent.name),
                "model": str(path), "main": None}
    raise NNBuildError(f"model '{model}' is neither an example ({', '.join(available_examples(root))}) "
                       "nor a model file")


def environment_path(spec, base=None):
    """The file of a TPG environment description: a path (relative to `base`, an example's
    directory) or the name of one shipped with nnbuild (sips22-atari); None for none."""
    if not spec:
        return None
    from nnbuild.ir.tpg import Environment
    if base is not None and (Path(base) / spec).is_file():
        return str(Path(base) / spec)
    return str(Environment.resolve(spec))
