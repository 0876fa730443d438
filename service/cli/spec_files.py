"""Job specs from JSON or YAML files, read the way the API reads JSON."""

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
import yaml


class _SpecLoader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-3` as a string; specs mean a number, as JSON and YAML 1.2 do."""


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_spec(path: str) -> Any:
    """A job spec from a JSON or YAML file (`-`: standard input); raises `OSError` or
    `yaml.YAMLError` when it cannot be read."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    try:
        return json.loads(text)
    except ValueError:
        return yaml.load(text, Loader=_SpecLoader)


def read_spec_file(path: str) -> Any:
    """`load_spec`, or exit 2 saying why the file cannot be read."""
    try:
        return load_spec(path)
    except (OSError, yaml.YAMLError) as exc:
        print(f"gpuq: cannot read {path}: {exc}", file=sys.stderr)
        raise typer.Exit(2) from exc
