"""One meaning for the timeout ladder: the harness's model (`ladder check`, the
scenarios' ladders) and patch 0005's start-up and deploy checks judge the same
ladders alike.

Each side reads the ladder its own way: Ray parses the node env with its own
constants module, reloaded per case, and the harness parses the same env as a
service description. Then every ordering 0005 checks must come out violated on
one side exactly when it fails on the other. Needs the patched venv (`make
patch-test`, `make test`): the checks and the force-kill budget are 0004's
and 0005's code.
"""

from __future__ import annotations

import importlib
import itertools
import os
from dataclasses import replace

import pytest
from ray.serve._private import constants, timeout_ladder, utils
from ray.serve._private.common import DeploymentID
from ray.serve._private.config import DeploymentConfig

from harness.ladder.description import check_file
from harness.ladder.model import Deployment, Ladder

# Each of 0005's orderings and where the harness keeps it: (ordering, check).
# C's second check, the idle connection's, exists only when a stale worker
# keeps idle connections; the harness then has nothing to fail, and 0005
# nothing to report.
HAPROXY_ORDERINGS = {
    timeout_ladder.REQUEST_TIMEOUT_BELOW_SERVER_TIMEOUT: ("B", 0),
    timeout_ladder.REQUEST_ENDS_BEFORE_HARD_STOP: ("C", 0),
    timeout_ladder.IDLE_CONNECTION_REQUEST_BEFORE_HARD_STOP: ("C", 1),
    timeout_ladder.HARD_STOP_WITHIN_DRAINING_PERIOD: ("D", 0),
    timeout_ladder.PORT_QUARANTINE_BEYOND_HARD_STOP: ("D", 1),
}

UNSET = None
# The env side of the grid, each value as a user would write it; UNSET leaves
# Ray's default. 0 is HAProxy's "none" for both of its timeouts.
ENV_GRID = {
    "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": (UNSET, "0", "20", "28"),
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": ("0", "30", UNSET),
    "RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S": (UNSET, "0", "2"),
    "RAY_SERVE_ENABLE_HAPROXY_OPTIMIZED_CONFIG": (UNSET, "0"),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": ("30", "60"),
    "RAY_SERVE_PORT_QUARANTINE_S": (UNSET, "0", "200"),
}
# The HTTP options, which 0005 is handed and the harness reads from the file.
REQUEST_TIMEOUTS = (None, 0, 10, 26)
KEEP_ALIVE_TIMEOUTS = (0, 5, 90)


@pytest.fixture
def ray_reads(monkeypatch):
    """`ray_reads(env)`: Ray's constants as a node started with `env` (and
    HAProxy on) has them, in the modules that imported them. Ray's own env is
    back when the test ends."""
    saved = dict(os.environ)

    def read(env: dict[str, str | None]) -> None:
        os.environ.clear()
        os.environ.update(saved)
        os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        importlib.reload(constants)
        for module in (timeout_ladder, utils):
            for name in vars(module):
                if name.startswith("RAY_SERVE_") and hasattr(constants, name):
                    monkeypatch.setattr(module, name, getattr(constants, name))

    yield read
    os.environ.clear()
    os.environ.update(saved)
    importlib.reload(constants)


def _harness_ladder(tmp_path, env: dict[str, str | None]) -> Ladder:
    """The harness's ladder of a service whose nodes run with `env`."""
    lines = ["node_env:", "  all:", '    RAY_SERVE_ENABLE_HA_PROXY: "1"']
    lines += [f'    {name}: "{value}"' for name, value in env.items() if value is not None]
    lines += ["deployments:", "  ingress:", "    ingress: true", ""]
    path = tmp_path / "service.yaml"
    path.write_text("\n".join(lines))
    [(_, ladder)] = check_file(path).groups
    return ladder


def _harness_fails(ladder: Ladder, key: str, index: int) -> tuple[bool, str]:
    [ordering] = [o for o in ladder.orderings() if o.key == key]
    if index >= len(ordering.checks):
        return False, f"{key}: no such check"
    check = ordering.checks[index]
    return check.status == "fail", f"{key}: {check.text}"


def test_the_haproxy_orderings_agree_on_every_ladder_of_the_grid(tmp_path, ray_reads):
    disagreements = []
    seen: dict[str, set[bool]] = {name: set() for name in HAPROXY_ORDERINGS}
    names = list(ENV_GRID)
    for values in itertools.product(*ENV_GRID.values()):
        env = dict(zip(names, values, strict=True))
        ray_reads(env)
        from_file = _harness_ladder(tmp_path, env)
        for request_s, keep_alive_s in itertools.product(REQUEST_TIMEOUTS, KEEP_ALIVE_TIMEOUTS):
            ladder = replace(
                from_file, request_timeout_s=request_s, keep_alive_timeout_s=keep_alive_s
            )
            violated = {
                v.ordering: str(v)
                for v in timeout_ladder.check_haproxy_orderings(request_s, keep_alive_s)
            }
            for name, (key, index) in HAPROXY_ORDERINGS.items():
                fails, shown = _harness_fails(ladder, key, index)
                seen[name].add(fails)
                if fails != (name in violated):
                    disagreements.append(
                        f"{env} request_timeout_s={request_s} keep_alive_timeout_s="
                        f"{keep_alive_s}: {name}: Ray {violated.get(name, 'holds')}; "
                        f"harness {shown}"
                    )
    assert not disagreements, f"{len(disagreements)} disagree, e.g.\n" + "\n".join(
        disagreements[:10]
    )
    # The grid reaches both verdicts of every ordering, so agreement means something.
    assert all(verdicts == {True, False} for verdicts in seen.values()), seen


@pytest.mark.parametrize("min_draining_s", ["30", "60"])
@pytest.mark.parametrize("buffer_s", ["1", "5"])
def test_the_force_kill_ordering_agrees_under_rays_own_budget(ray_reads, min_draining_s, buffer_s):
    # The harness's E models the budget Ray 2.60.0 gives (max(gst, MIN) for a
    # gst set in the config), with its margin in the place of 0005's shutdown
    # buffer: 0004's budget function gives exactly that with the opt-out.
    ray_reads(
        {
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": min_draining_s,
            "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S": buffer_s,
            "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_COVERS_REQUEST_TIMEOUT": "0",
        }
    )
    seen, disagreements = set(), []
    for gst_s, loop_s, request_s in itertools.product(
        (20.0, 40.0, 59.0, 70.0, 100.0), (0.5, 2.0), (0.0, 10.0, 26.0)
    ):
        ladder = Ladder(
            request_timeout_s=request_s,
            min_draining_s=float(min_draining_s),
            margin_s=float(buffer_s),
            deployments=(Deployment("ingress", True, gst_s, loop_s, gst_in_config=True),),
        )
        [e] = [o for o in ladder.orderings() if o.key == "E[ingress]"]
        violations = timeout_ladder.check_ingress_deployment(
            DeploymentID(name="ingress", app_name="app"),
            DeploymentConfig(
                graceful_shutdown_timeout_s=gst_s, graceful_shutdown_wait_loop_s=loop_s
            ),
            request_s,
        )
        seen.add(e.status)
        if (e.status == "fail") != bool(violations):
            disagreements.append(f"gst {gst_s} loop {loop_s} request {request_s}: {e.checks}")
    assert not disagreements, "\n".join(disagreements)
    assert seen == {"pass", "fail"}


def test_the_patched_force_kill_lands_on_the_ladders_gst(ray_reads):
    # The scenarios deploy the ladder's gst and start nodes with its env; under
    # 0004, whatever gst a deployment has, the controller then force-kills an
    # ingress replica at that gst: MIN + request timeout + wait loop + buffer.
    for ladder in (Ladder(), Ladder().scaled(0.5)):
        ray_reads(ladder.node_env())
        options = ladder.deployment_options()
        for deployment_gst_s in (1.0, 20.0):  # a small one and Ray's default
            budget_s = utils.get_direct_ingress_shutdown_timeout_s(
                deployment_gst_s,
                options["graceful_shutdown_wait_loop_s"],
                ladder.request_timeout_s,
            )
            assert budget_s == options["graceful_shutdown_timeout_s"]
