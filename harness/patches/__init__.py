"""The patch series: applying it to site-packages, the workspace, the mutation check."""
