"""For the benches' tests: every Progress a run makes, with the pieces it
began, so a test can read what the run reported and check that the pieces'
planned seconds add up to the plan the time left is estimated from."""

from __future__ import annotations

from harness.core import progress
from harness.core.progress import Progress


class Recording(Progress):
    def __init__(self, title: str, planned_s: float, **options) -> None:
        super().__init__(title, planned_s, **options)
        self.begun: list[tuple[str, float]] = []

    def begin(self, text: str, planned_s: float = 0.0, key: str = "") -> None:
        self.begun.append((text, planned_s))
        super().begin(text, planned_s, key)

    def begun_s(self) -> float:
        return sum(planned for _, planned in self.begun)


def record(monkeypatch, module) -> list[Recording]:
    """Make `module`'s runs use Recording; returns the list they land in."""
    made: list[Recording] = []

    def make(title: str, planned_s: float, **options) -> Recording:
        made.append(Recording(title, planned_s, **options))
        return made[-1]

    # The ticker thread runs on the real clock; a test's run is over in less.
    monkeypatch.setattr(progress, "REDRAW_S", 3600.0)
    monkeypatch.setattr(module, "Progress", make)
    return made
