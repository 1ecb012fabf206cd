"""Running git: the one place that builds a git command line and its environment.

Two kinds of run. Isolated (the default) is for repositories the harness owns
(the workspace, scratch repos): no user or system config, and the settings
that change an exported patch's bytes pinned, so a patch is the same on every
machine. Not isolated is for the user's own Ray checkout: their config and
identity, because the commits made there are theirs to push.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from harness.core import proc
from harness.core.errors import HarnessError

# A fixed identity and date make the harness's own commits, and so their
# hashes, the same on every machine and every rebuild.
_FIXED_NAME = "Ray patch workspace"
_FIXED_EMAIL = "workspace@ray-patches.invalid"
_FIXED_DATE = "@946684800 +0000"
# Who an exported patch file says wrote it: the workspace, not a person. The
# commits that go upstream are made by whoever applies the series to their Ray
# checkout (`contributor_identity`), with their Signed-off-by.
WORKSPACE_AUTHOR = f"{_FIXED_NAME} <{_FIXED_EMAIL}>"

# Settings a repository's own .git/config could change and that would change the
# bytes of an exported patch; `-c` outranks every config file.
_PINNED_CONFIG = (
    "core.quotePath=true",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.suppressBlankEmpty=false",
    "diff.interHunkContext=0",
    "format.forceInBodyFrom=false",
    "format.mboxrd=false",
    "i18n.commitEncoding=UTF-8",
    "i18n.logOutputEncoding=UTF-8",
)


def git_env(isolated: bool, identity: bool = False) -> dict[str, str]:
    # Drop every GIT_* variable that points git at another repository (a hook or
    # an editor may have set them); keep the user's identity unless isolated.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_")
        or (not isolated and key.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")))
    }
    # English messages, because some of them are parsed.
    env["LC_ALL"] = "C"
    env["GIT_TERMINAL_PROMPT"] = "0"
    if isolated:
        env["GIT_CONFIG_GLOBAL"] = os.devnull
        env["GIT_CONFIG_NOSYSTEM"] = "1"
    if identity:
        env.update(
            GIT_AUTHOR_NAME=_FIXED_NAME,
            GIT_AUTHOR_EMAIL=_FIXED_EMAIL,
            GIT_AUTHOR_DATE=_FIXED_DATE,
            GIT_COMMITTER_NAME=_FIXED_NAME,
            GIT_COMMITTER_EMAIL=_FIXED_EMAIL,
            GIT_COMMITTER_DATE=_FIXED_DATE,
        )
    return env


def run_git(
    args: Sequence[str | os.PathLike[str]],
    cwd: Path,
    *,
    isolated: bool = True,
    identity: bool = False,
    ceiling: Path | None = None,
    input: str | None = None,
    stdin: IO[bytes] | None = None,
) -> proc.CompletedProcess[str]:
    """`git ARGS` in `cwd`; the exit code is the caller's to judge. `identity`
    commits as the fixed identity and date; `ceiling` stops git from finding
    a repository above it."""
    cmd: list[str | os.PathLike[str]] = ["git"]
    for setting in _PINNED_CONFIG if isolated else ():
        cmd += ["-c", setting]
    cmd += list(args)
    env = git_env(isolated, identity)
    if ceiling is not None:
        # Stop git from discovering an enclosing repository (site-packages may
        # sit inside this project's checkout) and applying relative to it.
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return proc.run(cmd, cwd=cwd, env=env, input=input, stdin=stdin)


def git_output(
    args: Sequence[str | os.PathLike[str]],
    cwd: Path,
    *,
    isolated: bool = True,
    identity: bool = False,
) -> str:
    """The stdout of `git ARGS`, or a HarnessError with git's own words."""
    result = run_git(args, cwd, isolated=isolated, identity=identity)
    if result.returncode != 0:
        raise HarnessError(
            f"`git {' '.join(map(str, args))}` failed in {cwd}:\n{proc.output_tail(result)}"
        )
    return result.stdout


def operation_in_progress(repo: Path, isolated: bool) -> str | None:
    """What a `git am`, rebase, merge or cherry-pick left unfinished in `repo`, if any."""
    for name, what in (
        ("rebase-apply", "a `git am` or rebase"),
        ("rebase-merge", "a rebase"),
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ):
        path = git_output(["rev-parse", "--git-path", name], repo, isolated=isolated).strip()
        if (repo / path).exists():
            return what
    return None


def uncommitted_paths(repo: Path, isolated: bool) -> list[str]:
    """Files in `repo` with changes not committed, untracked ones included."""
    out = git_output(["status", "--porcelain"], repo, isolated=isolated)
    return [line[3:] for line in out.splitlines() if line.strip()]


# Domains reserved for examples and tests (RFC 2606, RFC 6761): an address there
# reaches no one, so a commit signed off with it certifies nothing.
_RESERVED_DOMAINS = ("example", "invalid", "test", "localhost")
_RESERVED_SECOND_LEVEL = ("example.com", "example.net", "example.org")


def contributor_identity(repo: Path) -> tuple[str, str]:
    """The (name, email) git would author a commit with in the user's own
    `repo`: their config, or GIT_AUTHOR_NAME / GIT_AUTHOR_EMAIL. A HarnessError
    if there is none, or if the address is a placeholder."""
    how = (
        "Set yours with `git config --global user.name 'Your Name'` and `git config "
        "--global user.email you@your.domain`, or GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL."
    )
    result = run_git(["var", "GIT_AUTHOR_IDENT"], repo, isolated=False)
    ident = result.stdout.strip()
    if result.returncode != 0 or "<" not in ident:
        raise HarnessError(
            f"git has no author identity for {repo}: each commit is yours, with your "
            f"Signed-off-by, as Ray requires. {how} Nothing was changed.\n"
            f"{proc.output_tail(result)}"
        )
    name, _, rest = ident.partition("<")
    email = rest.partition(">")[0].strip()
    name = name.strip()
    domain = email.rpartition("@")[2].lower()
    placeholder = (
        not name
        or "@" not in email
        or domain.rsplit(".", 1)[-1] in _RESERVED_DOMAINS
        or any(domain == d or domain.endswith("." + d) for d in _RESERVED_SECOND_LEVEL)
    )
    if placeholder:
        raise HarnessError(
            f"git would author the commits in {repo} as {name or '(no name)'} <{email}>, "
            f"a placeholder: each commit is yours, with your Signed-off-by, as Ray "
            f"requires, and that address reaches no one. {how} Nothing was changed."
        )
    return name, email
