"""For the benches' run-loop tests: stand-ins for what needs Docker or a
downloaded Ray (the results folder, the pin, the node images, the cluster)."""

from __future__ import annotations

from types import SimpleNamespace

PIN = SimpleNamespace(ray=SimpleNamespace(version="2.60.0"))


class ClusterStandIn:
    """A cluster's `with` block, starting and removing nothing; each bench's
    test adds what its run loop asks of a cluster."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def offline(monkeypatch, bench, tmp_path) -> None:
    """`bench` writes its results under tmp_path, reads the 2.60.0 pin and
    builds no image."""
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(bench, "load_pin", lambda: PIN)
    monkeypatch.setattr(bench.images, "ensure_node_image", lambda spec: "node")
