"""`gpuq --help` and every command's help read as paragraphs at any terminal width: a
line of a paragraph ends only where the next word would not fit."""

import inspect
import itertools
import re

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from service.cli.app import build_app, reflow

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROW = re.compile(r"│ (\S+)(\s+)\S")


def _commands(command, path=()):
    """`(path, command)` for the root and every command and group under it."""
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(build_app())))


def _help_lines(path: tuple[str, ...], columns: int) -> list[str]:
    env = {"COLUMNS": str(columns), "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(build_app(), [*path, "--help"], env=env)
    assert result.exit_code == 0, result.output
    return [ANSI.sub("", line).rstrip() for line in result.output.splitlines()]


def _paragraphs(text: str | None) -> list[str]:
    if not text:
        return []
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", inspect.cleandoc(text))]


def _assert_filled(lines: list[str], width: int, where: str) -> None:
    """Each line but the last is as full as greedy wrapping at `width` leaves it."""
    for line, following in itertools.pairwise(lines):
        next_word = following.split()[0]
        assert len(line) + 1 + len(next_word) > width, (
            f"{where}: {line!r} breaks before {next_word!r} at width {width}"
        )


def _description(lines: list[str]) -> list[list[str]]:
    """The help's own text, between the usage line and the first panel, as paragraphs of
    lines without the left margin."""
    start = next(i for i, line in enumerate(lines) if line.startswith(" Usage:"))
    while lines[start].strip():  # the usage may take more than one line
        start += 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line[1:])
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _command_rows(lines: list[str]) -> tuple[dict[str, list[str]], int]:
    """The commands panel's rows, name to description lines, and the description
    column's width."""
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    rows: dict[str, list[str]] = {}
    first = ROW.match(lines[start + 1])
    assert first
    column = 2 + len(first[1]) + len(first[2])
    width = len(lines[start + 1]) - 2 - column  # "│ " on the left, " │" on the right
    name = ""
    for line in lines[start + 1 : end]:
        if line[2] != " ":
            name = line[2:column].strip()
            rows[name] = []
        rows[name].append(line[column:-1].rstrip())
    return rows, width


@pytest.mark.parametrize("columns", [80, 120])
def test_every_help_reads_as_paragraphs(columns):
    for path, command in COMMANDS:
        where = " ".join(("gpuq", *path))
        lines = _help_lines(path, columns)
        rendered = _description(lines)
        assert [" ".join(p) for p in rendered] == _paragraphs(command.help), where
        for paragraph in rendered:
            _assert_filled(paragraph, columns - 2, where)
        if isinstance(command, TyperGroup):
            rows, width = _command_rows(lines)
            assert set(rows) == set(command.commands), where
            for name, row in rows.items():
                sub = command.commands[name]
                expected = (_paragraphs(sub.short_help or sub.help) or [""])[0]
                assert " ".join(row) == expected, f"{where} {name}"
                _assert_filled(row, width, f"{where}: {name} in the command list")


def test_reflow_joins_lines_but_keeps_paragraphs_and_click_marks():
    text = """First line
        goes on.

        \b
        kept
          as written

        Shown.
        \f
        Dropped."""
    assert reflow(text) == "First line goes on.\n\n\b\nkept\n  as written\n\nShown."
    assert reflow(None) is None
