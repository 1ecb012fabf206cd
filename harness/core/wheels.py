"""The host-side wheelhouse: one folder of wheels per Ray release, downloaded
once with pip and then installed offline (in `.venv` and in the node images).

The Ray wheel's sha256 is checked against the pin every time the wheelhouse is
used, so a tampered or re-released wheel is caught before anything installs it.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from harness.core import locks, log, proc
from harness.core.errors import HarnessError
from harness.core.paths import WHEELHOUSE_DIR
from harness.core.pin import RayRelease

_log = log.get(__name__)

_COMPLETE = ".complete"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheelhouse_for(release: RayRelease) -> Path:
    return WHEELHOUSE_DIR / f"ray-{release.version}"


def ensure_wheelhouse(release: RayRelease, python: str = sys.executable) -> Path:
    """Download `ray[serve]==version` and its dependencies unless already there.

    The download goes to a temporary folder that is renamed into place only
    when complete, so an interrupted download never passes for a wheelhouse.
    """
    # One download at a time: `harness setup` and an image build started beside
    # it (CI) both need the pinned release's wheelhouse, and pip writing two
    # downloads into one .partial folder would mix them.
    with locks.one_at_a_time(f"wheelhouse {release.version}"):
        return _ensure_wheelhouse(release, python)


def _ensure_wheelhouse(release: RayRelease, python: str) -> Path:
    house = wheelhouse_for(release)
    if (house / _COMPLETE).exists():
        verify_ray_wheel(house, release)
        return house
    # The host and the image are both CPython 3.11 on glibc x86_64, so the host's
    # pip picks the right wheels. (`--only-binary=:all:` makes pip's resolver
    # crawl for minutes here; sdists are refused below instead.)
    partial = _download(release.requirement, house, python, ["--prefer-binary"])
    verify_ray_wheel(partial, release)
    sdists = sorted(p.name for p in partial.iterdir() if not p.name.endswith(".whl"))
    if sdists:
        raise HarnessError(
            f"pip fetched source distributions ({', '.join(sdists)}), which the node image "
            f"cannot build (it has no compiler). Nothing was installed; {partial} is kept."
        )
    (partial / _COMPLETE).touch()
    if house.exists():
        raise HarnessError(f"{house} exists but is incomplete; remove it and run again.")
    partial.rename(house)
    return house


def ensure_requirement_wheelhouse(requirement: str, python: str = sys.executable) -> Path:
    """The wheels of one pinned requirement other than Ray (`pytest==8.3.4`) and
    of its dependencies, in a wheelhouse folder of their own, downloaded once so
    that venvs can install them offline.

    Downloaded into a `.partial` folder and renamed into place only when pip
    succeeded, like `ensure_wheelhouse`; there is no pin to check the wheels
    against, and an incomplete folder left in the way is replaced.
    """
    house = WHEELHOUSE_DIR / requirement.replace("==", "-")
    if (house / _COMPLETE).exists():
        return house
    partial = _download(requirement, house, python, [])
    (partial / _COMPLETE).touch()
    shutil.rmtree(house, ignore_errors=True)
    partial.rename(house)
    return house


def _download(requirement: str, house: Path, python: str, options: list[str]) -> Path:
    """pip-download `requirement` and its dependencies into `house`'s `.partial`
    folder (kept and reused after a failure); the caller checks the wheels and
    renames the folder into place, so an interrupted download never passes for
    a wheelhouse."""
    partial = house.with_name(house.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    _log.info("wheelhouse: downloading %s into %s ...", requirement, house)
    cmd = [python, "-m", "pip", "download", "--quiet", *options, "-d", str(partial), requirement]
    result = proc.run(cmd)
    if result.returncode != 0:
        raise HarnessError(
            f"pip could not download {requirement}:\n{proc.output_tail(result)}\n"
            f"The partial download stays in {partial} and is reused next time. "
            f"Check that PyPI is reachable, then run the command again."
        )
    return partial


def verify_ray_wheel(house: Path, release: RayRelease) -> Path:
    wheel = house / release.wheel
    if not wheel.is_file():
        raise HarnessError(
            f"{house} has no {release.wheel}. The pin names that file; if PyPI now serves "
            f"another build, update patches/PIN deliberately. Nothing was installed."
        )
    actual = sha256_file(wheel)
    if actual != release.sha256:
        raise HarnessError(
            f"{wheel} has sha256 {actual}, but patches/PIN expects {release.sha256}. "
            f"Nothing was installed. Delete {house} and run again; if it persists, the "
            f"wheel on PyPI changed and the pin must be reviewed."
        )
    return wheel
