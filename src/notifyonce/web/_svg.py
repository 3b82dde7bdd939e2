"""Sparklines: a series of counts as a small inline SVG line, with its total as a title."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["FAVICON", "chart", "sparkline"]

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


# The chart's margins (pixels): room for the scale on the left and the time below.
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 10, 8, 18


def chart(values: Sequence[int], width: int = 480, height: int = 60) -> Markup:
    """An inline ``<svg>`` chart of ``values``, one a minute, oldest left: axes, its scale
    (0 and the busiest minute, in sends per minute) and its time (minutes ago to now),
    so it is read without hovering. ``width`` and ``height`` are the plot's; the margins
    come on top.

    Examples:
        >>> "sends per minute" in str(chart([0, 2, 1]))
        True
    """
    top = max(values, default=0) or 1
    full_width, full_height = _LEFT + width + _RIGHT, _TOP + height + _BOTTOM
    step = width / max(len(values) - 1, 1)
    base = _TOP + height
    points = " ".join(
        f"{_LEFT + i * step:.1f},{base - (v / top) * height:.1f}" for i, v in enumerate(values)
    )
    title = escape(
        f"{sum(values):,} sends in the last {len(values)} minutes, at most {top:,} a minute"
    )
    # Only numbers and the escaped title go in.
    svg = (
        f'<svg class="chart" width="{full_width}" height="{full_height}" '
        f'viewBox="0 0 {full_width} {full_height}" role="img" aria-label="{title}">'
        f"<title>{title}</title>"
        f'<g stroke="#9aa3ad" stroke-width="1">'
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{base}"/>'
        f'<line x1="{_LEFT}" y1="{base}" x2="{_LEFT + width}" y2="{base}"/></g>'
        f'<g font-size="10" fill="#5b6570" font-family="system-ui, sans-serif">'
        f'<text x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end" data-axis="top">{top:,}/min</text>'
        f'<text x="{_LEFT - 4}" y="{base}" text-anchor="end">0</text>'
        f'<text x="{_LEFT}" y="{full_height - 4}" data-axis="start">-{len(values)} min</text>'
        f'<text x="{_LEFT + width / 2:.0f}" y="{full_height - 4}" text-anchor="middle">'
        "sends per minute</text>"
        f'<text x="{_LEFT + width}" y="{full_height - 4}" text-anchor="end">now</text></g>'
        f'<polyline fill="none" stroke="#1d5fa8" stroke-width="1.5" points="{points}"/></svg>'
    )
    return Markup(svg)  # noqa: S704
