"""cppcheck reports nothing on the generated C and the check main built around it, for the cases of
test_c_warnings.py (its own file so that pytest-xdist runs it beside the compiler cases).

The repo's large examples add size, not code paths: their cppcheck runs (up to 45 s each on lenet5)
are kept to the storages where size changes the code (AVR far storage splits rows beyond avr-gcc's
object limit and reads beyond 64 KB with ELPM: f1tenth in fixed point, cifarnet); every other
storage and precision, and lenet5 and the float f1tenth, are rendered by the same template
branches in the small models' cases.

cppcheck checks each file once per preprocessor configuration it finds. The prelude every shape
renders has two compiler branches besides the storage's `__AVR__` one: `__GNUC__` (the noinline
attribute, the host's unrolling pragmas) and `__PATMOS__` (the loop-bound pragmas), the same text in
every case. v3's unrolled C and the large examples are read without them (`-U`: their two remaining
configurations, AVR and not, are the ones their code differs in; half the run); every other case
reads every configuration, those two branches included, in its first storage; its other storages
read them too only where their `__GNUC__`/`__PATMOS__` blocks are not all the first storage's (the
host layout's vector code is a `__GNUC__` branch of its own: const-simd reads every configuration),
so each such block is read in every case, and every storage reads the configurations its code
differs in. The int8 operator sets read in the far storage only compare theirs with cnn_int8's
const storage (the same int8 prelude)."""

import re

import shutil
import subprocess

import pytest

from test_c_warnings import CASES, E2E, check_main, generated  # noqa: F401 (generated: the module fixture)

#: cppcheck: every check family but `information` (which only reports its own configuration
#: limits) and `unusedFunction` (needs the whole program). --suppress=missingIncludeSystem:
#: cppcheck is deliberately not given the system headers (its manual advises against it; it
#: knows the standard library itself), so it would report every #include <...> as not found.
CPPCHECK = ["cppcheck", "--enable=warning,style,performance,portability", "--std=c99", "--language=c",
            "--error-exitcode=1", "--inline-suppr", "--quiet", "--suppress=missingIncludeSystem",
            "--template={file}:{line}: {severity}: {message} [{id}]"]

#: the prelude's compiler branches, read in every case but the costly ones (see the module docstring)
PRELUDE_BRANCHES = ["-U__GNUC__", "-U__PATMOS__"]
#: the cases read without them: v3's unrolled C (4-9 s a run with them) and the large examples
WITHOUT_PRELUDE_BRANCHES = ("tinycnn-v3",)

#: the large examples' storages cppcheck still reads (see the module docstring)
LARGE = ("f1tenth", "cifarnet", "lenet5")
LARGE_STORAGES = {"f1tenth-q16-acc32": ("avr-progmem-far",), "f1tenth-q8": ("avr-progmem-far",),
                  "cifarnet-v1": ("const", "avr-progmem-far", "avr-progmem-near"),
                  "cifarnet-v2": ("avr-progmem-far",)}
#: small cases whose storages and precisions share one template branch: v3's unrolled fixed point
#: (8-11 s a cppcheck run) in one storage per precision, each int8 operator set in the far storage
#: (its near and const reads are the cnn_int8 case's); v3 in float reads no weight array (literals
#: in the code), so its storages differ only in the unused read macros of the prelude, which the
#: v1/v2 cases of each storage read where they are used: const only
SMALL_STORAGES = {"tinycnn-v3": ("const",), "tinycnn-v3-q16": ("const",), "tinycnn-v3-q16-acc32": ("avr-progmem-far",),
                  "tinycnn-v3-q8": ("avr-progmem-near",),
                  **{f"{name}-int8": ("avr-progmem-far",) for name in
                     ("mlp", "core", "arith", "pooled", "conv1d", "merge", "mixed", "extra", "acts", "kws_lstm")}}


def storages_of(label, storages):
    if label in SMALL_STORAGES:
        return tuple(s for s in storages if s in SMALL_STORAGES[label])
    if not label.startswith(LARGE):
        return storages
    return tuple(s for s in storages if s in LARGE_STORAGES.get(label, ()))


#: the int8 operator sets read in the far storage only: their prelude is cnn_int8's (its const storage)
INT8_PRELUDE = "cnn-int8"


def cppcheck_variants():
    cases = {p.values[0]: p.values for p in CASES}
    for p in CASES:
        label, load, shape, precision, storages, rng = p.values
        read = storages_of(label, storages)
        for storage in read:
            first = (label, load, shape, precision, read[0], rng)
            if precision == "int8" and label != INT8_PRELUDE:
                first = (*cases[INT8_PRELUDE][:4], "const", cases[INT8_PRELUDE][5])
            # cppcheck takes 0.5-6 s a case: e2e tier (the quick tier compiles each case under -Werror)
            yield pytest.param(label, load, shape, precision, storage, rng, first, id=f"{label}-{storage}",
                               marks=list(p.marks) + E2E)


def prelude_blocks(gen_dir):
    """The generated files' `#if` blocks on the prelude's compiler macros (`__GNUC__`, `__PATMOS__`)."""
    blocks = set()
    for path in sorted(gen_dir.glob("*.[ch]")):
        lines = path.read_text().splitlines()
        k = 0
        while k < len(lines):
            if not re.match(r"\s*#\s*if.*(__GNUC__|__PATMOS__)", lines[k]):
                k += 1
                continue
            depth, end = 1, k + 1
            while depth and end < len(lines):
                depth += bool(re.match(r"\s*#\s*if", lines[end])) - bool(re.match(r"\s*#\s*endif", lines[end]))
                end += 1
            blocks.add("\n".join(lines[k:end]))
            k = end
    return blocks


@pytest.mark.skipif(not shutil.which("cppcheck"), reason="cppcheck not installed (apt-get install cppcheck)")
@pytest.mark.parametrize("label,load,shape,precision,storage,input_range,first", list(cppcheck_variants()))
def test_cppcheck_finds_nothing(tmp_path, generated, label, load, shape, precision, storage, input_range, first):
    """cppcheck checks every preprocessor configuration it finds (so both the AVR and the other
    branch of the far-storage code), the generated files and the check main built with them."""
    gen_dir, model = generated(label, load, shape, precision, storage, input_range)
    main, defines = check_main(model)
    sources = sorted(gen_dir.glob("*.c"))
    read_in_first = (first[0], first[4]) != (label, storage) and prelude_blocks(gen_dir) <= prelude_blocks(generated(*first)[0])
    configurations = PRELUDE_BRANCHES if label.startswith(WITHOUT_PRELUDE_BRANCHES + LARGE) or read_in_first else []
    # the generated C first (every configuration), then the main with the -D flags that bind it
    for files, extra in ((sources, configurations), ([main], defines)):
        result = subprocess.run([*CPPCHECK, f"-I{gen_dir}", *extra, *map(str, files)], cwd=tmp_path,
                                capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr.strip(), \
            f"cppcheck on {[f.name for f in files]}:\n{result.stderr[:6000]}"
