"""A benchmark's rows as a Markdown table: one dict a row, its keys the header."""

from __future__ import annotations

from collections.abc import Callable


def cell(v: object) -> str:
    """A float with two decimals, None as `-`, anything else as it prints."""
    if isinstance(v, float):
        return f"{v:.2f}"
    return "-" if v is None else str(v)


def table(
    rows: list[dict], head: list[str] | None = None, fmt: Callable[[object], str] = cell
) -> list[str]:
    """The table's lines: `head` (default: the first row's keys), the rule, a line a row."""
    head = head or list(rows[0])
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(fmt(r.get(k)) for k in head) + " |" for r in rows),
    ]
