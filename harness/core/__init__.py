"""Paths, errors, the pin and the wheelhouse: what every other part stands on."""
