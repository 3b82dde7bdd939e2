"""Sparklines: a series of counts as a small inline SVG line, with its total as a title."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["sparkline"]


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
