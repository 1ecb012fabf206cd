"""The repository is self-contained: no tracked file points a reader at notes a
clone does not have (a design file, research notes, a shared folder beside the
repo) or names upstream work by a private label. docs/architecture.md is where
those facts live now; its glossary names the upstream work.

patches/ is left out: the patch messages are upstream PR descriptions with their
own review, checked on their own. This file is left out because it must spell
the patterns it looks for.

The user's pages link each other: every relative link in README.md,
CONTRIBUTING.md and docs/*.md must name a file that exists and, for a
#fragment, a heading that file has (GitHub's anchors). README.md stays short:
at most README_MAX_LINES lines, the reference in docs/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# What may not appear, with what to write instead.
FORBIDDEN = [
    (re.compile(r"specs/", re.I), "a research note outside the repo"),
    (re.compile(r"DESIGN\.md", re.I), "a design file outside the repo"),
    (re.compile(r"\.\./shared", re.I), "a folder beside the repo"),
    (re.compile(r"steering", re.I), "notes outside the repo"),
    (
        re.compile(r"seeds?[ _-]?0\d", re.I),
        "a private label: say 'the two-phase drain', 'the spot-notice ladder', 'the "
        "spot-notice acceptance table' or 'push-based health' (docs/architecture.md)",
    ),
]


def pointers(text: str) -> list[tuple[int, str, str]]:
    """(line number, the match, why it is out) for every forbidden pattern in text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in FORBIDDEN:
            found += [(number, m.group(0), why) for m in pattern.finditer(line)]
    return found


def tracked_text_files() -> list[str]:
    # Tracked files and new ones not yet added (what the next commit may hold),
    # not what .gitignore leaves out (build/, .venv).
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = []
    for name in sorted(set(filter(None, out.split("\0")))):
        if name.startswith("patches/") or name == THIS:
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        files.append(name)
    return files


def test_the_walk_sees_the_files_it_must_check() -> None:
    files = set(tracked_text_files())
    for name in (
        "README.md",
        "Makefile",
        ".ci/run",
        "docs/architecture.md",
        "harness/ladder/model.py",
        "examples/ladder/spot-notice-ladder.yaml",
    ):
        assert name in files, name
    assert THIS not in files
    assert not any(name.startswith("patches/") for name in files)


def test_the_patterns_catch_what_they_are_for() -> None:
    caught = [
        m
        for _, m, _ in pointers(
            "see Specs/x.md; design.md; ../shared/a; the "
            "Steering notes; Seed 002; seed-000; seeds 000; "
            "test_seed_002"
        )
    ]
    assert caught == [
        "Specs/",
        "design.md",
        "../shared",
        "Steering",
        "Seed 00",
        "seed-00",
        "seeds 00",
        "seed_00",
    ]
    assert pointers("random.Random(spec.seed); seed: int = 1; LoadSpec; specs = []") == []


def test_no_tracked_file_points_outside_the_repo() -> None:
    problems = []
    for name in tracked_text_files():
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        problems += [f"{name}:{number}: {match!r} ({why})" for number, match, why in pointers(text)]
    assert not problems, "\n".join(problems)


# The user's pages: README.md links the reference pages in docs/.
README_MAX_LINES = 250


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target): the text may wrap onto the next line; the target has no spaces.
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def without_code(text: str) -> str:
    """The text with fenced blocks blanked (their lines kept, so line numbers hold)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (no code marks, a link's
    text only), lower-cased, punctuation but hyphens and underscores dropped,
    each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading's gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(without_code(text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link that is not to another site."""
    text = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), without_code(text))
    links = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        links.append((text.count("\n", 0, m.start()) + 1, target))
    return links


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, target in relative_links(page.read_text()):
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.is_relative_to(ROOT):
            problems.append(f"{where}: outside the repository")
        elif not linked.exists():
            problems.append(f"{where}: no such file")
        elif fragment and linked.suffix != ".md":
            problems.append(f"{where}: a #fragment into a file that is not markdown")
        elif fragment and fragment not in anchors(linked.read_text()):
            problems.append(f"{where}: {linked.relative_to(ROOT)} has no heading #{fragment}")
    return problems


def test_slugs_are_githubs() -> None:
    assert slug("The timeout ladder: orderings A-J") == "the-timeout-ladder-orderings-a-j"
    assert slug("`make bench-load`") == "make-bench-load"
    assert slug("What setting up does, and what `make test` costs") == (
        "what-setting-up-does-and-what-make-test-costs"
    )
    assert slug("Set-up: two commands") == "set-up-two-commands"
    assert slug("See [the glossary](#glossary) and `run_once`") == "see-the-glossary-and-run_once"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## B!\n") == {"a", "a-1", "b"}


def test_the_link_check_catches_what_it_is_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Its part\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n"
        "[ok](docs/other.md) [ok](docs/other.md#its-part) [ok](#top)\n"
        "[a link that\nwraps](docs/other.md#other) [web](https://example.org/x#y)\n"
        "`[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "[gone](docs/gone.md) [bad anchor](docs/other.md#missing) [self](#nope)\n"
        "[out](../elsewhere.md)\n"
    )
    assert broken_links(page) == [
        "README.md:9: docs/gone.md: no such file",
        "README.md:9: docs/other.md#missing: docs/other.md has no heading #missing",
        "README.md:9: #nope: README.md has no heading #nope",
        "README.md:10: ../elsewhere.md: outside the repository",
    ]


def test_every_relative_link_in_the_pages_resolves() -> None:
    pages = markdown_pages()
    assert ROOT / "docs" / "architecture.md" in pages
    problems = [problem for page in pages for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_readme_links_every_page_in_docs() -> None:
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for _, target in relative_links((ROOT / "README.md").read_text())
    }
    unlinked = [
        page.relative_to(ROOT).as_posix()
        for page in sorted((ROOT / "docs").glob("*.md"))
        if page.resolve() not in linked
    ]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: "
        "move reference text into docs/ and link it"
    )
