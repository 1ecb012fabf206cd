"""The series as upstream pull requests: `branches` (patch messages, branch
names, stacked PR branches, the stand-in checkout), `testenv` (a Ray release's
test venv and the patches' tests run in it), `rebase` (the series against
another release), `prbody` (each patch's PR description) and `evidence` (the
prose in evidence.toml that says which runs bear on each patch)."""
