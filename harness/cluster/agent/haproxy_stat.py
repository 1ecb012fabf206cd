"""HAProxy's `show stat` answer read by field name: one reader for the
front load balancer (on the host) and the membership bench (in a node), so
both see the CSV the same way. Standard library only, as everything under
cluster/agent/ is."""

from __future__ import annotations


def stat_rows(answer: str) -> list[dict[str, str]] | None:
    """Each row of a `show stat` answer as field name -> value, in the
    header's order; None if the answer does not open with the header (a
    process not answering yet, or an error such as "No such proxy.")."""
    lines = answer.splitlines()
    if not lines or not lines[0].startswith("# "):
        return None
    header = lines[0].removeprefix("# ").split(",")
    return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
