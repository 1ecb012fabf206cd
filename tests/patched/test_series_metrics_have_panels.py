"""Every metric the series adds to Serve has a panel on Serve's Grafana
dashboard, and the dashboard still generates.

The series' metrics are found, not listed: the names passed to
`metrics.Counter/Gauge/Histogram` in the patched `ray/serve` that the pinned
wheel's `ray/serve` does not define. So a patch that adds a metric and no
panel fails here. Needs the patched venv (`make patch-test`, `make test`).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import ray.serve
from ray.dashboard.modules.metrics.dashboards.serve_dashboard_panels import (
    SERVE_GRAFANA_PANELS,
)
from ray.dashboard.modules.metrics.grafana_dashboard_factory import (
    generate_serve_grafana_dashboard,
)

from harness.core import wheels
from harness.core.pin import load_pin

_DEFINED = re.compile(r'metrics\.(?:Counter|Gauge|Histogram)\(\s*"(serve_[a-z0-9_]+)"')


def _defined(sources: list[str]) -> set[str]:
    return {name for text in sources for name in _DEFINED.findall(text)}


def _series_metrics() -> set[str]:
    pin = load_pin()
    wheel = wheels.verify_ray_wheel(wheels.wheelhouse_for(pin.ray), pin.ray)
    with zipfile.ZipFile(wheel) as archive:
        stock = _defined(
            [
                archive.read(name).decode()
                for name in archive.namelist()
                if name.startswith("ray/serve/") and name.endswith(".py")
            ]
        )
    serve = Path(ray.serve.__file__).parent
    patched = _defined([p.read_text() for p in serve.rglob("*.py") if "tests" not in p.parts])
    return patched - stock


def test_the_series_adds_metrics_and_the_search_finds_them():
    added = _series_metrics()
    # The search itself must work: these are three of them, from 0002, 0010, 0011.
    assert {
        "serve_health_check_probes",
        "serve_haproxy_reloads",
        "serve_replica_force_kills",
    } <= added


def test_every_metric_the_series_adds_has_a_panel():
    exprs = " ".join(t.expr for panel in SERVE_GRAFANA_PANELS for t in panel.targets)
    # Exported with Ray's prefix; counters get _total, histograms _bucket.
    missing = sorted(
        name
        for name in _series_metrics()
        if not re.search(rf"\bray_{name}(_total|_bucket)?\b", exprs)
    )
    assert missing == []


def test_the_dashboard_generates_with_unique_ids_and_places():
    content, _uid = generate_serve_grafana_dashboard()
    panels = json.loads(content)["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    places = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels]
    assert len(set(places)) == len(places)


def test_a_panel_of_the_series_stacks_only_parts_of_one_whole():
    # Stacked series add up: a panel whose targets query different metrics
    # (probes sent and probes deferred, calls and reports) would show their
    # sum, which means nothing. One metric split by a tag may stack.
    added = _series_metrics()
    stacked = []
    for panel in SERVE_GRAFANA_PANELS:
        names = {
            name
            for target in panel.targets
            for name in re.findall(r"\bray_(serve_[a-z0-9_]+?)(?:_total|_bucket)?\b", target.expr)
        }
        if names & added and len(names) > 1 and panel.stack:
            stacked.append(panel.title)
    assert stacked == []
