"""The pinned Ray release: reads `patches/PIN` and `patches/series`, and reads
which Ray a site-packages tree holds. The only reader of those files."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import PIN_FILE, SERIES_FILE


@dataclass(frozen=True)
class RayRelease:
    version: str
    wheel: str
    sha256: str
    commit: str | None = None

    @property
    def requirement(self) -> str:
        return f"ray[serve]=={self.version}"


@dataclass(frozen=True)
class Pin:
    ray: RayRelease
    baseline: RayRelease

    def release(self, version: str) -> RayRelease:
        for release in (self.ray, self.baseline):
            if release.version == version:
                return release
        raise HarnessError(
            f"Ray {version} is not in {PIN_FILE.name}; known: {self.ray.version} (pinned), "
            f"{self.baseline.version} (baseline)."
        )


def load_pin(path: Path = PIN_FILE) -> Pin:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HarnessError(f"cannot read the pin {path}: {exc}") from exc
    try:
        return Pin(ray=RayRelease(**data["ray"]), baseline=RayRelease(**data["baseline"]))
    except (KeyError, TypeError) as exc:
        raise HarnessError(f"{path} is malformed ({exc}); it needs [ray] and [baseline]") from exc


def read_series(series_file: Path = SERIES_FILE) -> list[Path]:
    """Patch files in series order. Blank lines and `#` comments are ignored."""
    if not series_file.exists():
        return []
    names = []
    for line in series_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    patches = [series_file.parent / name for name in names]
    missing = [p.name for p in patches if not p.is_file()]
    if missing:
        raise HarnessError(f"{series_file} lists patches that do not exist: {', '.join(missing)}")
    return patches


_VERSION_RE = re.compile(r'^(version|commit)\s*=\s*"([^"]*)"', re.M)


def installed_ray(site_packages: Path) -> tuple[str, str] | None:
    """(version, commit) of the Ray in a site-packages tree, without importing it."""
    version_file = site_packages / "ray" / "_version.py"
    if not version_file.is_file():
        return None
    fields = dict(_VERSION_RE.findall(version_file.read_text()))
    return fields.get("version", "?"), fields.get("commit", "?")


def check_installed(site_packages: Path, release: RayRelease) -> tuple[str, str]:
    """Refuse to touch a Ray that is not the pinned one, naming both versions;
    (version, commit) of the one found."""
    found = installed_ray(site_packages)
    if found is None:
        raise HarnessError(
            f"no Ray is installed in {site_packages}; run `make setup` to install Ray "
            f"{release.version}. Nothing was changed."
        )
    version, commit = found
    if version != release.version or (release.commit and commit != release.commit):
        raise HarnessError(
            f"{site_packages} holds Ray {version} (commit {commit}), but the patches are pinned "
            f"to Ray {release.version} (commit {release.commit}). Nothing was changed. "
            f"Run `make setup` to reinstall the pinned Ray, or rebase the series."
        )
    return found
