"""The one exception type the harness raises for a user's mistake or environment.

Its message says what happened, what was left untouched and what to do next;
`python -m harness` prints it without a traceback and exits 2.
"""


class HarnessError(Exception):
    pass
