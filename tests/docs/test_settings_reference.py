"""The documentation site: its settings table comes from `Settings` itself, and it builds.

The table is made by the MkDocs hook `docs/hooks/settings_reference.py`; the build runs
`mkdocs build --strict` as `make lint` does, so a broken link fails here too.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "settings_reference.py"
MKDOCS = Path(sys.executable).parent / "mkdocs"
VARIABLES = {f"GPUQ_{name.upper()}": name for name in Settings.model_fields}


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(table: str) -> dict[str, list[str]]:
    """The table's rows by variable: its other cells, unescaped."""
    rows = {}
    for line in table.splitlines():
        match = re.fullmatch(r"\| `(GPUQ_\w+)` \| (.*) \|", line)
        if match:
            cells = re.split(r"(?<!\\) \| ", match[2])
            rows[match[1]] = [cell.replace("\\|", "|") for cell in cells]
    return rows


def parse_default(cell: str, annotation: Any) -> Any:
    """A default cell read back as the setting's value: what the environment would give."""
    if cell == "unset":
        return None
    if cell == "empty":
        return ""
    assert cell.startswith("`") and cell.endswith("`"), cell
    return TypeAdapter(annotation).validate_python(cell[1:-1])


def build(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_setting_has_a_row_with_its_default_and_description() -> None:
    rows = table_rows(load_hook().settings_table())

    assert set(rows) == set(VARIABLES)
    for variable, name in VARIABLES.items():
        field = Settings.model_fields[name]
        default, _accepts, meaning = rows[variable]
        assert parse_default(default, field.annotation) == field.default, variable
        assert meaning, f"{variable} has no description= in service/settings.py"
        assert meaning == " ".join((field.description or "").split()), variable


def test_the_table_names_literal_choices_and_bounds() -> None:
    rows = table_rows(load_hook().settings_table())

    assert rows["GPUQ_OVER_CAP"][1] == "`warn`, `kill`"
    assert rows["GPUQ_WARM_WORKERS"][1] == "integer, ≥ 0, ≤ 64"
    assert rows["GPUQ_SAMPLE_S"][1] == "number, > 0"


def test_the_hook_fills_only_the_marker() -> None:
    hook = load_hook()
    page = f"intro\n\n{hook.MARKER}\n\nnotes\n"

    filled = hook.on_page_markdown(page, page=None, config=None, files=None)

    assert hook.MARKER not in filled
    assert filled.startswith("intro\n\n| variable |")
    assert filled.endswith("\n\nnotes\n")
    assert hook.on_page_markdown("no marker", page=None, config=None, files=None) == "no marker"


def test_the_site_builds_and_its_settings_page_lists_every_variable(tmp_path: Path) -> None:
    result = build(tmp_path, ROOT / "mkdocs.yml")

    assert result.returncode == 0, result.stderr
    html = (tmp_path / "site" / "operators" / "settings" / "index.html").read_text()
    assert "settings-table" not in html
    missing = [v for v in VARIABLES if f"<td><code>{v}</code></td>" not in html]
    assert not missing, f"not in the built settings table: {missing}"


@pytest.mark.parametrize(
    ("breakage", "warning"),
    [
        ("[gone](no-such-page.md)", "is not found among documentation files"),
        ("[gone](jobs/spec.md#no-such-anchor)", "does not contain an anchor '#no-such-anchor'"),
        ("orphan page", 'are not included in the "nav" configuration'),
    ],
)
def test_the_strict_build_fails_on_a_broken_link_or_a_page_outside_the_nav(
    tmp_path: Path, breakage: str, warning: str
) -> None:
    docs = tmp_path / "docs"
    for path in (ROOT / "docs").rglob("*.md"):
        copy = docs / path.relative_to(ROOT / "docs")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    if breakage == "orphan page":
        (docs / "orphan.md").write_text("# Not in the navigation\n")
    else:
        with (docs / "index.md").open("a") as index:
            index.write(f"\n{breakage}\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), hooks=[str(HOOK)], watch=[])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))

    result = build(tmp_path, tmp_path / "mkdocs.yml")

    assert result.returncode != 0
    assert warning in result.stderr
    assert "Aborted with 1 warnings in strict mode" in result.stdout + result.stderr
