"""Sparklines: a series of counts as a small inline SVG line, with its total as a title."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["FAVICON", "sparkline"]

#: The console's icon: a bell with a tick (one colour, drawn by hand; no file to ship).
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#1d3a5f"/>'
    '<path d="M16 6a7 7 0 0 0-7 7v5l-2 3h18l-2-3v-5a7 7 0 0 0-7-7z" fill="#dbe8ff"/>'
    '<circle cx="16" cy="24.5" r="2.2" fill="#dbe8ff"/>'
    '<path d="M12.5 13.5l2.5 2.5 4.5-5" fill="none" stroke="#1d3a5f" stroke-width="2"/>'
    "</svg>"
)


def sparkline(values: Sequence[int], width: int = 120, height: int = 24) -> Markup:
    """An inline ``<svg>`` drawing ``values`` left (oldest) to right, scaled to the largest.

    Examples:
        >>> str(sparkline([0, 2, 1], width=4, height=2))[:40]
        '<svg class="spark" width="4" height="2" '
    """
    top = max(values, default=0) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(values)
    )
    title = escape(
        f"{sum(values):,} sends in the last {len(values)} minutes, at most {top:,} a minute"
    )
    # Only numbers and the escaped title go in.
    svg = (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{title}"><title>{title}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/></svg>'
    )
    return Markup(svg)  # noqa: S704
