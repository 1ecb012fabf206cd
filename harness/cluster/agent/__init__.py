"""The in-cluster agent: what the harness runs inside the head container, where Ray
is installed and the cluster is local, as `python -m harness.cluster.agent COMMAND`.
Each command prints one JSON document on the last line of stdout, which
`harness/cluster/cluster.py` (`Cluster.exec_head`) parses.

Standard library and Ray only: the node image has no harness dependencies, and
nothing here imports from the harness outside this package.

    session        the driver's connection to Ray and the Serve client
    deploy         declarative deploys and the readiness rule they wait on
    state          what the GCS and the Serve controller report (nodes, actors, health)
    drain          the GCS drain a spot-notice agent sends
    churn          the membership-churn workload
    membership     the membership-latency probe of bench-membership
    haproxy_membership  bench-membership by backend size: the HAProxy manager's
                   code on its own, with real HTTP servers
    health_ingest  the controller-ingest load of bench-health
"""
