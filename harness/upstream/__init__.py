"""The series as upstream pull requests: branches, test venvs, rebase check, PR bodies."""
