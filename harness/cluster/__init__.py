"""Clusters: the boundary scenarios see (boundary.py), the Docker cluster the
harness starts, an existing cluster it is pointed at, images, the front load
balancer, the in-cluster agent and the apps."""
