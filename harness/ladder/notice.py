"""The spot notice as the node agent sees it: how long before termination,
how long until the agent acts, and the deadline its drain gives Serve. A
model the ladder checks (ordering H) and the nemesis plays out; it injects
nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.core.errors import HarnessError


@dataclass(frozen=True)
class SpotNotice:
    """AWS's two-minute warning as the node agent sees it (seconds)."""

    notice_s: float = 120.0  # notice to termination
    detection_s: float = 10.0  # notice to the agent's drain call (IMDS poll + loop)
    drain_deadline_s: float = 60.0  # the drain action: deadline, from the drain call

    def __post_init__(self) -> None:
        if self.detection_s + self.drain_deadline_s > self.notice_s:
            raise HarnessError(
                f"spot notice {self.notice_s}s is shorter than detection {self.detection_s}s "
                f"+ drain deadline {self.drain_deadline_s}s: the node would be killed before "
                f"its drain deadline, which breaks Serve's plan (ordering H)."
            )

    def ending_at_deadline(self) -> SpotNotice:
        """The same notice, shortened so the node goes at its drain deadline:
        everything a drain does happens, and nothing after it is waited for."""
        return replace(self, notice_s=self.detection_s + self.drain_deadline_s)
