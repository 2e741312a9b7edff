"""Every relative link in the README, the docs and the recorded runs' pages names a file that exists and, with a
``#``, one of its headings."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"),
                *ROOT.glob("experiments/runs/*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(page: Path) -> str:
    """The page without its fenced code blocks, whose brackets are code, not links."""
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as hyphens."""
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = sum(1 for s in slugs if s == slug or re.fullmatch(re.escape(slug) + r"-\d+", s))
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"
