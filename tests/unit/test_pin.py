"""The pin and the installed-Ray check."""

from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.core.pin import check_installed, installed_ray, load_pin, read_series


def _site(tmp_path: Path, version: str, commit: str) -> Path:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "_version.py").write_text(
        f'# generated\ncommit = "{commit}"\nversion = "{version}"\n'
    )
    return tmp_path


def test_pin_names_the_release_and_commit():
    pin = load_pin()
    assert pin.ray.version == "2.60.0"
    assert pin.ray.commit == "b7f4259e944bf6959f721b106adc366ddfa0c356"
    assert pin.ray.wheel.startswith("ray-2.60.0-") and len(pin.ray.sha256) == 64
    assert pin.baseline.version == "2.59.0"


def test_wrong_ray_names_both_versions(tmp_path: Path):
    pin = load_pin()
    site = _site(tmp_path, "2.59.0", "abc")
    with pytest.raises(HarnessError, match=r"holds Ray 2\.59\.0.*pinned to Ray 2\.60\.0"):
        check_installed(site, pin.ray)


def test_pinned_ray_accepted(tmp_path: Path):
    pin = load_pin()
    site = _site(tmp_path, pin.ray.version, pin.ray.commit)
    check_installed(site, pin.ray)
    assert installed_ray(site) == (pin.ray.version, pin.ray.commit)


def test_series_ignores_comments_and_flags_missing(tmp_path: Path):
    (tmp_path / "0001-a.patch").write_text("x")
    series = tmp_path / "series"
    series.write_text("# order matters\n0001-a.patch\n\n")
    assert [p.name for p in read_series(series)] == ["0001-a.patch"]
    series.write_text("0001-a.patch\n0002-gone.patch\n")
    with pytest.raises(HarnessError, match="0002-gone.patch"):
        read_series(series)
