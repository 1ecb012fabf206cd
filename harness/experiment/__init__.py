"""An experiment's parts: history, load generator, nemesis, checker and report."""
