"""build/locks/: one process at a time per name, across processes of a checkout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harness.core import locks, wheels
from harness.core.pin import RayRelease


def test_a_second_build_waits_for_the_first_even_after_it_failed(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(locks, "LOCK_DIR", tmp_path)
    events: list[str] = []
    first_holds = threading.Event()

    def first() -> None:
        try:
            with locks.one_at_a_time("ray 2.60.0"):
                first_holds.set()
                time.sleep(0.3)
                events.append("first done")
                raise RuntimeError("the build broke")
        except RuntimeError:
            pass

    def second() -> None:
        first_holds.wait()
        with locks.one_at_a_time("ray 2.60.0"):
            events.append("second in")

    # Two threads, two opens of the lock file: flock keeps them apart as it
    # keeps two processes apart.
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert events == ["first done", "second in"]


def test_a_build_of_one_layer_does_not_hold_up_another(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(locks, "LOCK_DIR", tmp_path)
    release = threading.Event()
    holds = threading.Event()

    def other_build() -> None:
        with locks.one_at_a_time("ray 2.59.0"):
            holds.set()
            release.wait(10)

    thread = threading.Thread(target=other_build)
    thread.start()
    holds.wait(10)
    try:
        entered = threading.Event()

        def needs_the_built_layer() -> None:
            with locks.one_at_a_time("image 2.60.0-patched"):
                with locks.one_at_a_time("ray 2.60.0"):
                    with locks.one_at_a_time("base"):
                        entered.set()

        threading.Thread(target=needs_the_built_layer, daemon=True).start()
        assert entered.wait(5)
    finally:
        release.set()
        thread.join(10)


def test_setup_and_an_image_build_download_a_wheelhouse_once(monkeypatch, tmp_path: Path):
    """`harness setup` and CI's image build, started together, both ask for
    the pinned wheelhouse: one downloads, the other waits and finds it."""
    monkeypatch.setattr(locks, "LOCK_DIR", tmp_path / "locks")
    monkeypatch.setattr(wheels, "WHEELHOUSE_DIR", tmp_path / "wheelhouse")
    wheel = b"a wheel"
    release = RayRelease("2.60.0", "ray.whl", wheels.hashlib.sha256(wheel).hexdigest())
    downloads: list[str] = []

    def download(requirement, house, python, options):
        downloads.append(requirement)
        partial = house.with_name(house.name + ".partial")
        partial.mkdir(parents=True)
        time.sleep(0.3)  # the other caller arrives while this one downloads
        (partial / "ray.whl").write_bytes(wheel)
        return partial

    monkeypatch.setattr(wheels, "_download", download)
    houses: list[Path] = []
    errors: list[BaseException] = []

    def setup() -> None:
        try:
            houses.append(wheels.ensure_wheelhouse(release))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=setup) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert downloads == ["ray[serve]==2.60.0"]
    assert houses == [tmp_path / "wheelhouse" / "ray-2.60.0"] * 2
