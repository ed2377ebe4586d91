"""Jinja2 environment for the templates beside the generators: strict, deterministic."""

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template, context):
    return _ENV.get_template(template).render(**context)
