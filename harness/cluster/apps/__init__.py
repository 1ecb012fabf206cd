"""Serve applications the harness deploys. They run inside the node containers,
which put the project on PYTHONPATH; import only Ray and the standard library."""
