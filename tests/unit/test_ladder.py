"""The timeout ladder: the scaled ladder keeps every ordering or refuses the
factor, and `python -m harness ladder check FILE` judges a service description
by orderings A-J (docs/architecture.md), naming the line of anything it cannot read."""

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.ladder.description import check_file, parse_duration
from harness.ladder.model import Deployment, Ladder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ladder"

# The least a description needs; tests add to it.
MINIMAL = """\
node_env:
  all:
    RAY_SERVE_ENABLE_HA_PROXY: "1"
deployments:
  ingress:
    ingress: true
"""


def _status(result, key: str) -> str:
    [ordering] = [o for _, o in result.results() if o.key == key]
    return ordering.status


def _ordering(result, key: str):
    [ordering] = [o for _, o in result.results() if o.key == key]
    return ordering


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "service.yaml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the model and scaling


def test_spot_notice_ladder_with_e_fails_no_ordering():
    statuses = {o.key: o.status for o in Ladder().orderings()}
    assert "fail" not in statuses.values()
    # The dataclass does not know the harness's LB or clients: those stay unknown.
    assert {k for k, s in statuses.items() if s == "unknown"} == {"G", "J"}


def test_half_scale_keeps_every_ordering_and_renders_env():
    ladder = Ladder().scaled(0.5)
    assert not [o for o in ladder.orderings() if o.status == "fail"]
    assert ladder.notice.notice_s == 60 and ladder.notice.drain_deadline_s == 30
    env = ladder.node_env()
    assert env["RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S"] == "14"
    assert env["RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"] == "15"
    assert env["RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S"] == "1"  # 1 + 13 < 15
    assert ladder.deployment_options()["graceful_shutdown_timeout_s"] == 29.5


def test_default_ladder_starts_nodes_with_only_the_ladder_vars():
    assert set(Ladder().node_env()) == {
        "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S",
        "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S",
        "RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
        "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S",
        "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S",
        "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_COVERS_REQUEST_TIMEOUT",
        "RAY_SERVE_HAPROXY_CLOSE_AFTER_CHUNKED_RESPONSE",
    }


def test_a_factor_that_breaks_an_ordering_is_refused():
    # HAProxy's integer knobs collapse at a quarter: close-spread-time 2 s
    # floors to 0, which HAProxy reads as not set, so an idle connection takes
    # a request until the 7 s hard stop, and C breaks.
    with pytest.raises(HarnessError, match=r"breaks C .*close-spread-time unset"):
        Ladder().scaled(0.25)


def test_spot_notice_gst_without_e_fails_ordering_e_with_its_arithmetic():
    # Set in the config file, a gst is not floored: the force-kill lands at MIN.
    ladder = Ladder(deployments=(Deployment("ingress", True, 20.0),))
    [e] = [o for o in ladder.orderings() if o.key.startswith("E[")]
    assert e.status == "fail"
    assert e.checks[0].text == (
        "gst max(20, MIN_DRAINING 30) = 30 >= MIN_DRAINING 30 + "
        "request_timeout_s 26 + wait_loop 2 + margin 1 = 59 -> FAIL"
    )


def test_a_gst_left_to_the_code_is_floored_at_min_plus_the_buffer():
    ladder = Ladder(deployments=(Deployment("ingress", True, 20.0, gst_in_config=False),))
    [e] = [o for o in ladder.orderings() if o.key.startswith("E[")]
    assert e.checks[0].text.startswith(
        "gst max(20, MIN_DRAINING 30 + SHUTDOWN_BUFFER_S 5) = 35 >= "
    )


# ------------------------------------------------------------------ the example files


def test_spot_notice_example_flags_ordering_e():
    result = check_file(EXAMPLES / "spot-notice-ladder.yaml")
    failing = {o.key for _, o in result.results() if o.status == "fail"}
    # G as well, at its boundary: with the force-kill at MIN (30 s) the last
    # reload is at deadline - 30 s, and its old worker lives until the deadline.
    # And C: without close-spread-time a stale worker keeps idle connections
    # for one last request until its hard stop.
    assert failing == {"C", "E[gst-15s]", "E[gst-20s]", "E[gst-25s]", "G"}
    assert "set graceful_shutdown_timeout_s >= 59" in _ordering(result, "E[gst-20s]").notes
    assert result.exit_code == 1


def test_ray_defaults_example_fails_for_rays_defaults():
    result = check_file(EXAMPLES / "ray-2.60.0-defaults.yaml")
    text = result.render()
    assert result.exit_code == 1
    for key in ("A", "C", "D", "E[ingress]", "G"):
        assert _status(result, key) == "fail", key
    # No server timeout and no request timeout: nothing competes with a 408, so
    # B holds; the missing rung fails C, where a hard stop cuts what nothing ends.
    assert _status(result, "B") == "pass"
    # hard-stop-after 120 s, Ray's default
    assert "hard-stop-after 120 <= MIN_DRAINING 30 -> FAIL" in text
    [(_, ladder)] = result.groups
    assert (
        "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S",
        "120 s",
        "Ray 2.60.0 default (ray/serve/_private/constants.py:803-805)",
    ) in ladder.inputs
    # no request timeout: nothing ends a request before the hard stop
    assert "request_timeout_s none < hard-stop-after 120 -> FAIL" in text
    assert any("no HAProxy `timeout server`" in n for n in _ordering(result, "B").notes)
    # no request timeout
    assert "request_timeout_s unset (Ray 2.60.0 default None" in text
    # the graceful-shutdown floor 35 s, from a hard-coded SHUTDOWN_BUFFER_S
    assert "gst max(20, MIN_DRAINING 30 + SHUTDOWN_BUFFER_S 5) = 35 >=" in text
    assert any(
        "SHUTDOWN_BUFFER_S is hard-coded" in n for n in _ordering(result, "E[ingress]").notes
    )
    # the old workers of the last reload outlive the drain deadline
    assert "hard-stop-after 120 = 145 < drain deadline 60 -> FAIL" in text


def test_fixed_example_passes_and_is_the_default_ladder():
    result = check_file(EXAMPLES / "spot-notice-ladder-fixed.yaml")
    assert result.exit_code == 0, result.render()
    assert all(o.holds for _, o in result.results())
    [(_, loaded)] = result.groups
    # The same ladder as Ladder() but for what the file adds: the LB and clients.
    assert (
        replace(
            loaded,
            lb_deregistration_s=None,
            client_timeout_s=None,
            deployments=Ladder().deployments,
        )
        == Ladder()
    )
    assert loaded.node_env() == Ladder().node_env()
    assert loaded.deployment_options() == Ladder().deployment_options()


# ------------------------------------------------------------------ unknown values


def test_values_only_the_environment_fixes_are_unknown_not_pass(tmp_path):
    result = check_file(
        _write(
            tmp_path,
            MINIMAL
            + """\
http_options:
  request_timeout_s: 26
""",
        )
    )
    g = _ordering(result, "G")
    assert g.status == "unknown"
    assert any(
        "LB deregistration ? (not given: set by the external load balancer" in c.text
        for c in g.checks
    )
    assert _status(result, "H") == "unknown"  # no spot notice given
    assert "not given: set by the cloud" in result.render()
    assert _status(result, "A") == "unknown"  # the app's longest request
    # The Ray values the file leaves out are Ray's defaults, with their source.
    assert "Ray 2.60.0 default (ray/serve/_private/constants.py:1080-1082)" in result.render()


def test_only_unknowns_exit_3_and_say_what_is_missing(tmp_path):
    text = (EXAMPLES / "spot-notice-ladder-fixed.yaml").read_text()
    text = text.replace("load_balancer:\n  deregistration: 2s\n", "")
    result = check_file(_write(tmp_path, text))
    assert result.exit_code == 3
    assert result.render().splitlines()[-1] == (
        "result: UNKNOWN: no ordering fails; unknown (give the missing values): G (exit 3)"
    )


# ------------------------------------------------------------------ node envs, drain actions


def test_node_groups_that_disagree_fail_and_each_gets_its_ladder(tmp_path):
    result = check_file(
        _write(
            tmp_path,
            """\
node_env:
  head: &env
    RAY_SERVE_ENABLE_HA_PROXY: "1"
    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: "30"
  worker:
    <<: *env
    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: "120"
deployments:
  ingress: {ingress: true}
""",
        )
    )
    assert result.exit_code == 1
    assert result.env_differences == (
        "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: head 30 s, worker 120 s",
    )
    assert [label for label, _ in result.groups] == ["nodes head", "nodes worker"]


def test_node_groups_sharing_an_anchor_share_one_ladder(tmp_path):
    result = check_file(EXAMPLES / "spot-notice-ladder.yaml")
    assert [label for label, _ in result.groups] == ["nodes head, worker: one env"]
    assert not result.env_differences


def test_sigterm_drain_uses_rays_own_drain_timeout(tmp_path):
    text = MINIMAL.replace('"1"\n', '"1"\n    RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S: "40"\n', 1)
    result = check_file(_write(tmp_path, text + "spot:\n  sigterm_grace: 45s\n"))
    i = _ordering(result, "I")
    assert [c.text for c in i.checks] == [
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S 40 >= gst max(20, MIN_DRAINING 30 + "
        "SHUTDOWN_BUFFER_S 5) = 35 + margin 1 = 36 -> PASS",
        "SIGTERM grace 45 >= RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S 40 + margin 1 = 41 -> PASS",
    ]
    assert (
        _ordering(result, "F")
        .checks[0]
        .text.startswith("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S 40 >= ")
    )


def test_zero_timeout_server_means_none(tmp_path):
    text = MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S: "0"\n', 1)
    result = check_file(_write(tmp_path, text + "http_options: {request_timeout_s: 26}\n"))
    b = _ordering(result, "B")
    assert b.checks[0].text == "request_timeout_s 26 < timeout server none -> PASS"
    assert b.status == "pass"
    # C's first check: the request timeout ends the request before the hard
    # stop (Ray's 120 s)...
    assert _ordering(result, "C").checks[0].text == (
        "request_timeout_s 26 < hard-stop-after 120 -> PASS"
    )
    # ...and without one, nothing does: not `timeout server`, which a stream
    # that keeps sending never reaches.
    text = MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S: "20"\n', 1)
    result = check_file(_write(tmp_path, text))
    assert _ordering(result, "C").checks[0].text == (
        "request_timeout_s none < hard-stop-after 120 -> FAIL"
    )


def test_zero_hard_stop_means_none_and_holds_what_it_would_cut(tmp_path):
    text = MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: "0"\n', 1)
    result = check_file(_write(tmp_path, text))
    # No hard stop cuts a request on a soft-stopped worker, with or without a
    # server timeout; but nothing then retires the old workers (D).
    assert _status(result, "C") == "pass"
    assert "hard-stop-after none <= MIN_DRAINING 30 -> FAIL" in result.render()


@pytest.mark.parametrize("value", ["1", "0", "yes"])
def test_unused_connections_are_kept_with_or_without_the_optimized_config(tmp_path, value):
    # Without close-spread-time, a connection that has not sent a request yet
    # stays on a stale worker until `timeout client` (3600 s) or the hard stop,
    # whatever the optimized config (Ray turns it on only for exactly "1");
    # the keep-alive timeout ends only connections that have.
    env = (
        f'"1"\n    RAY_SERVE_ENABLE_HAPROXY_OPTIMIZED_CONFIG: "{value}"\n'
        '    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: "30"\n'
    )
    text = MINIMAL.replace('"1"\n', env, 1) + (
        "http_options: {request_timeout_s: 26, keep_alive_timeout_s: 3}\n"
    )
    c = _ordering(check_file(_write(tmp_path, text)), "C")
    assert c.checks[1].text == (
        "close-spread-time unset (idle connections kept until hard-stop-after 30) + "
        "request_timeout_s 26 = 56 < hard-stop-after 30 -> FAIL"
    )


def test_a_client_timeout_ends_unused_connections_sooner(tmp_path):
    env = (
        '"1"\n    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: "30"\n'
        '    RAY_SERVE_HAPROXY_TIMEOUT_CLIENT_S: "3"\n'
    )
    text = MINIMAL.replace('"1"\n', env, 1) + (
        "http_options: {request_timeout_s: 26, keep_alive_timeout_s: 3}\n"
    )
    c = _ordering(check_file(_write(tmp_path, text)), "C")
    assert c.checks[1].status == "pass"


# ------------------------------------------------------------------ errors name the line


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("node_env:\n  all: [unclosed\n", 3, "not valid YAML"),
        (MINIMAL + "spotx: {}\n", 7, "unknown key 'spotx'; did you mean spot?"),
        (
            MINIMAL + "    graceful_shutdown_timeout: 5\n",
            7,
            "unknown key 'graceful_shutdown_timeout'; did you mean graceful_shutdown_timeout_s?",
        ),
        (
            MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_HAPROXY_TIMEOUT_SERVER: "28"\n', 1),
            4,
            "did you mean RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S?",
        ),
        (MINIMAL + "spot:\n  notice: 2 fortnights\n", 8, "'2 fortnights' is not a duration"),
        (MINIMAL + "margin: -1\n", 7, "-1 is not a duration"),
        (
            MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S: 30s\n', 1),
            4,
            "reads it with int()",
        ),
        (
            MINIMAL.replace('"1"\n', '"1"\n    RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S: "0"\n', 1),
            4,
            "requires a positive value",
        ),
        (MINIMAL.replace('"1"', '"true"'), 3, 'exactly "1"'),
        (MINIMAL + "spot: {drain_deadline: 60, sigterm_grace: 90}\n", 7, "not both"),
        (
            MINIMAL.replace("    ingress: true\n", "    graceful_shutdown_timeout_s: 5\n"),
            5,
            "say `ingress: true` or `ingress: false`",
        ),
        (
            MINIMAL.replace("RAY_SERVE_ENABLE_HA_PROXY", "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"),
            3,
            'set RAY_SERVE_ENABLE_HA_PROXY: "1"',
        ),
    ],
)
def test_errors_name_the_line(tmp_path, text, line, message):
    path = _write(tmp_path, text)
    with pytest.raises(HarnessError) as info:
        check_file(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_a_key_given_twice_is_an_error(tmp_path):
    path = _write(tmp_path, MINIMAL + "margin: 1\nmargin: 2\n")
    with pytest.raises(
        HarnessError,
        match=r":8: the file: margin is given twice \(first on "
        r"line 7\)",
    ):
        check_file(path)


@pytest.mark.parametrize(
    "value, seconds",
    [
        (120, 120),
        (1.5, 1.5),
        ("120s", 120),
        ("2m", 120),
        ("1.5 min", 90),
        ("500ms", 0.5),
        ("1h", 3600),
        ("45", 45),
    ],
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["2 fortnights", "-5s", "1e3", "", True, None, [1]])
def test_what_is_not_a_duration(value):
    with pytest.raises(ValueError):
        parse_duration(value)


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    "name, code",
    [
        ("spot-notice-ladder.yaml", 1),
        ("ray-2.60.0-defaults.yaml", 1),
        ("spot-notice-ladder-fixed.yaml", 0),
    ],
)
def test_cli_exit_code(name, code):
    run = subprocess.run(
        [sys.executable, "-m", "harness", "ladder", "check", f"examples/ladder/{name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == code, run.stderr
    assert run.stdout.splitlines()[-1].endswith(f"(exit {code})")


def test_cli_reports_a_bad_file_without_a_traceback(tmp_path):
    path = _write(tmp_path, MINIMAL + "spot:\n  notice: soon\n")
    run = subprocess.run(
        [sys.executable, "-m", "harness", "ladder", "check", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: {path}:8: spot.notice: 'soon' is not a duration")
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "data, line, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00IHDR", 1, "not UTF-8 text (byte 0x89 at offset 0"),
        (b"node_env:\n  all: caf\xe9\n", 2, "not UTF-8 text (byte 0xe9 at offset 20"),
        (b"node_env:\n  all:\x00\n", 2, "not YAML text: character U+0000 is not allowed"),
    ],
)
def test_a_binary_or_non_utf8_file_is_bad_input_not_a_traceback(tmp_path, data, line, message):
    path = tmp_path / "service.yaml"
    path.write_bytes(data)
    with pytest.raises(HarnessError, match=re.escape(f"{path}:{line}: {message}")):
        check_file(path)
    run = subprocess.run(
        [sys.executable, "-m", "harness", "ladder", "check", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: {path}:{line}: {message}")
    assert "Traceback" not in run.stderr
