"""Integration fixtures: real node images and real clusters in Docker."""

import pytest

from harness.cluster import engine, images
from harness.core.pin import load_pin


@pytest.fixture(scope="session")
def docker_engine():
    """The Docker client; fails the run with the harness's own advice if no daemon."""
    return engine.client()


@pytest.fixture(scope="session")
def patched_image(docker_engine) -> str:
    return images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
