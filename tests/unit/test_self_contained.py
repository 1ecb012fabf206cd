"""The repository is self-contained: no tracked file points a reader at notes a
clone does not have (a design file, research notes, a shared folder beside the
repo) or names upstream work by a private label. docs/architecture.md is where
those facts live now; its glossary names the upstream work.

patches/ is left out: the patch messages are upstream PR descriptions with their
own review, checked on their own. This file is left out because it must spell
the patterns it looks for."""

from __future__ import annotations

import re
import subprocess
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
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
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
