"""`python -m harness analyze PATH`: judge a saved run again, with no cluster.

PATH is a history file or a results directory (its `history-*.jsonl`). A
scenario's histories carry the scenario's name, its options and each run's
order, so the scenario is rebuilt as it ran and its judging half reaches the
verdict, checks, findings and report again from the record alone. Histories
that belong to no scenario (the soak's) are judged by their failure-rate
verdict: each must pass unless its meta says it is a comparison, not a claim.
"""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import HarnessError
from harness.experiment.history import HISTORY_GLOB, History
from harness.scenarios import SCENARIOS
from harness.scenarios.base import Facts, ImageRun, Scenario, ScenarioOutcome, judge_runs

ANALYSIS_DIR = "analysis"  # where a re-judged report goes, beside the histories


class Recorded(Scenario[Facts]):
    """Histories with no scenario: judged by the checker's verdict alone."""

    name = "recorded"

    def __init__(self, title: str = "Saved histories, judged again") -> None:
        self.title = title

    def judge_history(self, history: History) -> ImageRun[Facts]:
        """No configuration and no facts: these runs were not configured by a scenario."""
        return ImageRun(history.meta["label"], history, Facts())

    def expect(self, runs: dict[str, ImageRun]) -> tuple[bool, list[str]]:
        claimed = [r for r in runs.values() if r.history.meta.get("claim", True)]
        findings = [
            f"{r.label}: {'PASSED' if r.passed else 'FAILED'}"
            + ("" if r in claimed else " (a comparison, not judged)")
            for r in runs.values()
        ]
        return bool(claimed) and all(r.passed for r in claimed), findings


def analyze(path: Path, out_dir: Path | None = None, merge: bool = False) -> ScenarioOutcome:
    """Re-judge the histories at `path` and write their report to `out_dir`
    (default: `analysis/` beside them, so the original report stays). With
    `merge`, histories of no scenario (several hosts' `load`) are judged as
    one record."""
    if not path.exists():
        raise HarnessError(
            f"{path} does not exist; give a history file or a results "
            f"directory (build/results/NAME/)."
        )
    files = [path] if path.is_file() else sorted(path.glob(HISTORY_GLOB))
    if not files:
        raise HarnessError(
            f"{path} holds no {HISTORY_GLOB}; a scenario saves its histories "
            f"in build/results/NAME/."
        )
    histories = [History.load(f) for f in files]
    if merge:
        if any(h.meta.get("scenario") for h in histories):
            raise HarnessError(
                f"{path} holds a scenario's runs, which are judged side by side, not merged"
            )
        sources = [str(h.meta.get("label", f.name)) for f, h in zip(files, histories, strict=True)]
        whole = History.merged(
            histories, {"label": f"{len(histories)} histories merged", "merged": sources}
        )
        folder = path.parent if path.is_file() else path
        notes = [f"merged: {', '.join(sources)}"]
        return judge_runs(
            Recorded("Load from several hosts"), [whole], out_dir or folder / ANALYSIS_DIR, notes
        )
    names = sorted({str(h.meta.get("scenario")) for h in histories if h.meta.get("scenario")})
    if len(names) > 1:
        raise HarnessError(
            f"{path} mixes the histories of {', '.join(names)}; analyze one "
            f"scenario's directory at a time."
        )
    if names and any(not h.meta.get("scenario") for h in histories):
        raise HarnessError(
            f"{path} mixes {names[0]}'s histories with others; analyze one "
            f"scenario's directory at a time."
        )
    if names and names[0] not in SCENARIOS:
        raise HarnessError(
            f"{files[0]} was recorded by scenario {names[0]!r}, which this "
            f"harness does not have (known: {', '.join(SCENARIOS)})."
        )
    scenario: Scenario
    if names:
        options = histories[0].meta.get("options") or {}
        try:
            scenario = SCENARIOS[names[0]](**options)
        except TypeError as exc:
            raise HarnessError(
                f"{files[0]} records options {options} that {names[0]} does "
                f"not take ({exc}); it was saved by another version of the "
                f"harness."
            ) from exc
    else:
        titles = sorted({h.meta["title"] for h in histories if h.meta.get("title")})
        scenario = Recorded(titles[0]) if titles else Recorded()
    labels: dict[str, Path] = {}
    for file, history in zip(files, histories, strict=True):
        label = history.meta.setdefault("label", file.name.split(".")[0].removeprefix("history-"))
        if label in labels:
            raise HarnessError(
                f"{labels[label]} and {file} are both runs labelled {label!r}; keep one of them."
            )
        labels[label] = file
    folder = path.parent if path.is_file() else path
    notes = []
    if names and path.is_file():
        # expect() tells the baseline from the fix by their order among the runs.
        notes.append(
            f"{path.name} was judged on its own; the scenario compares runs side "
            f"by side, so analyze its directory for that."
        )
    return judge_runs(scenario, histories, out_dir or folder / ANALYSIS_DIR, notes)
