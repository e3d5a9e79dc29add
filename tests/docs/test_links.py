"""The docs hold together: every relative link in README.md and docs/ points at a file that exists, the README
stays short and valid (fences closed) and names every `kvtk` sub-command."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
README_MAX_LINES = 200


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "toolkit").rglob("README.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (links there are examples, not links)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_every_relative_link_points_at_a_file():
    broken = []
    for page in pages():
        for target in relative_links(page):
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_the_link_check_sees_links():
    assert len(relative_links(REPO / "README.md")) >= 10


def test_every_page_closes_its_code_fences():
    for page in pages():
        fences = [line for line in page.read_text(encoding="utf-8").splitlines() if FENCE.match(line)]
        assert len(fences) % 2 == 0, page


def test_the_readme_fits_on_a_few_screens_and_names_every_command():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    commands = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse has no public API
    missing = [name for name in commands if f"`kvtk {name}" not in text]
    assert not missing, missing
