"""The site's pages, its nav, its home page and the README's "Read more" agree: a page added
under docs/ and left out of either list fails here."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HOME = DOCS / "index.md"
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)")


def pages() -> set[Path]:
    """Every page of the site: the Markdown files under docs/ but its MkDocs hooks."""
    return {path for path in DOCS.rglob("*.md") if DOCS / "hooks" not in path.parents}


def linked(text: str, base: Path) -> set[Path]:
    """The local Markdown files that `text`'s links point at, `base` the folder it is in."""
    targets = set()
    for target in LINK.findall(text):
        path = target.partition("#")[0]
        if path.endswith(".md") and "://" not in path:
            targets.add((base / path).resolve())
    return targets


def nav_pages(entries: object) -> list[str]:
    """The files named in an MkDocs `nav`, at any depth."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    return []


def read_more() -> str:
    """The README's "Read more" section, up to the next heading of its level."""
    text = README.read_text()
    start = text.index("\n## Read more\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_nav_names_every_page_and_only_pages_that_exist():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert len(nav) == len(set(nav))
    assert {DOCS / page for page in nav} == pages()


def test_the_home_page_links_every_page():
    missing = pages() - {HOME} - linked(HOME.read_text(), DOCS)
    assert not missing, f"docs/index.md does not link {sorted(map(str, missing))}"


def test_the_readmes_read_more_links_every_page():
    missing = pages() - linked(read_more(), ROOT)
    assert not missing, f"README.md's Read more does not link {sorted(map(str, missing))}"


def test_the_link_reader_finds_relative_links_and_skips_urls():
    text = "[a](jobs/cli.md#json) [b](../README.md) [c](https://x.org/y.md) [d](#top)"
    assert linked(text, DOCS) == {DOCS / "jobs" / "cli.md", README}
