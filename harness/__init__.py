"""Patch set and Docker harness for Ray Serve behind HAProxy on spot capacity.

Nothing is imported here on purpose: containers put this package on their
PYTHONPATH to reach `harness.cluster.apps`, and they have no docker-py.
"""
