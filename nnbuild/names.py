"""Text from model files on its way into C: checked identifiers and inert comment text.

Model files are untrusted input. Every string a model file carries (layer names, types, file names,
labels) reaches generated C through one of two doors, both here:

* `c_identifier`: a valid, non-reserved C identifier (symbol prefixes, file stems);
* `c_text`: text that is inert both inside a /* comment */ and inside a "string literal": only
  characters that can neither end the comment or string, nor start a new one, nor splice lines,
  nor form a trigraph are kept; every other byte becomes a three-digit octal escape `\\ooo`
  (unambiguous: the backslash itself is escaped).

This module imports nothing of nnbuild: every layer (front-ends, IR, codegen) may use it.
"""

import re

#: C keywords (C11) an identifier must not be.
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic "
    "_Imaginary _Noreturn _Static_assert _Thread_local".split()
)

#: File stems a generated `<name>.h` / `<name>.c` must not take: the C99/C11 standard headers and
#: the common libc/newlib/avr-libc ones (a `math.h` beside the code would hide <math.h>), and the
#: files nnbuild itself compiles next to the generated ones (check mains, harness, example main).
RESERVED_FILE_STEMS = frozenset(
    "assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal "
    "stdalign stdarg stdatomic stdbool stddef stdint stdio stdlib stdnoreturn string tgmath threads "
    "time uchar wchar wctype alloca malloc memory strings unistd endian "
    "main check check_main tpg_check_main check_io simavr_run firmware nn_prelude".split()
)

#: Longest name nnbuild takes for a model, an item, a board, a Gravity module or a TPG name: the 63
#: significant characters C99 guarantees for an internal identifier or macro name (5.2.4.1). Names
#: become C symbols and file names (`<name>.flowfacts.json`, its atomic temp file,
#: build/<board>/<name>/), and 63 characters keep every one far below the file systems' 255 bytes.
MAX_NAME_LENGTH = 63

_SAFE_TEXT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                       " _.,:;+-=()[]{}<>#@!$%^&|~'")


def c_identifier(text) -> str:
    """`text` made a valid, non-reserved C identifier that is also a safe file stem.

    Non [A-Za-z0-9_] characters become '_', a leading digit or underscore gets an 'm' prefix
    (leading '_' names are reserved in C), keywords and reserved file stems (standard headers,
    nnbuild's own files) get a '_model' suffix, '' becomes 'model'.
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(text))
    if not name:
        return "model"
    if name[0].isdigit() or name[0] == "_":
        name = "m" + name
    if name in C_KEYWORDS or name.lower() in RESERVED_FILE_STEMS:
        name += "_model"
    return name


def fresh_identifier(base, taken) -> str:
    """c_identifier(base), suffixed _2, _3, ... until it is not in the set `taken`, which it joins:
    distinct names for layers whose names differ only in characters C does not take."""
    text = c_identifier(base)
    candidate, k = text, 1
    while candidate in taken:
        k += 1
        candidate = f"{text}_{k}"
    taken.add(candidate)
    return candidate


def is_c_identifier(text) -> bool:
    """True when `text` is already what `c_identifier` would make of it, and no longer than
    MAX_NAME_LENGTH."""
    return isinstance(text, str) and len(text) <= MAX_NAME_LENGTH and c_identifier(text) == text


def too_long(text, what="name"):
    """One line when `text` is longer than MAX_NAME_LENGTH (for the caller's error), else None."""
    if len(str(text)) > MAX_NAME_LENGTH:
        shown = one_line(str(text)[:24])
        return f"{what} '{shown}...' has {len(str(text)):,} characters; at most {MAX_NAME_LENGTH} are allowed"
    return None


def c_text(text) -> str:
    """`text` made inert inside a C comment or string literal (see the module docstring)."""
    out = []
    for ch in str(text):
        if ch in _SAFE_TEXT:
            out.append(ch)
        else:
            out.extend("\\%03o" % byte for byte in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def one_line(text) -> str:
    """`text` for a one-line terminal message: whitespace runs folded, other control characters
    (terminal escapes) shown as \\xNN."""
    text = " ".join(str(text).split())
    return "".join(ch if ch.isprintable() else "\\x%02x" % ord(ch) if ord(ch) < 256 else "\\u%04x" % ord(ch)
                   for ch in text)
