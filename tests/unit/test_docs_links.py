"""The docs that ship: every relative link resolves, and none points at the developers' shared folder.

Links are `[text](target)` outside code (fenced blocks and inline code spans are skipped). A target with a scheme
(`https:`, `mailto:`) is not checked. `path#anchor` into a markdown file, or `#anchor` alone, must name a heading
of that file under GitHub's rules: the heading's text, lower-cased, with punctuation other than `-` and `_` removed
and spaces turned into `-`; a repeated heading gets `-1`, `-2`, ... appended.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINKED_DOCS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
SHIPPED_DOCS = [*LINKED_DOCS, REPO / "bench" / "README.md"]

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """The text without fenced code blocks (a `#` line in one is not a heading, brackets there are not links)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link markup reduced to its text, then lower case, punctuation except `-` and
    `_` removed, spaces to `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_prose(path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return _LINK.findall(_CODE_SPAN.sub("", _prose(path.read_text(encoding="utf-8"))))


def test_slug_follows_githubs_rules() -> None:
    assert slug("Durability: what survives what") == "durability-what-survives-what"
    assert slug("Prometheus: `GET /metrics`") == "prometheus-get-metrics"
    assert slug("nsq_to_file — archive topics to files") == "nsq_to_file--archive-topics-to-files"
    assert slug("Kafka's names") == "kafkas-names"


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if not target or _SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", SHIPPED_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_pointer_to_the_shared_folder(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert "../shared" not in text and "/work/shared" not in text


def test_readme_stays_short() -> None:
    """The README is for users (issue 31): history and design go to docs/, development notes to CONTRIBUTING.md."""
    assert len((REPO / "README.md").read_text().splitlines()) < 250
