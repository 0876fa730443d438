"""What changed between two snapshots' files and two specs: pure, for `gpuq diff`."""

import difflib
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Text files bigger than this are compared, not shown line by line.
MAX_SHOWN_BYTES = 1 << 20


@dataclass
class FileChanges:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: a unified diff of each changed text file (links as their targets)
    text: list[str] = field(default_factory=list)


def files_of(tar_path: Path) -> dict[str, bytes]:
    """Each member's content: a file's bytes, a link as `-> target` (never followed)."""
    found: dict[str, bytes] = {}
    with tarfile.open(tar_path, "r:") as tar:
        for member in tar:
            if member.issym():
                found[member.name] = f"-> {member.linkname}".encode()
            elif member.isfile():
                data = tar.extractfile(member)
                found[member.name] = data.read() if data is not None else b""
    return found


def compare_files(first: dict[str, bytes], second: dict[str, bytes]) -> FileChanges:
    changes = FileChanges(
        added=sorted(second.keys() - first.keys()),
        removed=sorted(first.keys() - second.keys()),
        changed=sorted(n for n in first.keys() & second.keys() if first[n] != second[n]),
    )
    for name in changes.changed:
        changes.text.append(_unified(name, first[name], second[name]))
    for name in changes.added:
        changes.text.append(_unified(name, None, second[name]))
    for name in changes.removed:
        changes.text.append(_unified(name, first[name], None))
    return changes


def _unified(name: str, old: bytes | None, new: bytes | None) -> str:
    texts = [_shown_text(b) for b in (old, new)]
    if any(t is None for t in texts if t is not False):
        return f"Binary files a/{name} and b/{name} differ\n"
    old_lines, new_lines = ([] if t is False else str(t).splitlines(True) for t in texts)
    lines = difflib.unified_diff(
        old_lines,
        new_lines,
        "/dev/null" if old is None else f"a/{name}",
        "/dev/null" if new is None else f"b/{name}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _shown_text(content: bytes | None) -> str | bool | None:
    """A file's text; False: no file; None: not shown as text (binary, or too big)."""
    if content is None:
        return False
    if len(content) > MAX_SHOWN_BYTES or b"\0" in content:
        return None
    try:
        return content.decode()
    except UnicodeDecodeError:
        return None


def compare_specs(first: dict[str, Any], second: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Each field (dotted path) whose value differs: (field, first's, second's)."""
    a, b = dict(_flat(first)), dict(_flat(second))
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def _flat(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from _flat(inner, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), value
