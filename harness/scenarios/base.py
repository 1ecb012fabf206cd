"""What every scenario shares: running it once per image, judging each run,
comparing the runs against the scenario's expectation, and writing one report.

A scenario is a class with a `name`, default `images`, and `run_once(image,
label) -> ImageRun`. Its `expect(runs)` says whether the comparison came out
as the scenario claims (for example: the baseline fails and the fix does not),
so a scenario whose baseline did not fail says so instead of passing quietly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import checker, images, report
from harness.history import History
from harness.paths import BUILD_DIR
from harness.pin import load_pin

RESULTS_DIR = BUILD_DIR / "results"


@dataclass
class ImageRun:
    label: str  # e.g. "2.60.0-patched"
    history: History
    verdict: checker.Verdict | None = None
    # Scenario-specific measurements, e.g. {"failures per event": [10, 10]}.
    facts: dict = field(default_factory=dict)
    # (what was checked, did it hold), e.g. ("death reason is PREEMPTED", True).
    checks: list[tuple[str, bool]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.verdict and self.verdict.passed) and all(ok for _, ok in self.checks)


@dataclass
class ScenarioOutcome:
    name: str
    runs: dict[str, ImageRun]
    as_expected: bool
    findings: list[str]
    report: dict[str, Path]
    wall_s: float


class Scenario:
    name = ""
    title = ""

    @staticmethod
    def default_images() -> list[images.ImageSpec]:
        pin = load_pin()
        return [images.ImageSpec(pin.baseline.version, "stock"),
                images.ImageSpec(pin.ray.version, "patched")]

    def labels(self, spec: images.ImageSpec) -> list[str]:
        """The runs on one image, by label: one, unless a scenario also runs an
        image under another configuration (flags on and off, say)."""
        return [str(spec)]

    def run_once(self, image_tag: str, label: str) -> ImageRun:
        raise NotImplementedError

    def expect(self, runs: dict[str, ImageRun]) -> tuple[bool, list[str]]:
        """Default: the last image (the fix) passes, and some earlier one fails;
        a baseline that does not fail proves nothing, which is said aloud."""
        *baselines, fixed = runs.values()
        findings = [f"{fixed.label}: {'PASSED' if fixed.passed else 'FAILED'}"]
        for run in baselines:
            findings.append(f"{run.label}: {'PASSED' if run.passed else 'FAILED'}")
        baseline_failed = any(not r.passed for r in baselines)
        if baselines and not baseline_failed:
            findings.append("the baseline did not fail, so this run proves nothing about a "
                            "fix; it only shows that both images behave")
        return fixed.passed and (baseline_failed or not baselines), findings

    def sections(self, runs: dict[str, ImageRun]) -> dict[str, str]:
        """Extra markdown for the report: facts and checks per image."""
        lines = []
        for run in runs.values():
            lines.append(f"**{run.label}** ({run.wall_s:.0f} s)")
            for what, ok in run.checks:
                lines.append(f"- {'✔' if ok else '✘'} {what}")
            for key, value in run.facts.items():
                lines.append(f"- {key}: {value}")
            lines.append("")
        return {"Checks and measurements": "\n".join(lines)}


def run_scenario(scenario: Scenario, specs: list[images.ImageSpec] | None = None,
                 out_dir: Path | None = None) -> ScenarioOutcome:
    started = time.monotonic()
    specs = specs or scenario.default_images()
    tags = {spec: images.ensure_node_image(spec) for spec in specs}
    runs: dict[str, ImageRun] = {}
    for spec, tag in tags.items():
        for label in scenario.labels(spec):
            print(f"scenario {scenario.name}: running on {label} "
                  f"({time.monotonic() - started:.0f}s so far)", flush=True)
            t = time.monotonic()
            run = scenario.run_once(tag, label)
            run.wall_s = time.monotonic() - t
            run.history.meta.update(label=label, image=tag, scenario=scenario.name)
            run.verdict = run.verdict or checker.check(run.history)
            runs[label] = run
            print(f"scenario {scenario.name}: {label}: {run.verdict.failures} of "
                  f"{run.verdict.requests} requests failed; checks "
                  f"{sum(ok for _, ok in run.checks)}/{len(run.checks)} held "
                  f"({run.wall_s:.0f}s)", flush=True)
    as_expected, findings = scenario.expect(runs)
    out_dir = out_dir or RESULTS_DIR / scenario.name
    for run in runs.values():
        run.history.save(out_dir / f"history-{run.label}.jsonl")
    sections = {"Outcome": "\n".join(f"- {f}" for f in findings), **scenario.sections(runs)}
    paths = report.write_report(out_dir, scenario.title,
                                {r.label: (r.history, r.verdict) for r in runs.values()},
                                sections)
    return ScenarioOutcome(scenario.name, runs, as_expected, findings, paths,
                           time.monotonic() - started)
