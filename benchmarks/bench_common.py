"""What the benchmark scripts share (imported from the scripts' own folder)."""
from __future__ import annotations


def markdown_table(title: str, rows: list, columns: list) -> str:
    """``rows`` (dicts) as a Markdown table under a ``##`` title; floats to 3 significant digits."""
    lines = [f"\n## {title}", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for col in columns:
            v = row.get(col, "")
            if isinstance(v, float):
                v = f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"
            cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
