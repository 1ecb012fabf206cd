"""Which harness runs bear on which patch, and what those runs do not show: the
prose behind the PR descriptions, kept as data in `evidence.toml` beside this
module and keyed by each patch's file name in patches/series."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError

EVIDENCE_FILE = Path(__file__).with_name("evidence.toml")


@dataclass(frozen=True)
class Evidence:
    """What a patch's PR shows from the harness, and what it cannot show."""

    scenarios: tuple[str, ...]  # runs the patch changes the outcome of
    related: tuple[str, ...] = ()  # runs that show the problem, on stock only
    caveats: tuple[str, ...] = ()  # "What these runs do not show", this patch's part


@dataclass(frozen=True)
class EvidenceTable:
    common_caveats: tuple[str, ...]  # the part of "What these runs do not show" every PR shares
    by_patch: dict[str, Evidence]  # patch file name -> what its PR shows


def load_evidence(path: Path = EVIDENCE_FILE) -> EvidenceTable:
    """The table in `path`, checked for the keys and types it may hold: a
    misspelt key would otherwise silently drop a patch's runs or caveats."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HarnessError(f"cannot read {path}: {exc}. Fix the file and run again.") from exc

    def strings(value: object, where: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HarnessError(f"{path}: {where} must be a list of strings.")
        return tuple(value)

    def unknown(keys: set[str], allowed: set[str], where: str) -> None:
        if keys - allowed:
            raise HarnessError(
                f"{path}: {where} has {', '.join(sorted(keys - allowed))}; it may hold "
                f"only {', '.join(sorted(allowed))}."
            )

    unknown(set(data), {"common_caveats", "patch"}, "the top level")
    by_patch = {}
    for name, entry in data.get("patch", {}).items():
        where = f'[patch."{name}"]'
        if not isinstance(entry, dict):
            raise HarnessError(f"{path}: {where} must be a table.")
        unknown(set(entry), {"scenarios", "related", "caveats"}, where)
        by_patch[name] = Evidence(
            strings(entry.get("scenarios", []), f"{where} scenarios"),
            strings(entry.get("related", []), f"{where} related"),
            strings(entry.get("caveats", []), f"{where} caveats"),
        )
    return EvidenceTable(strings(data.get("common_caveats", []), "common_caveats"), by_patch)
