"""Ray's own Python lint over what the series changes, as Ray's CI would run
it on the PRs (`make upstream-lint`).

The series is applied to the pinned wheel's serve tree in a temporary
workspace, and every Python file it adds or changes is checked with:

- ruff 0.8.4 with Ray's settings (ray-ruff.toml beside this file) and black
  22.10.0, the versions Ray's pre-commit config pins;
- pydoclint 0.8.3 (the version Ray's hook was last seen at) with the options
  Ray's hook passes. Ray keeps a baseline of the violations its tree already
  has, so only what the series adds counts: a violation (file, code and
  message, without the line number) that the file at the pin does not have;
- Ray's docstyle rule: no types in docstring arguments (`x (int): ...`), on
  the lines the series adds;
- the pytest trailer Ray's CI requires of every test file
  (`if __name__ == "__main__":`), in the form Ray's tests use it
  (`sys.exit(pytest.main(...))`).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.core import log, proc
from harness.core.errors import HarnessError
from harness.core.git import git_output, run_git
from harness.core.paths import BUILD_DIR
from harness.core.proc import output_tail
from harness.core.venv import ensure_offline_venv, python_in
from harness.core.wheels import ensure_requirement_wheelhouse
from harness.patches.workspace import BASE_TAG, build_workspace

_log = log.get(__name__)

TOOLS = ("ruff==0.8.4", "black==22.10.0", "pydoclint==0.8.3")
RUFF_CONFIG = Path(__file__).with_name("ray-ruff.toml")
PYDOCLINT_OPTIONS = (
    "--style=google",
    "--arg-type-hints-in-docstring=False",
    "--skip-checking-raises=True",
    "--check-return-types=False",
    "--allow-init-docstring=True",
    "--check-class-attributes=False",
)
LINT_VENV = BUILD_DIR / "lint-venv"
# Ray's check-docstyle.sh: an argument line that carries a type.
_TYPED_ARG = re.compile(r"^[ ]+[a-z_]+ ?\([a-zA-Z]+\): ")
_MAIN_GUARD = re.compile(r'^if __name__ == "__main__":', re.M)
_PYTEST_MAIN = re.compile(r"sys\.exit\(pytest\.main\(")


@dataclass
class LintReport:
    files: list[str]
    # Tool -> what it found, one finding per entry; every tool has an entry.
    findings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.findings.values())

    def format(self) -> str:
        lines = [f"upstream lint: {len(self.files)} files the series adds or changes"]
        for tool, found in self.findings.items():
            lines.append(f"  {tool}: {'ok' if not found else f'{len(found)} found'}")
            lines += [f"    {line}" for finding in found for line in finding.splitlines()]
        return "\n".join(lines)


def ensure_lint_tools() -> Path:
    """The interpreter of a venv with the pinned tools, installed offline from
    wheelhouses downloaded once."""
    houses = [ensure_requirement_wheelhouse(tool) for tool in TOOLS]
    ensure_offline_venv(LINT_VENV, TOOLS, houses, {"tools": list(TOOLS)})
    return python_in(LINT_VENV)


def lint_series(wheel: Path, patches: list[Path]) -> LintReport:
    """Ray's lint over the files `patches` add or change in `wheel`'s serve tree."""
    python = ensure_lint_tools()
    with tempfile.TemporaryDirectory(prefix="ray-upstream-lint-") as tmp:
        workspace = Path(tmp) / "ray-src"
        build_workspace(wheel, patches, workspace)
        files = git_output(
            ["diff", "--name-only", "--diff-filter=AM", f"{BASE_TAG}..HEAD", "--", "*.py"],
            workspace,
        ).split()
        report = LintReport(files)
        report.findings["ruff"] = _ruff(python, workspace, files)
        report.findings["black"] = _black(python, workspace, files)
        report.findings["pydoclint (new violations)"] = _new_pydoclint(
            python, workspace, files, Path(tmp) / "base"
        )
        report.findings["docstyle"] = _typed_docstring_args(workspace)
        report.findings["pytest trailer"] = _trailers(workspace, files)
        return report


# How each tool is started by the venv's interpreter: the venv is built
# elsewhere and renamed in, so its console scripts point at a Python that is gone.
_ENTRY = {
    "ruff": ["-m", "ruff"],
    "black": ["-m", "black"],
    "pydoclint": ["-c", "import sys; from pydoclint.main import main; sys.exit(main())"],
}


def _tool(python: Path, workspace: Path, args: list[str]) -> proc.CompletedProcess[str]:
    return proc.run([str(python), *_ENTRY[args[0]], *args[1:]], cwd=workspace)


def _ruff(python: Path, workspace: Path, files: list[str]) -> list[str]:
    result = _tool(
        python,
        workspace,
        ["ruff", "check", "--no-cache", "--config", str(RUFF_CONFIG), "--output-format=concise"]
        + files,
    )
    if result.returncode == 0:
        return []
    found = [line for line in result.stdout.splitlines() if re.match(r"^\S+\.py:\d+:\d+: ", line)]
    return found or [output_tail(result)]


def _black(python: Path, workspace: Path, files: list[str]) -> list[str]:
    result = _tool(python, workspace, ["black", "--check", *files])
    if result.returncode == 0:
        return []
    found = [line for line in result.stderr.splitlines() if line.startswith("would reformat ")]
    return found or [output_tail(result)]


def _pydoclint(python: Path, root: Path, files: list[str]) -> set[tuple[str, str]]:
    """(file, violation without its line number) of each file under `root`."""
    if not files:
        return set()
    result = _tool(python, root, ["pydoclint", *PYDOCLINT_OPTIONS, *files])
    found, current = set(), None
    for line in (result.stdout + result.stderr).splitlines():
        if line.strip() in files:
            current = line.strip()
        elif current and re.match(r"^\s+\d+: DOC\d+", line):
            found.add((current, line.split(":", 1)[1].strip()))
    if result.returncode != 0 and not found:
        # A tool that failed to run must not read as a clean file.
        raise HarnessError(f"pydoclint failed in {root}:\n{output_tail(result)}")
    return found


def _new_pydoclint(python: Path, workspace: Path, files: list[str], base: Path) -> list[str]:
    at_pin = []
    for rel in files:
        shown = run_git(["show", f"{BASE_TAG}:{rel}"], workspace)
        if shown.returncode == 0:
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_text(shown.stdout)
            at_pin.append(rel)
    before = _pydoclint(python, base, at_pin)
    after = _pydoclint(python, workspace, files)
    return [f"{rel}: {violation}" for rel, violation in sorted(after - before)]


def _typed_docstring_args(workspace: Path) -> list[str]:
    diff = git_output(["diff", "--unified=0", f"{BASE_TAG}..HEAD", "--", "*.py"], workspace)
    found, current = [], ""
    for line in diff.splitlines():
        if line.startswith("+++ b/"):
            current = line.removeprefix("+++ b/")
        elif line.startswith("+") and not line.startswith("+++"):
            added = line[1:]
            if _TYPED_ARG.match(added) and "str(" not in added and "noqa" not in added:
                found.append(f"{current}: {added.strip()}")
    return found


def _trailers(workspace: Path, files: list[str]) -> list[str]:
    found = []
    for rel in files:
        if "/tests/" not in rel or not PurePosixPath(rel).name.startswith("test_"):
            continue
        text = (workspace / rel).read_text()
        if not _MAIN_GUARD.search(text):
            found.append(f'{rel}: no `if __name__ == "__main__":` (Ray\'s CI refuses the file)')
        elif not _PYTEST_MAIN.search(text):
            found.append(f"{rel}: its main does not `sys.exit(pytest.main(...))`")
    return found
