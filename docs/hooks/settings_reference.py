"""MkDocs hook: the settings page's table, generated from `service.settings.Settings`.

`mkdocs.yml` names this file under `hooks:`. Wherever a page holds the marker below, the
hook puts a table of every field of the settings model: its `GPUQ_*` variable, its default,
the values it accepts and its description. The table cannot drift from the code because it
is the code; `tests/docs/test_settings_reference.py` checks it.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types

MARKER = "<!-- settings-table -->"
ROOT = Path(__file__).resolve().parents[2]


def _settings_model() -> Any:
    try:
        from service.settings import Settings
    except ImportError:  # run from a checkout that is not installed: import it from there
        sys.path.insert(0, str(ROOT))
        from service.settings import Settings
    return Settings


def variable(name: str, field: Any, model: Any) -> str:
    """The environment variable that sets a field (its alias, else prefix + NAME)."""
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    if alias:
        return alias.upper()
    return f"{model.model_config.get('env_prefix', '')}{name}".upper()


def format_default(value: Any) -> str:
    """A default as one would write it in the environment: `30`, `0.25`, `0`, unset, empty."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def accepted(field: Any) -> str:
    """What a field accepts beyond its type: a Literal's values or a number's bounds."""
    annotation = field.annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    bounds = []
    for rule in field.metadata:
        for kind, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(rule, getattr(annotated_types, kind.capitalize())):
                bounds.append(f"{sign} {_number(getattr(rule, kind))}")
    kinds = {bool: "`0` or `1`", int: "integer", float: "number"}
    parts = [kinds[annotation]] if annotation in kinds else []
    return ", ".join(parts + bounds)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_table() -> str:
    """The Markdown table of every service setting, in the model's order."""
    model = _settings_model()
    lines = [
        "| variable | default | accepts | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in model.model_fields.items():
        cells = [
            f"`{variable(name, field, model)}`",
            format_default(field.default),
            accepted(field),
            field.description or "",
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs's hook: put the table where a page holds the marker."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())
