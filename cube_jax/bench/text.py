"""How the board and the cross-play matrices write numbers and names: three decimals,
Markdown table cells, short plot labels. One place, so the two tables never disagree."""

from __future__ import annotations

import html
from typing import Optional

# What a cross-play cell shows for a team with no entry.
MISSING = "–"


def fixed(value: Optional[float], sign: str = "") -> str:
    """``value`` to three decimals, never "-0.000"; :data:`MISSING` for ``None``. ``sign``:
    a format sign option ("+" writes "+0.120")."""
    if value is None:
        return MISSING
    return f"{round(value, 3) + 0.0:{sign}.3f}"


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a GitHub Markdown table: HTML-escaped, "|" escaped, one line."""
    return html.escape(text.replace("\\", "\\\\"), quote=False).replace("|", "\\|").replace("\n", " ")


def plot_label(text: str, width: int) -> str:
    """``text`` for a matplotlib label: at most ``width`` characters (an ellipsis ends a
    shortened one), and "$" not read as mathtext."""
    short = text if len(text) <= width else text[:width - 1] + "…"
    return short.replace("$", r"\$")
