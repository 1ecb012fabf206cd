"""Paths, errors, the pin, the wheelhouse, venv layout and the runners for
other programs (proc, git): what every other part stands on."""
