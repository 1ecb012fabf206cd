"""Image naming and the base-image mirror lookup: pure logic, no Docker."""

from pathlib import Path

import pytest

from harness.cluster import images
from harness.cluster.images import ImageSpec, host_debian_mirror, node_tag
from harness.core.errors import HarnessError
from harness.core.pin import load_pin


def test_mirror_from_deb822_sources_skips_security(tmp_path: Path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.invalid/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert host_debian_mirror(tmp_path) == "http://mirror.invalid/debian"


def test_mirror_from_one_line_sources_list(tmp_path: Path):
    (tmp_path / "sources.list").write_text(
        "# deb http://old.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.invalid/debian bookworm main\n"
    )
    assert host_debian_mirror(tmp_path) == "http://mirror.invalid/debian"


def test_mirror_missing_says_what_to_do(tmp_path: Path):
    (tmp_path / "sources.list").write_text("deb http://mirror.invalid/debian trixie main\n")
    with pytest.raises(HarnessError, match="no apt source for Debian bookworm"):
        host_debian_mirror(tmp_path)


def test_image_spec_parse_and_reject():
    assert ImageSpec.parse("2.60.0-patched") == ImageSpec("2.60.0", "patched")
    with pytest.raises(HarnessError, match="unknown image"):
        ImageSpec.parse("2.60.0-fancy")


def test_patched_baseline_refused():
    with pytest.raises(HarnessError, match="no patched image of Ray 2.59.0"):
        images.ensure_node_image(ImageSpec("2.59.0", "patched"))


def test_patch_edit_changes_only_the_patched_tag(tmp_path: Path):
    pin = load_pin()
    patch = tmp_path / "0001-x.patch"
    patch.write_text("one\n")
    stock, patched = ImageSpec("2.60.0", "stock"), ImageSpec("2.60.0", "patched")
    before = (
        node_tag(stock, pin, "rayspot-ray:x", [patch]),
        node_tag(patched, pin, "rayspot-ray:x", [patch]),
    )
    patch.write_text("one line edited\n")
    after = (
        node_tag(stock, pin, "rayspot-ray:x", [patch]),
        node_tag(patched, pin, "rayspot-ray:x", [patch]),
    )
    assert before[0] == after[0]
    assert before[1] != after[1]
    assert node_tag(patched, pin, "rayspot-ray:x", [patch]) == after[1]  # deterministic
