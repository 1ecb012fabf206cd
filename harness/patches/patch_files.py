"""What a patch file says, read without applying it: the files it touches
(relative to site-packages), its subject, and which patch of a series `git am`
stopped at.

Patches are `git format-patch` files against Ray's repository, so their paths
start `a/python/`: `-p2` strips that, leaving paths relative to site-packages
(docs/architecture.md, "The patch workflow").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError

# Paths in the patches are `a/python/ray/...`; site-packages holds `ray/...`,
# so applying there strips two components (`-p2`).
SOURCE_ROOT = "python"
STRIP = 2
# Where a Ray checkout (and the workspace, and a stand-in) keeps the serve tree.
SERVE = f"{SOURCE_ROOT}/ray/serve"


def _unquote(token: str) -> str:
    """Undo git's C-style quoting of unusual path names ("a/caf\\303\\251.py")."""
    if not (token.startswith('"') and token.endswith('"')):
        return token
    body, out, i = token[1:-1], bytearray(), 0
    simple = {
        "n": "\n",
        "t": "\t",
        '"': '"',
        "\\": "\\",
        "a": "\a",
        "b": "\b",
        "f": "\f",
        "r": "\r",
        "v": "\v",
    }
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out += simple[nxt].encode()
                i += 2
                continue
            if body[i + 1 : i + 4].isdigit():
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out += char.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _diff_git_paths(rest: str) -> list[str]:
    """Both names on a `diff --git a/X b/Y` line; unquoted names with spaces
    are only recoverable when X == Y, which is the case without ---/+++ lines."""
    if rest.startswith('"'):
        end = rest.find('"', 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find('"', end + 1)
        if end < 0:
            return []
        first, second = rest[: end + 1], rest[end + 1 :].strip()
        return [_unquote(first), _unquote(second)]
    mid = (len(rest) - 1) // 2
    if rest[mid] == " " and rest[:mid][2:] == rest[mid + 1 :][2:]:
        return [rest[:mid], rest[mid + 1 :]]
    return []


def patch_paths(patch: Path) -> list[str]:
    """Files a patch touches, relative to site-packages (`-p2`), in order."""
    try:
        lines = patch.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError as exc:
        raise HarnessError(f"cannot read patch {patch}: {exc}") from exc
    raw: list[str] = []
    in_header = False
    for line in lines:
        if line.startswith("diff --git "):
            in_header = True
            # Only a fallback: mode-only and binary changes have no ---/+++ lines.
            for name in _diff_git_paths(line[len("diff --git ") :]):
                raw.append(name.split("/", 1)[-1])
            continue
        if not in_header:
            continue
        if line.startswith("@@") or line.startswith("GIT binary patch"):
            # Hunk bodies follow; their lines could look like headers.
            in_header = False
        elif line.startswith(("--- ", "+++ ")):
            name = _unquote(line[4:].split("\t", 1)[0])
            if name != "/dev/null":
                raw.append(name.split("/", 1)[-1])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            raw.append(_unquote(line.split(" ", 2)[2]))
    if not raw:
        raise HarnessError(
            f"{patch.name} contains no file changes git could read. Nothing was changed. "
            f"Regenerate it with `make export-patches` (an empty commit cannot be a patch)."
        )
    paths: list[str] = []
    for name in raw:
        parts = PurePosixPath(name).parts
        if len(parts) < STRIP or parts[0] != SOURCE_ROOT or ".." in parts:
            raise HarnessError(
                f"{patch.name} touches {name}, which is outside {SOURCE_ROOT}/ and so has "
                f"no counterpart in site-packages. Nothing was changed. Keep the series to "
                f"{SOURCE_ROOT}/ray/serve, or drop that file from the patch."
            )
        rel = "/".join(parts[1:])
        if rel not in paths:
            paths.append(rel)
    return paths


def patch_subject(patch: Path) -> str:
    """The Subject: header of a patch file, as written (the file name if none)."""
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("Subject: "):
            return line[len("Subject: ") :]
    return patch.name


def failed_patch(output: str, patches: Sequence[Path]) -> str:
    """Which of `patches` a `git am` run stopped at, read from its output."""
    match = re.search(r"Patch failed at (\d+)", output)
    if match and 0 < int(match.group(1)) <= len(patches):
        index = int(match.group(1))
        return f"{patches[index - 1].name} (patch {index} of {len(patches)})"
    return "one of the patches"
