"""Jinja2 environment for the templates beside the generators: strict, deterministic.

Text that comes from a model file (layer names and types, source file names, labels) goes into C
only through the `ctext` filter (nnbuild.names.c_text), which makes it inert inside a comment or a
string literal; symbols come from nnbuild.names.c_identifier. tests/test_injection.py proves it for
every code shape with a canary name.
"""

import functools
from pathlib import Path

from nnbuild.names import c_text

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.lru_cache(maxsize=None)
def environment():
    """The one environment, made on the first render: importing a shape loads no jinja2."""
    import jinja2
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ctext"] = c_text
    from nnbuild.codegen import host_tanh
    env.globals["host_tanh"] = host_tanh   # the const-host tanh table (prelude.c.j2)
    return env


def render(template, context):
    return environment().get_template(template).render(**context)
