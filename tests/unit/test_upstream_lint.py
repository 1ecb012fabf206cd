"""`upstream lint`'s own checks (Ray's docstyle rule, the pytest trailer) and
how it reads pydoclint, on a small repo; the tools themselves run in `make
upstream-lint`."""

import subprocess
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.core.git import git_output
from harness.upstream import lint

TRAILER = 'if __name__ == "__main__":\n    sys.exit(pytest.main(["-sv", __file__]))\n'


def _repo(tmp_path: Path, base: dict[str, str], head: dict[str, str]) -> Path:
    """A repo whose `base` tag holds `base` and whose HEAD adds `head`."""
    for commit in (base, head):
        for rel, text in commit.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
        if commit is base:
            git_output(["init", "--quiet", tmp_path], tmp_path)
        git_output(["add", "--all"], tmp_path)
        git_output(["commit", "--quiet", "--allow-empty", "-m", "x"], tmp_path, identity=True)
        if commit is base:
            git_output(["tag", lint.BASE_TAG], tmp_path)
    return tmp_path


def test_a_typed_argument_the_series_adds_is_found_and_one_at_the_pin_is_not(tmp_path):
    old = 'def f(a):\n    """F.\n\n    Args:\n        a (int): at the pin.\n    """\n'
    new = 'def g(b):\n    """G.\n\n    Args:\n        b (str): added.\n        c: fine.\n    """\n'
    repo = _repo(tmp_path, {"x/old.py": old}, {"x/new.py": new})
    assert lint._typed_docstring_args(repo) == ["x/new.py: b (str): added."]


def test_a_test_file_needs_the_main_guard_and_pytest_main(tmp_path):
    head = {
        "t/tests/test_good.py": "import sys\n\nimport pytest\n\n" + TRAILER,
        "t/tests/test_no_main.py": "def test_x():\n    pass\n",
        "t/tests/test_bare_main.py": 'if __name__ == "__main__":\n    pytest.main()\n',
        "t/not_a_test.py": "x = 1\n",
    }
    repo = _repo(tmp_path, {"README": "base\n"}, head)
    found = lint._trailers(repo, sorted(head))
    assert found == [
        "t/tests/test_bare_main.py: its main does not `sys.exit(pytest.main(...))`",
        't/tests/test_no_main.py: no `if __name__ == "__main__":` (Ray\'s CI refuses the file)',
    ]


def _fake_tool(monkeypatch, returncode: int, stdout: str) -> None:
    def run(python, root, args):
        return subprocess.CompletedProcess(args, returncode, stdout, "")

    monkeypatch.setattr(lint, "_tool", run)


def test_pydoclint_violations_are_read_per_file_without_line_numbers(monkeypatch, tmp_path):
    out = (
        "\na/x.py\n    12: DOC201: Method `A.f` does not have a return section in docstring\n"
        "\nb/y.py\n    3: DOC101: Function `g`: Docstring contains fewer arguments\n"
    )
    _fake_tool(monkeypatch, 1, out)
    assert lint._pydoclint(Path("python"), tmp_path, ["a/x.py", "b/y.py"]) == {
        ("a/x.py", "DOC201: Method `A.f` does not have a return section in docstring"),
        ("b/y.py", "DOC101: Function `g`: Docstring contains fewer arguments"),
    }


def test_pydoclint_that_fails_without_findings_is_an_error_not_a_pass(monkeypatch, tmp_path):
    _fake_tool(monkeypatch, 1, "No module named pydoclint.__main__\n")
    with pytest.raises(HarnessError, match="pydoclint failed"):
        lint._pydoclint(Path("python"), tmp_path, ["a/x.py"])


def test_only_violations_the_pinned_file_lacks_count(monkeypatch, tmp_path):
    repo = _repo(tmp_path / "ws", {"a/x.py": "old\n"}, {"a/x.py": "new\n", "a/n.py": "n\n"})

    def run(python, root, args):
        at_pin = root != repo
        out = "\na/x.py\n    1: DOC201: Method `A.f` old\n"
        if not at_pin:
            out += "    9: DOC201: Method `A.g` new\n\na/n.py\n    2: DOC101: Function `n`\n"
        return subprocess.CompletedProcess(args, 1, out, "")

    monkeypatch.setattr(lint, "_tool", run)
    found = lint._new_pydoclint(Path("python"), repo, ["a/x.py", "a/n.py"], tmp_path / "base")
    assert found == ["a/n.py: DOC101: Function `n`", "a/x.py: DOC201: Method `A.g` new"]
    # The pinned file was written out to be linted on its own.
    assert (tmp_path / "base" / "a/x.py").read_text() == "old\n"


def test_the_report_fails_on_any_finding_and_names_it():
    report = lint.LintReport(["a.py"], {"ruff": [], "black": ["would reformat a.py"]})
    assert not report.ok
    assert report.format().splitlines() == [
        "upstream lint: 1 files the series adds or changes",
        "  ruff: ok",
        "  black: 1 found",
        "    would reformat a.py",
    ]
    assert lint.LintReport(["a.py"], {"ruff": []}).ok
