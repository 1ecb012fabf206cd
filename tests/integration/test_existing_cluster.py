"""spot_preemption through the existing-cluster backend. The harness starts a
Docker cluster, then addresses it only as a user's own cluster is addressed: a
cluster file naming its Ray dashboard (on the head's address), the front LB as
the ingress, and `docker kill` as the terminate command. Nothing in the run
goes through docker-py. The verdicts must be the Docker backend's on the same
images (test_scenarios.py): the baseline loses requests, the patched image
does not."""

from dataclasses import replace
from pathlib import Path

import pytest

from harness.cluster import clusterfile, images, runs
from harness.cluster.cluster import Cluster
from harness.core.pin import load_pin
from harness.scenarios.spot_preemption import SpotPreemption

pytestmark = pytest.mark.integration

SCALE = 0.5  # as test_scenarios.py runs it on Docker


def run_on_existing(scenario, spec: images.ImageSpec, out_dir: Path):
    """`scenario` through the existing-cluster backend on a Docker cluster of
    `spec` started as the scenario starts its own (under its last run
    configuration on that image: the flags it turns on), with Ray's dashboard on
    the head's address; its outcome."""
    from harness.scenarios import run_scenario

    tag = images.ensure_node_image(spec)
    config = replace(
        scenario.cluster_config(tag, scenario.configs(spec)[-1]),
        name="rayspot-existing",
        dashboard=True,
    )
    with Cluster(config) as cluster:
        path = out_dir / "cluster.toml"
        out_dir.mkdir(parents=True)
        path.write_text(cluster.cluster_file_text())
        return run_scenario(
            scenario, cluster_file=clusterfile.load(path), out_dir=out_dir / "results"
        )


def test_spot_preemption_on_an_existing_cluster_judges_as_on_docker(tmp_path):
    pin = load_pin()
    plan = [
        images.ImageSpec(pin.baseline.version, "stock"),
        images.ImageSpec(pin.ray.version, "patched"),
    ]
    outcomes = runs.side_by_side(
        lambda order, spec: run_on_existing(
            SpotPreemption(scale=SCALE), spec, tmp_path / str(spec)
        ),
        plan,
        2,
    )
    for spec, outcome in zip(plan, outcomes, strict=True):
        (run,) = outcome.runs.values()
        print(f"\n{spec}: {run.label}: {'PASSED' if run.passed else 'FAILED'}")
        for what, held in run.checks:
            print(f"  {'ok ' if held else 'NO '} {what}")
        # What the cluster runs is read from it, not assumed.
        assert run.config.image == spec
        assert run.history.meta["cluster"]["version"] == spec.version
    stock, patched = (next(iter(o.runs.values())) for o in outcomes)
    assert not stock.passed and stock.verdict.failures > 0
    assert patched.passed
    # The controller's side of the drain, read through the dashboard's log API.
    timeline = dict(patched.facts.timeline)
    assert timeline["controller: first replica on the node STOPPING"] is not None
