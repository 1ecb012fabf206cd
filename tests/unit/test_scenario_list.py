"""README.md lists the scenarios as `run --help` does, from the registry."""

from pathlib import Path

from harness.scenarios import SCENARIOS, scenario_list

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_lists_every_scenario_as_run_help_does():
    text = README.read_text()
    block = text.split("<!-- scenario list -->\n```\n", 1)[1].split("\n```\n<!-- end", 1)[0]
    assert block == scenario_list()


def test_every_scenario_has_a_line_with_what_it_exercises():
    lines = scenario_list().splitlines()
    assert len(lines) == len(SCENARIOS)
    for name, line in zip(SCENARIOS, lines, strict=True):
        assert line.split()[0] == name and SCENARIOS[name].title in line
