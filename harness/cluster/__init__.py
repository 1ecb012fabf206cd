"""The Docker boundary: images, clusters, the front load balancer, the in-cluster
agent and the apps."""
