"""The in-cluster agent's readiness rule (harness/cluster/agent/deploy.py), which the
churn and the membership probe wait on: pure logic, no Ray.

An app may be flipped again only once every replica it asked for is RUNNING;
flipping it while the new replica is still STARTING stops that replica first,
so it never reaches HAProxy and the churn changes nothing there."""

from types import SimpleNamespace

import pytest

from harness.cluster.agent.deploy import replicas_ready


def _app(**replica_states: int) -> SimpleNamespace:
    return SimpleNamespace(deployments={"Echo": SimpleNamespace(replica_states=replica_states)})


@pytest.mark.parametrize(
    "states, wanted, ready",
    [
        ({"RUNNING": 3}, 3, True),
        ({"RUNNING": 2, "STOPPING": 1}, 2, True),  # a stopping replica is already out of HAProxy
        ({"RUNNING": 2, "STARTING": 1}, 3, False),  # the added replica has not reached HAProxy
        ({"RUNNING": 2}, 3, False),  # the controller has not acted on the change yet
        ({"RUNNING": 3}, 2, False),  # nor on a scale-down
        ({"RUNNING": 3, "STARTING": 1}, 3, False),  # a replacement still starting
        ({"RUNNING": 2, "UPDATING": 1}, 2, False),
        ({}, 2, False),
    ],
)
def test_an_app_is_ready_only_when_every_asked_for_replica_runs(states, wanted, ready):
    assert replicas_ready(_app(**states), wanted) is ready


# Every command line the harness sends the agent (Cluster.exec_head's callers), as sent.
SENT = [
    ["deploy", "{}", "--timeout", "0"],
    ["nodes"],
    ["churn", "{}", "--apps", "a,b", "--low", "2", "--high", "3", "--interval", "1"],
    ["membership-latency", "{}", "--port", "8000"],
    ["actors"],
    ["controller-health"],
    ["health-ingest", "--nodes", "2", "--replicas-per-node", "3", "--period", "1"]
    + ["--duration", "5", "--senders", "1"],
    ["drain", "10.0.0.2:6379", "ab12", "--reason", "PREEMPTION", "--deadline-s", "60"]
    + ["--at", "1.5"],
]


@pytest.mark.parametrize("argv", SENT, ids=[argv[0] for argv in SENT])
def test_every_command_the_harness_sends_parses(argv):
    from harness.cluster.agent.__main__ import build_parser

    assert build_parser().parse_args(argv).cmd == argv[0]


def test_the_answer_is_the_last_line_and_an_error_exits_1(monkeypatch, capsys):
    from harness.cluster.agent import __main__ as agent
    from harness.cluster.agent import drain

    seen = {}

    def fake_drain(*args):
        seen["args"] = args
        return {"accepted": False, "error": "no such node"}

    monkeypatch.setattr(drain, "drain", fake_drain)
    assert agent.main(SENT[-1]) == 1
    message = "spot interruption (harness)"  # the default
    assert seen["args"] == ("10.0.0.2:6379", "ab12", "PREEMPTION", message, 60.0, 1.5)
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        '{"accepted": false, "error": "no such node"}'
    )
