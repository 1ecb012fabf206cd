"""The cluster file of a cluster the harness did not start: what it must say,
how a bad one is refused (exit 2, naming the key), and that a scenario needing
a node operation the file does not give is refused before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.cluster import clusterfile, images
from harness.cluster.boundary import Node
from harness.cluster.existing import ExistingCluster
from harness.core.errors import HarnessError
from harness.scenarios import SCENARIOS, base

GOOD = """
dashboard = "http://10.0.0.5:8265"
ingress = "http://10.0.0.100"
metrics_port = 8090

[commands]
terminate = "echo terminating {name} at {ip}, node {id}"
add = "echo adding"
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def test_a_good_file_says_where_the_cluster_is_and_what_acts_on_a_node(tmp_path):
    spec = clusterfile.load(_file(tmp_path, GOOD))
    assert spec.dashboard == "http://10.0.0.5:8265"
    assert (spec.ingress_host, spec.ingress_port) == ("10.0.0.100", 80)
    assert (spec.serve_port, spec.metrics_port) == (8000, 8090)
    assert spec.operations == {"terminate", "add"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            GOOD.replace('terminate = "echo terminating {name} at {ip}, node {id}"\n', ""),
            "no terminate",
        ),
        (GOOD.replace('dashboard = "http://10.0.0.5:8265"\n', ""), "dashboard is missing"),
        (GOOD.replace("http://10.0.0.100", "https://10.0.0.100"), "not an http://HOST"),
        (GOOD + 'partition = "echo cut {ip}"\n', "partition or heal without the other"),
        (GOOD + 'reboot = "echo {name}"\n', "unknown operations reboot"),
        (GOOD.replace("{name} at", "{hostname} at"), "not a template over"),
        (GOOD.replace("metrics_port = 8090", "metrics_port = 99999"), "not a port number"),
        ("ingres = 1\n" + GOOD, "unknown keys ingres"),
        (GOOD.replace("metrics_port = 8090\n", ""), "metrics_port is missing"),
        ("dashboard = [", "not valid TOML"),
        (GOOD.replace("http://10.0.0.100", "http://10.0.0.100:99999"), "not an http://HOST"),
        (GOOD.replace("http://10.0.0.100", "http://10.0.0.100:abc"), "not an http://HOST"),
        (GOOD.replace("http://10.0.0.100", "http://10.0.0.100:0"), "not an http://HOST"),
        (GOOD.replace("http://10.0.0.100", "http://10.0.0.100/api"), "has a path"),
        (GOOD.replace("{ip},", "{ip.real},"), "not a template over"),
        (GOOD.replace("echo adding", "echo adding {ip}"), "over nothing"),
        ("serve_port = true\n" + GOOD, "not a port number"),
    ],
)
def test_a_bad_file_is_refused_naming_what_is_wrong(tmp_path, text, said):
    with pytest.raises(HarnessError, match=said) as caught:
        clusterfile.load(_file(tmp_path, text))
    assert caught.value.exit_code == 2
    assert "cluster.toml" in str(caught.value)


def test_a_folder_for_a_file_is_refused(tmp_path):
    with pytest.raises(HarnessError, match="cannot read the cluster file") as caught:
        clusterfile.load(tmp_path)
    assert caught.value.exit_code == 2


def test_a_literal_brace_is_written_doubled_in_every_command(tmp_path):
    text = GOOD.replace("echo adding", "echo {{adding}}").replace("node {id}", "node {{{id}}}")
    spec = clusterfile.load(_file(tmp_path, text))
    assert spec.run("add").strip() == "{adding}"
    assert spec.run("terminate", Node("worker", "w", "1.2.3.4"), "ab").strip().endswith("{ab}")


def test_a_command_gets_the_nodes_values_quoted(tmp_path):
    spec = clusterfile.load(_file(tmp_path, GOOD))
    node = Node("worker", "pod one; rm -rf x", "10.0.0.7")
    command = spec.command("terminate", node, "abc123")
    assert command == "echo terminating 'pod one; rm -rf x' at 10.0.0.7, node abc123"
    assert spec.run("terminate", node, "abc123").strip() == (
        "terminating pod one; rm -rf x at 10.0.0.7, node abc123"
    )


def test_a_command_that_fails_is_an_error_naming_it(tmp_path):
    spec = clusterfile.load(
        _file(tmp_path, GOOD.replace("echo adding", "echo no quota >&2; exit 3"))
    )
    with pytest.raises(HarnessError, match=r"the add command .* failed \(exit 3\)") as caught:
        spec.run("add")
    assert "no quota" in str(caught.value)


def test_a_scenario_needing_a_command_the_file_lacks_is_refused_before_any_change(
    tmp_path, monkeypatch
):
    """Nothing is asked of the cluster: the refusal comes from the file alone."""
    spec = clusterfile.load(_file(tmp_path, GOOD.replace('add = "echo adding"\n', "")))

    def no_contact(*args, **kwargs):
        raise AssertionError("the cluster was contacted before the refusal")

    for method in ("connect", "ray_nodes", "exec_head", "deploy"):
        monkeypatch.setattr(ExistingCluster, method, no_contact)

    class NeedsAdd(base.Scenario):
        name = "needs_add"
        needs = frozenset({"terminate", "add"})

    with pytest.raises(HarnessError, match=r"needs_add needs node operations .* add") as caught:
        base.run_scenario(NeedsAdd(), cluster_file=spec, out_dir=tmp_path / "out")
    assert "Nothing was changed" in str(caught.value)
    assert "add = ...   # add a worker node" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_docker_only_scenario_is_refused_on_an_existing_cluster(tmp_path, monkeypatch, capsys):
    path = _file(tmp_path, GOOD)
    docker_only = next(name for name, cls in SCENARIOS.items() if cls.needs is None)
    monkeypatch.setattr(ExistingCluster, "connect", lambda self: pytest.fail("contacted"))
    assert cli.main(["run", docker_only, "--cluster", str(path)]) == 2
    assert "runs on the harness's Docker clusters only" in capsys.readouterr().err


def test_spot_preemption_needs_only_terminate():
    assert SCENARIOS["spot_preemption"].needs == {"terminate"}


def test_the_kuberay_example_and_its_cluster_file_agree():
    """examples/kuberay: the manifest starts what the scenarios need on every
    node (HAProxy, direct ingress, the metrics port the file reads, the "w"
    resource on workers only), and its cluster file loads."""
    import json

    import yaml

    from harness.core.paths import ROOT

    example = ROOT / "examples" / "kuberay"
    spec = clusterfile.load(example / "cluster.toml")
    raycluster, service = yaml.safe_load_all((example / "raycluster.yaml").read_text())
    assert (raycluster["apiVersion"], raycluster["kind"]) == ("ray.io/v1", "RayCluster")
    head = raycluster["spec"]["headGroupSpec"]
    (workers,) = raycluster["spec"]["workerGroupSpecs"]
    for group in (head, workers):
        (container,) = group["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["RAY_SERVE_ENABLE_HA_PROXY"] == env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
        assert group["rayStartParams"]["metrics-export-port"] == str(spec.metrics_port)
        assert spec.serve_port in {p["containerPort"] for p in container["ports"]}
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert "resources" not in head["rayStartParams"]
    # KubeRay passes the value to `ray start --resources=` as it is written.
    assert json.loads(json.loads(workers["rayStartParams"]["resources"])) == {"w": 10}
    assert service["spec"]["selector"] == {
        "ray.io/cluster": raycluster["metadata"]["name"],
        "ray.io/node-type": "worker",
    }
    # The worker nodes start as spot_preemption starts its own.
    from harness.scenarios import SCENARIOS

    (worker,) = workers["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    spot = SCENARIOS["spot_preemption"]()
    wanted = spot.cluster_config("", spot.configs(images.ImageSpec("2.60.0", "patched"))[0]).env
    assert {k: v for k, v in wanted.items() if k in env} == wanted
    assert workers["template"]["spec"]["restartPolicy"] == "Never"
    assert service["spec"]["ports"][0]["targetPort"] == spec.serve_port
    assert "ray.io/cluster=serve-spot,ray.io/node-type=worker" in spec.commands["terminate"]


def test_a_cluster_whose_workers_lack_the_w_resource_is_refused(tmp_path, monkeypatch):
    spec = clusterfile.load(_file(tmp_path, GOOD))
    monkeypatch.setattr(ExistingCluster, "connect", lambda self: self)
    nodes = [{"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.5", "Resources": {}}]
    monkeypatch.setattr(ExistingCluster, "ray_nodes", lambda self: nodes)
    monkeypatch.setattr(ExistingCluster, "exec_head", lambda *a, **k: pytest.fail("a job ran"))
    with pytest.raises(HarnessError, match='custom resource "w"') as caught:
        ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", [])
    assert "Nothing was changed" in str(caught.value)


# ------------------------------------------------------------------ the cluster, faked


def _state_nodes(worker_ip: str) -> list[dict]:
    """The State API's alive head and one worker (with the "w" resource) at `worker_ip`."""
    node = {"state": "ALIVE", "resources_total": {}}
    return [
        {**node, "node_id": "h", "node_ip": "10.0.0.5", "node_name": "head", "is_head_node": True},
        {
            **node,
            "node_id": worker_ip.rsplit(".", 1)[1],
            "node_ip": worker_ip,
            "node_name": "w" + worker_ip.rsplit(".", 1)[1],
            "is_head_node": False,
            "resources_total": {"w": 10},
        },
    ]


def _answering(monkeypatch, tmp_path, found: dict, nodes=None):
    """An ExistingCluster whose dashboard answers from these values: the
    State API's node list and the agent's `ray-info`."""
    import time as time_module

    from harness.cluster import existing

    spec = clusterfile.load(_file(tmp_path, GOOD))
    monkeypatch.setattr(existing, "_port_open", lambda host, port: host != "10.0.0.99")
    nodes = nodes or _state_nodes(worker_ip="10.0.0.6")
    monkeypatch.setattr(ExistingCluster, "_state_nodes", lambda self: nodes)
    info = {
        "version": "2.60.0",
        "known": [],
        "utc_offset_s": 0,
        "env": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},
    } | found
    monkeypatch.setattr(
        ExistingCluster,
        "exec_head",
        lambda self, args, **kw: {"time": time_module.time(), **info},
    )
    return spec


@pytest.mark.parametrize(
    ("found", "said"),
    [
        ({"version": "3.0.0.dev0"}, "judges releases"),
        ({"env": {}}, "without HAProxy"),
        ({"time": 0.0}, "clock is"),
    ],
)
def test_a_cluster_the_harness_cannot_judge_is_refused(monkeypatch, tmp_path, found, said):
    spec = _answering(monkeypatch, tmp_path, found)
    with pytest.raises(HarnessError, match=said) as caught:
        ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", [])
    assert "Nothing was changed" in str(caught.value)


def test_a_cluster_whose_nodes_this_host_cannot_reach_is_refused(monkeypatch, tmp_path):
    nodes = _state_nodes(worker_ip="10.0.0.99")
    spec = _answering(monkeypatch, tmp_path, {}, nodes)
    with pytest.raises(HarnessError, match="cannot reach the metrics port 8090 of w99"):
        ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", [])


def test_a_ray_address_in_the_environment_that_names_another_cluster_is_refused(
    monkeypatch, tmp_path
):
    """Ray's SDK clients would take it over the file's dashboard."""
    spec = _answering(monkeypatch, tmp_path, {})
    monkeypatch.setenv("RAY_ADDRESS", "http://elsewhere:8265")
    with pytest.raises(HarnessError, match="RAY_ADDRESS=http://elsewhere:8265 is set"):
        ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", [])
    monkeypatch.setenv("RAY_ADDRESS", spec.dashboard)  # the same cluster: fine
    assert ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", []).workers


def test_a_ready_cluster_keeps_what_it_runs_and_its_clock(monkeypatch, tmp_path):
    spec = _answering(monkeypatch, tmp_path, {"known": ["RAY_SERVE_ENABLE_PUSH_HEALTH"]})
    cluster = ExistingCluster.prepare(spec, {"terminate"}, "spot_preemption", [])
    assert cluster.flavor == "patched"
    assert abs(cluster.found["clock_skew_s"]) < 1.0
    assert [n.name for n in cluster.nodes] == ["head", "w6"]
    assert cluster.ray_node_ids() == {"head": "h", "w6": "6"}


def test_log_times_are_read_in_the_heads_zone(monkeypatch, tmp_path):
    """Ray writes local times; a head at UTC-5 logs 07:00 for 12:00 UTC."""
    import json

    spec = _answering(monkeypatch, tmp_path, {})
    cluster = ExistingCluster(spec).connect()
    cluster.found = {"utc_offset_s": -5 * 3600}
    line = "INFO 2026-12-07 07:00:00,000 controller 1 -- Stopping Replica(x)"
    answers = {
        "/api/v0/logs": json.dumps({"result": True, "data": {"result": {"x": ["serve/c.log"]}}}),
        "/api/v0/logs/file": line + "\n",
    }
    monkeypatch.setattr(ExistingCluster, "_dashboard_get", lambda self, path, **q: answers[path])
    ((stamp, _),) = cluster.log_lines(cluster.head, ["Stopping Replica("])
    assert stamp == 1796644800.0  # 2026-12-07 12:00:00 UTC


def test_the_agents_answer_is_its_last_json_line():
    from harness.cluster.existing import _last_json

    out = '[2026-12-07 04:00:00,000 I 1 1] (raylet) a log line\n{"accepted": true}\n[tail'
    assert _last_json(out) == {"accepted": True}
    assert _last_json("no answer") is None


def test_a_run_on_an_existing_cluster_is_judged_as_it_is_and_says_what_it_ran(tmp_path):
    """One cluster, no baseline: the outcome is the run's own verdict, and the
    report says what the cluster runs and which of the scenario's settings its
    nodes lack."""
    from harness.cluster.images import ImageSpec
    from harness.experiment.configs import RunConfig
    from harness.experiment.history import History, Request

    class Plain(base.Scenario):
        name = "plain"

        def judge(self, config, history):
            return base.ImageRun(config.label, history, base.Facts(), config)

    config = RunConfig(ImageSpec("2.60.0", "stock"), "existing cluster")
    history = History(
        {
            "label": config.label,
            "config": config.to_meta(),
            "cluster": {
                "version": "2.60.0",
                "known": [],
                "env": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},
                "env_differs": {"RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": ["30", None]},
                "clock_skew_s": 0.2,
                "utc_offset_s": 0,
            },
        }
    )
    history.add_request(Request("short", 1.0, 1.1, None, "reset"))
    outcome = base.judge_runs(Plain(), [history], tmp_path)
    assert not outcome.as_expected  # it lost a request: exit 1, stock or not
    assert outcome.findings[0].startswith("2.60.0-stock existing cluster: FAILED, judged as")
    md = outcome.report["md"].read_text()
    assert "## The cluster (2.60.0-stock existing cluster)" in md
    assert "`RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S`: 30, None" in md


def test_serve_running_with_other_http_options_is_refused_before_anything_is_deployed(
    monkeypatch, tmp_path
):
    """Serve keeps the HTTP options it started with; an option the config
    leaves to its default counts too (a request timeout a previous run set)."""
    spec = clusterfile.load(_file(tmp_path, "serve_port = 8001\n" + GOOD))
    deployed = []

    class Serve:
        def get_serve_details(self):
            return {
                "controller_info": {"node_id": "h"},
                "http_options": {"host": "0.0.0.0", "port": 8001, "request_timeout_s": 15.0},
            }

        def deploy_applications(self, config):
            deployed.append(config)

    cluster = ExistingCluster(spec)
    monkeypatch.setattr(ExistingCluster, "_serve_client", lambda self: Serve())
    monkeypatch.setattr(ExistingCluster, "_harness_module", lambda self: "gcs://harness.zip")
    config = {"http_options": {"host": "0.0.0.0", "port": 8000}, "applications": []}
    with pytest.raises(HarnessError, match="request_timeout_s.*Nothing was deployed"):
        cluster.deploy(config)
    assert deployed == []
    # The file's port is Serve's port: the config's 8000 was replaced.
    assert cluster.app_config(config)["http_options"]["port"] == 8001
