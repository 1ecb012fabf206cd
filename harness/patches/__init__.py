"""The patch series: reading patch files, applying them to site-packages or a Ray
checkout, the workspace they are edited in, the mutation check."""
