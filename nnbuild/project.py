"""Examples as build inputs: `model=f1tenth` means firmware_examples/f1tenth/example.json.

example.json keys: model (file, relative to the example dir), main (optional firmware main.c),
precision, deadline_ms, tolerance, tolerances ({precision: tolerance}, for precisions whose error the
float tolerance cannot hold, e.g. fixed point), input_range [lo, hi], check_inputs (count), seed; for a Tangled
Program Graph also environment (its description: a JSON file, or a name shipped with nnbuild),
check_data (recorded observations to check with instead of random ones) and requires (said when the
model file is missing, e.g. third-party data in ../shared).
"""

from pathlib import Path

from nnbuild import files, frontends, options
from nnbuild.checks import data as check_data
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "firmware_examples"
#: every key an example.json may hold (a misspelled key is an error, not silently ignored)
EXAMPLE_KEYS = ("model", "main", "precision", "deadline_ms", "tolerance", "tolerances", "input_range", "check_inputs", "seed",
                "environment", "check_data", "requires", "note")
DEFAULTS = {"tolerance": 1e-4, "input_range": [-1.0, 1.0], "check_inputs": 32, "seed": 1,
            "deadline_ms": None, "precision": None}   # None: the model kind's default (float32; int8 full-integer)


def available_examples(root=EXAMPLES_DIR):
    return sorted(p.parent.name for p in Path(root).glob("*/example.json"))


def resolve(model, root=EXAMPLES_DIR):
    """An example name, or a model file path, as a dict of build inputs with defaults filled in."""
    root = Path(root)
    config_path = root / model / "example.json"
    if config_path.is_file():
        config = {**DEFAULTS, **read_example(config_path)}
        base = config_path.parent
        config["name"] = c_identifier(model)
        config["model"] = str((base / config["model"]).resolve()) if ".." in config["model"] else str(base / config["model"])
        if not Path(config["model"]).exists():
            raise NNBuildError(f"model file of example '{model}' not found: {config['model']}"
                               + (f" ({config['requires']})" if config.get("requires") else ""), path=config_path)
        if not (Path(config["model"]).is_file() or frontends.model_file(config["model"])):
            raise NNBuildError(f"key 'model': {config['model']} is neither a model file nor a model folder",
                               path=config_path)
        if config.get("environment"):
            config["environment"] = environment_path(config["environment"], base)
        if config.get("check_data"):
            config["check_data"] = str((base / config["check_data"]).resolve())
            if not Path(config["check_data"]).exists():
                raise NNBuildError(f"check data of example '{model}' not found: {config['check_data']}"
                                   + (f" ({config['requires']})" if config.get("requires") else ""), path=config_path)
            check_data.checked_file(config["check_data"])  # a regular file within limits: SCons hashes it
        main = base / config.get("main", "main.c")
        if "main" in config and not (main.suffix == ".c" and main.is_file()):
            raise NNBuildError(f"'main' must name a C source (.c) beside example.json, not '{config['main']}'",
                               path=config_path)
        config["main"] = str(main) if main.is_file() else None
        return check_example(config, config_path)
    path = Path(model)
    inside = frontends.model_file(path)   # a folder model (NNEF): the build reads this file of it
    if inside:
        return {**DEFAULTS, "name": c_identifier(path.stem), "model": str(inside), "main": None}
    if path.is_file():
        frontends.format_for(path)  # an unknown suffix fails here, in one line, before any step
        return {**DEFAULTS, "name": c_identifier(path.stem if path.stem != "architecture" else path.parent.name),
                "model": str(path), "main": None}
    raise NNBuildError(f"model '{model}' is neither an example ({', '.join(available_examples(root))}) "
                       "nor a model file")


#: the JSON Schema of example.json (shipped in the package)
SCHEMA_FILE = Path(__file__).resolve().parent / "example.schema.json"


def read_example(config_path):
    """example.json as a dict; bad JSON, an unknown key or a value of the wrong type (against
    example.schema.json) is one line naming the file and the key."""
    import json
    config = files.read_json_object(config_path, "example config")
    unknown = sorted(set(config) - set(EXAMPLE_KEYS))
    if unknown:
        raise NNBuildError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(EXAMPLE_KEYS)})", path=config_path)
    problem = files.schema_problem(config, json.loads(SCHEMA_FILE.read_text()))
    if problem:
        raise NNBuildError(problem, path=config_path)
    return config


def check_example(config, config_path):
    """The example's values checked with the same parsers as the command line's."""
    try:
        config["tolerance"] = options.tolerance(config["tolerance"])
        tolerances = config.get("tolerances", {})
        if not isinstance(tolerances, dict):
            raise NNBuildError("'tolerances' must map precision names to tolerances")
        config["tolerances"] = {options.precision(p): options.tolerance(t) for p, t in tolerances.items()}
        config["input_range"] = list(options.input_range(config["input_range"]))
        config["check_inputs"] = options.count(config["check_inputs"])
        if not isinstance(config["seed"], int) or isinstance(config["seed"], bool) or config["seed"] < 0:
            raise NNBuildError(f"seed '{config['seed']}' is not an integer >= 0")
        if config["deadline_ms"] is not None:
            options.deadline_ms(config["deadline_ms"] if isinstance(config["deadline_ms"], (int, float))
                                else f"{config['deadline_ms']}")
        if config["precision"] is not None:
            options.precision(config["precision"], auto=True)
    except NNBuildError as error:
        raise NNBuildError(str(error), path=config_path) from None
    return config


def check_environment(example, override=None):
    """The TPG environment file that applies (command line over example), or None; an environment
    given for a model that is not a Tangled Program Graph is an error, not silently ignored."""
    spec = override or example.get("environment")
    if not spec:
        return None
    if not frontends.takes_option(example["model"], "environment"):
        raise NNBuildError("environment= applies to Tangled Program Graph models (.dot) only",
                           path=example["model"])
    return environment_path(override) if override else example["environment"]


def environment_path(spec, base=None):
    """The file of a TPG environment description: a path (relative to `base`, an example's
    directory) or the name of one shipped with nnbuild (sips22-atari); None for none."""
    if not spec:
        return None
    from nnbuild.ir.tpg import Environment
    if base is not None and (Path(base) / spec).is_file():
        return str(Path(base) / spec)
    return str(Environment.resolve(spec))


def tolerances(example, given=None):
    """(tolerance, {precision: tolerance}) the example's builds are judged by: `given` (the command
    line's) for every precision, else the example's 'tolerance' and its 'tolerances' per precision."""
    if given is not None:
        return given, {}
    return example["tolerance"], example.get("tolerances", {})


def tolerance_for(example, precision, given=None):
    """The tolerance a build of the example in `precision` is judged by (see `tolerances`)."""
    return options.tolerance_of(precision, *tolerances(example, given))
