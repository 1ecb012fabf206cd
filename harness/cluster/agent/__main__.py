"""`python -m harness.cluster.agent COMMAND ...` inside the head container: parse
the command, run it, print its JSON answer on the last line. Exit 1 when the
answer carries an error."""

from __future__ import annotations

import argparse
import json
import sys

from harness.cluster.agent import (
    churn,
    deploy,
    drain,
    haproxy_membership,
    health_ingest,
    membership,
    state,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.cluster.agent")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_deploy = sub.add_parser("deploy")
    p_deploy.add_argument("config_json")
    p_deploy.add_argument("--timeout", type=float, default=180.0)
    sub.add_parser("nodes")
    p_churn = sub.add_parser("churn")
    p_churn.add_argument("config_json", help="the deploy config the churn starts from")
    p_churn.add_argument("--apps", required=True, help="comma-separated apps to churn")
    p_churn.add_argument("--low", type=int, default=2)
    p_churn.add_argument("--high", type=int, default=3)
    p_churn.add_argument("--interval", type=float, default=1.0)
    p_churn.add_argument("--duration", type=float, default=60.0)
    p_latency = sub.add_parser("membership-latency")
    p_latency.add_argument("config_json", help="one app; a replica is added to it and removed")
    p_latency.add_argument("--port", type=int, default=8000)
    p_sizes = sub.add_parser("haproxy-membership")
    p_sizes.add_argument("--size", type=int, required=True, help="servers in the backend")
    p_sizes.add_argument("--rounds", type=int, default=10, help="one addition, one removal each")
    p_sizes.add_argument(
        "--draining", type=int, default=8, help="servers removed with a request still open"
    )
    sub.add_parser("actors")
    sub.add_parser("controller-health")
    sub.add_parser("gcs-health-config")
    sub.add_parser("haproxy-pids")
    p_info = sub.add_parser("ray-info")
    p_info.add_argument("--settings", default="", help="comma-separated env var names")
    p_ingest = sub.add_parser("health-ingest")
    for flag, kind in (
        ("--nodes", int),
        ("--replicas-per-node", int),
        ("--period", float),
        ("--duration", float),
        ("--senders", int),
    ):
        p_ingest.add_argument(flag, type=kind, required=True)
    p_drain = sub.add_parser("drain")
    p_drain.add_argument("gcs_address")
    p_drain.add_argument("node_id_hex")
    p_drain.add_argument(
        "--reason", default="PREEMPTION", choices=["PREEMPTION", "IDLE_TERMINATION"]
    )
    p_drain.add_argument("--message", default="spot interruption (harness)")
    p_drain.add_argument("--deadline-s", type=float, default=0.0, help="0: no deadline")
    p_drain.add_argument("--at", type=float, default=0.0, help="send at this time.time()")
    return parser


def run(args: argparse.Namespace) -> object:
    """The command's answer, a JSON-serialisable value."""
    if args.cmd == "deploy":
        return deploy.deploy(json.loads(args.config_json), args.timeout)
    if args.cmd == "nodes":
        return state.nodes()
    if args.cmd == "churn":
        return churn.churn(
            json.loads(args.config_json),
            args.apps.split(","),
            args.low,
            args.high,
            args.interval,
            args.duration,
        )
    if args.cmd == "membership-latency":
        return membership.membership_latency(json.loads(args.config_json), args.port)
    if args.cmd == "haproxy-membership":
        return haproxy_membership.haproxy_membership(args.size, args.rounds, args.draining)
    if args.cmd == "actors":
        return state.actors()
    if args.cmd == "controller-health":
        return state.controller_health()
    if args.cmd == "gcs-health-config":
        return state.gcs_health_config()
    if args.cmd == "haproxy-pids":
        return sorted(membership.haproxy_pids())
    if args.cmd == "ray-info":
        return state.ray_info([name for name in args.settings.split(",") if name])
    if args.cmd == "health-ingest":
        return health_ingest.health_ingest(
            args.nodes, args.replicas_per_node, args.period, args.duration, args.senders
        )
    return drain.drain(
        args.gcs_address, args.node_id_hex, args.reason, args.message, args.deadline_s, args.at
    )


def main(argv: list[str]) -> int:
    result = run(build_parser().parse_args(argv))
    print(json.dumps(result))
    return 1 if isinstance(result, dict) and result.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
