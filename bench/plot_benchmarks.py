"""Draw the plots of docs/benchmarks.md from the benchmarks' own JSON output.

Usage (from the project root; matplotlib is the benchmarks' own dependency)::

    .venv/bin/python -m pip install -r bench/requirements.txt
    .venv/bin/python bench/plot_benchmarks.py            # every plot whose results exist
    .venv/bin/python bench/plot_benchmarks.py --results DIR --out DIR

It reads, from ``bench/results/`` (``--results``):

- ``telegram.json``: ``bench_telegram.py --json``, drawn as ``bench-telegram.svg``;
- ``claims.json``: ``bench_claims.py --json``, drawn as ``bench-claims.svg``;
- ``campaign*.json``: ``bench_campaign.py --json`` (one panel per database, one line per
  file in it, an earlier version's dashed), drawn as ``bench-campaign.svg``;
- ``breakdown.json``: ``profile_breakdown.py --json``, drawn as ``bench-breakdown.svg``;

and writes the SVGs to ``docs/assets/`` (``--out``), each twice: ``NAME.svg`` for Material's
light palette and ``NAME-dark.svg`` for its dark one (the page shows the one of the palette
read, with ``#only-light`` and ``#only-dark``). Both have a transparent background. Each
plot names the date and the machine of its run, and records in its metadata
(``dc:source``) the SHA-256 of every file it was drawn from:
``tests/test_bench_results.py`` fails while a results file and its plot disagree.

Reading and checking the files needs nothing but the standard library (the tests use
`load` and `sources`); only drawing imports matplotlib.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "docs" / "assets"

# The campaign plot's panels, in this order; a database's name starts with one of these.
DATABASES = ("PostgreSQL", "MariaDB", "SQLite")


@dataclass(frozen=True)
class Palette:
    """The colours of one of Material's palettes: notifyonce's own side stands out, the
    others are grey; the runs of the campaign plot are told apart by colour and marker
    (Okabe and Ito's colours, which colour-blind readers tell apart too)."""

    suffix: str  # added to the SVG's name
    text: str
    muted: str  # the footer, the raw drivers' lines
    ours: str
    other: str
    runs: tuple[str, ...]


LIGHT = Palette(
    "",
    text="#212121",
    muted="#5f5f5f",
    ours="#3f51b5",
    other="#8d8d8d",
    runs=("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#8a6d00"),
)
# Material's slate: lighter tints, so lines and text keep their contrast on the dark page.
DARK = Palette(
    "-dark",
    text="#e2e4e9",
    muted="#a9adb8",
    ours="#8c9eff",
    other="#9e9e9e",
    runs=("#56b4e9", "#f0a35e", "#4fd1a5", "#e79acb", "#f0e442"),
)
PALETTES = (LIGHT, DARK)
MARKERS = ("o", "s", "^", "D", "v")


class ResultsError(ValueError):
    """A results file that is not what a benchmark writes."""


# -- reading --------------------------------------------------------------------------


def _need(record: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ResultsError(f"{where}: {key!r} is missing or not {kind}")
    return value


def load(path: Path) -> dict[str, Any]:
    """A benchmark's results file, checked: what the plot of its benchmark reads is there."""
    record = json.loads(path.read_text(encoding="utf-8"))
    where = path.name
    if not isinstance(record, dict):
        raise ResultsError(f"{where}: not a JSON object")
    kind = _need(record, "benchmark", str, where)
    _need(record, "date", str, where)
    _need(record, "machine", str, where)
    number = (int, float)
    if kind == "telegram":
        for run in _need(record, "latencies", list, where):
            _need(run, "latency_ms", number, where)
            for side in _need(run, "sides", list, where):
                _need(side, "name", str, where)
                _need(side, "msg_per_s", number, where)
                _need(side, "cpu_ms_per_msg", number, where)
    elif kind == "claims":
        for case in _need(record, "cases", list, where):
            _need(case, "label", str, where)
            _need(case, "rate", number, where)
    elif kind == "campaign":
        _need(_need(record, "settings", dict, where), "every", int, where)
        for database in _need(record, "databases", list, where):
            _need(database, "name", str, where)
            for rate in _need(database, "rates", list, where):
                if not isinstance(rate, number):
                    raise ResultsError(f"{where}: a rate is not a number")
    elif kind == "breakdown":
        for run in _need(record, "runs", list, where):
            _need(run, "label", str, where)
            _need(run, "cpu_us", number, where)
            for part in _need(run, "parts", list, where):
                _need(part, "part", str, where)
                _need(part, "us", number, where)
    elif kind == "audience":  # a table in docs/benchmarks.md, no plot
        _need(_need(record, "settings", dict, where), "notifications", int, where)
        for database in _need(record, "databases", list, where):
            _need(database, "name", str, where)
            for run in ("no table", "none gone", "gone"):
                _need(_need(database, run, dict, where), "sent_per_second", number, where)
    elif kind == "personal":  # a table in docs/benchmarks.md, no plot
        _need(record, "rows", int, where)
        phases = _need(record, "phases", dict, where)
        for phase in ("imports", "read", "check", "dry run"):
            _need(_need(phases, phase, dict, where), "peak_rss_mb", number, where)
    elif kind.endswith("-spread"):  # bench/spread.py: a table in docs/benchmarks.md, no plot
        for figures in _need(record, "ratios", dict, where).values():
            for figure in ("median", "low", "high"):
                _need(figures, figure, number, where)
            _need(figures, "runs", list, where)
    else:
        raise ResultsError(f"{where}: unknown benchmark {kind!r}")
    return record


def digest(path: Path) -> str:
    """``bench/results/NAME.json sha256:HEX``: how a plot names a file it was drawn from."""
    name = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    return f"{Path(name).as_posix()} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


@dataclass(frozen=True)
class Plot:
    """One picture: the results files it is drawn from, and how."""

    name: str  # the SVG's file name (for the light palette)
    pattern: str  # the results files, a glob in the results folder
    draw: Callable[[list[dict[str, Any]], Palette], Any]  # returns a matplotlib Figure

    def file(self, palette: Palette) -> str:
        """The SVG's file name for ``palette``: ``bench-claims-dark.svg`` for the dark."""
        return self.name.removesuffix(".svg") + palette.suffix + ".svg"


def sources(plot: Plot, results: Path = RESULTS) -> list[Path]:
    """The results files ``plot`` is drawn from, in name order."""
    return sorted(results.glob(plot.pattern))


def caption(record: dict[str, Any]) -> str:
    """The run of a results file: its date and machine (and, if not the run's own JSON,
    where the figures come from)."""
    text = f"run {record['date']} on {record['machine']}"
    if "source" in record:
        text += f"\n({record['source']})"
    return text


# -- drawing (matplotlib from here on) ---------------------------------------------------


def _style(palette: Palette) -> None:
    import matplotlib as mpl

    mpl.use("svg")
    mpl.rcParams.update(
        {
            "text.color": palette.text,
            "axes.labelcolor": palette.text,
            "axes.edgecolor": palette.muted,
            "xtick.color": palette.text,
            "ytick.color": palette.text,
            "legend.labelcolor": palette.text,
            "svg.hashsalt": "notifyonce",  # the same ids on every run
            "svg.fonttype": "none",  # text stays text: smaller, and searchable
            "font.family": "sans-serif",
            "font.size": 11,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 11,
            "axes.titleweight": "bold",
            # transparent: the page's own background shows through
            "figure.facecolor": "none",
            "axes.facecolor": "none",
            "savefig.facecolor": "none",
            "savefig.transparent": True,
        }
    )


def _footer(figure: Any, records: Sequence[dict[str, Any]], palette: Palette) -> float:
    """Caption ``figure`` with the runs of ``records``; the share of its height taken."""
    lines = [line for r in records for line in caption(r).splitlines()]
    text = "\n".join(_wrap(line, 125) for line in lines)
    figure.text(0.01, 0.005, text, fontsize=9, color=palette.muted, va="bottom", ha="left")
    inches = (text.count("\n") + 1) * 9 * 1.3 / 72 + 0.1
    return inches / figure.get_figheight()


def draw_telegram(records: list[dict[str, Any]], palette: Palette) -> Any:
    """TelegramSender against aiogram and httpx: msg/s and CPU per message, per latency."""
    import matplotlib.pyplot as plt

    record = records[-1]
    runs = record["latencies"]
    names = [side["name"] for side in runs[0]["sides"]]
    figure, (rates, cpu) = plt.subplots(
        1, 2, figsize=(9, 0.5 * len(names) + 2.4), layout="constrained"
    )
    height = 0.8 / len(runs)
    for index, run in enumerate(runs):
        by_name = {side["name"]: side for side in run["sides"]}
        ys = [n + index * height for n in range(len(names))]
        shade = 1.0 - 0.45 * index / max(1, len(runs) - 1)
        colours = [palette.ours if name == "TelegramSender" else palette.other for name in names]
        on = f" on {run['loop']}" if "loop" in run else ""  # bench_telegram.py --loop
        label = f"server latency {run['latency_ms']:.0f} ms{on}"
        for axes, key, fmt in ((rates, "msg_per_s", "{:,.0f}"), (cpu, "cpu_ms_per_msg", "{:.2f}")):
            values = [by_name[name][key] if name in by_name else 0 for name in names]
            bars = axes.barh(ys, values, height=height, color=colours, alpha=shade, label=label)
            axes.bar_label(bars, [fmt.format(v) for v in values], padding=3, fontsize=8)
    for axes, title in (
        (rates, "msg/s (more is better)"),
        (cpu, "CPU ms/msg (less is better)"),
    ):
        axes.set_title(title, loc="left")
        axes.set_yticks([n + height * (len(runs) - 1) / 2 for n in range(len(names))])
        axes.set_yticklabels(names)
        axes.invert_yaxis()
        axes.margins(x=0.18)
    cpu.set_yticklabels([])
    from matplotlib.patches import Patch

    shades = [
        Patch(
            color=palette.other,
            alpha=1.0 - 0.45 * index / max(1, len(runs) - 1),
            label=f"server {run['latency_ms']:.0f} ms"
            + (f" on {run['loop']}" if "loop" in run else ""),
        )
        for index, run in enumerate(runs)
    ]
    cpu.legend(handles=shades, loc="upper right", fontsize=8, frameon=False)
    settings = record.get("settings", {})
    rates.set_xlabel(
        f"{settings.get('sends', '?')} sends to as many chats,"
        f" concurrency {settings.get('concurrency', '?')}, rate limiter off"
    )
    figure.suptitle("TelegramSender against aiogram and httpx", x=0.01, ha="left", weight="bold")
    bottom = _footer(figure, [record], palette)
    figure.get_layout_engine().set(rect=(0, bottom, 1, 0.95 - bottom))
    return figure


def _claims_group(label: str) -> str:
    """Which comparison a case of ``bench_claims.py`` belongs to, by its label."""
    if "unnest" in label or "claim_many" in label:
        return "claim_many, bulk"
    if "sequential" in label:
        return "claim_slot, sequential"
    return "claim_slot, concurrent"


def draw_claims(records: list[dict[str, Any]], palette: Palette) -> Any:
    """AsyncLedger against the raw driver: claims per second, per comparison."""
    import matplotlib.pyplot as plt

    record = records[-1]
    groups: dict[str, list[dict[str, Any]]] = {}
    for case in record["cases"]:
        groups.setdefault(_claims_group(case["label"]), []).append(case)
    figure, panels = plt.subplots(
        1,
        len(groups),
        figsize=(9, 0.42 * max(len(g) for g in groups.values()) + 2.4),
        layout="constrained",
    )
    for axes, (title, cases) in zip(panels, groups.items(), strict=True):
        ours = [c for c in cases if c["label"].startswith("AsyncLedger")]
        raw = [c for c in cases if not c["label"].startswith("AsyncLedger")]
        ordered = raw + ours
        colours = [palette.ours if c in ours else palette.other for c in ordered]
        bars = axes.barh(range(len(ordered)), [c["rate"] for c in ordered], color=colours)
        fastest = max((c["rate"] for c in raw), default=0)
        texts = [
            f"{c['rate']:,.0f}"
            + (f"  ({c['rate'] / fastest:.2f}x)" if c in ours and fastest else "")
            for c in ordered
        ]
        axes.bar_label(bars, texts, padding=3, fontsize=8)
        axes.set_yticks(range(len(ordered)))
        axes.set_yticklabels([_wrap(c["label"], 24) for c in ordered], fontsize=8)
        axes.invert_yaxis()
        axes.set_title(title, loc="left")
        axes.set_xlabel("claims per second")
        axes.xaxis.set_major_formatter(lambda x, _: f"{x:,.0f}")
        axes.locator_params(axis="x", nbins=2)
        axes.margins(x=0.45)
    figure.suptitle(
        "AsyncLedger against the raw driver on PostgreSQL (x: against the fastest raw side)",
        x=0.01,
        ha="left",
        weight="bold",
    )
    bottom = _footer(figure, [record], palette)
    figure.get_layout_engine().set(rect=(0, bottom, 1, 0.95 - bottom))
    return figure


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _panel(name: str) -> str:
    """The panel of a database named ``name``: "PostgreSQL (asyncpg)" -> "PostgreSQL"."""
    return next((key for key in DATABASES if name.startswith(key)), name)


def draw_campaign(records: list[dict[str, Any]], palette: Palette) -> Any:
    """One campaign's rate per chunk against the rows it already had: one panel per
    database, one line per run (its colour and marker), the run's raw driver dotted."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, LogLocator

    # A run's own results are drawn solid, the latest one last; a series kept to compare
    # with (an earlier version's figures, named by its "series") dashed and lighter.
    ordered = sorted(records, key=lambda r: (r.get("series") is None, r["date"]))
    panels = [
        p for p in DATABASES if any(_panel(d["name"]) == p for r in ordered for d in r["databases"])
    ]
    figure, grid = plt.subplots(
        len(panels), 1, figsize=(9, 2.3 * len(panels) + 1.9), sharex=True, layout="constrained"
    )
    axes_of = dict(zip(panels, [grid] if len(panels) == 1 else list(grid), strict=True))
    for index, record in enumerate(ordered):
        baseline = "series" in record
        every = record["settings"]["every"]
        tag = record.get("series", f"run {record['date']}")
        colour, marker = palette.runs[index % len(palette.runs)], MARKERS[index % len(MARKERS)]
        for database in record["databases"]:
            axes = axes_of[_panel(database["name"])]
            # Rows at each chunk's end, on a log scale: runs of 10,000 and of a million
            # both read.
            rows = [every * (k + 1) for k in range(len(database["rates"]))]
            driver = database["name"].removeprefix(_panel(database["name"])).strip(" ()")
            axes.plot(
                rows,
                database["rates"],
                marker=marker,
                markersize=4,
                color=colour,
                linestyle="--" if baseline else "-",
                alpha=0.7 if baseline else 1.0,
                label=f"{tag}" + (f" ({driver})" if driver else ""),
            )
            if not baseline and "raw" in database:
                # The raw driver's rate as a legend entry, not a label on the line: the
                # runs' raw rates lie close together and their labels printed over each
                # other.
                axes.axhline(
                    database["raw"],
                    color=colour,
                    linestyle=":",
                    linewidth=1.2,
                    label=f"  its raw driver: {database['raw']:,.0f}/s",
                )
    ends = sorted(
        {
            r["settings"]["every"] * (k + 1)
            for r in records
            for d in r["databases"]
            for k in range(len(d["rates"]))
        }
    )
    for name, axes in axes_of.items():
        axes.set_title(name, loc="left")
        axes.set_xscale("log")
        # Few chunks: a tick at each; many: 1, 2 and 5 of each power of ten.
        locator = (
            FixedLocator(ends) if len(ends) <= 8 else LogLocator(base=10, subs=(1.0, 2.0, 5.0))
        )
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(lambda x, _: f"{x:,.0f}")
        axes.xaxis.set_minor_formatter(lambda x, _: "")
        axes.yaxis.set_major_formatter(lambda y, _: f"{y:,.0f}")
        axes.set_ylim(0, None)
        axes.margins(y=0.12)
        axes.locator_params(axis="y", nbins=4)
        axes.set_ylabel("notifications/s")
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.05), frameon=False)
    axes_of[panels[-1]].set_xlabel("rows of the campaign when the chunk ended (log scale)")
    figure.suptitle(
        "One campaign (FakeSender): the rate of each chunk as it grows",
        x=0.01,
        ha="left",
        weight="bold",
    )
    bottom = _footer(figure, ordered, palette)
    figure.get_layout_engine().set(rect=(0, bottom, 1, 0.96 - bottom))
    return figure


def draw_breakdown(records: list[dict[str, Any]], palette: Palette) -> Any:
    """A message's CPU on the paid lane, part by part: µs per message of each run."""
    import matplotlib.pyplot as plt

    record = records[-1]
    runs = record["runs"]
    parts = [part["part"] for part in runs[0]["parts"]]
    figure, axes = plt.subplots(
        figsize=(9, 0.42 * len(parts) * len(runs) + 1.6), layout="constrained"
    )
    height = 0.8 / len(runs)
    for index, run in enumerate(runs):
        ys = [n + index * height for n in range(len(parts))]
        last = index == len(runs) - 1
        values = [part["us"] for part in run["parts"]]
        bars = axes.barh(
            ys,
            values,
            height=height,
            color=palette.ours if last else palette.other,
            label=f"{run['label']}: {run['cpu_us']:.0f} µs per message",
        )
        axes.bar_label(bars, [f"{v:.0f}" for v in values], padding=3, fontsize=8)
    axes.set_yticks([n + height * (len(runs) - 1) / 2 for n in range(len(parts))])
    axes.set_yticklabels(parts)
    axes.invert_yaxis()
    axes.margins(x=0.12)
    axes.set_xlabel("µs of CPU per message (less is better)")
    axes.legend(loc="lower right", fontsize=8, frameon=False)
    messages = record.get("settings", {}).get("messages", "?")
    figure.suptitle(
        f"broadcast --paid to {messages:,} chats on PostgreSQL: a message's CPU, part by part",
        x=0.01,
        ha="left",
        weight="bold",
    )
    bottom = _footer(figure, [record], palette)
    figure.get_layout_engine().set(rect=(0, bottom, 1, 0.95 - bottom))
    return figure


PLOTS = [
    Plot("bench-telegram.svg", "telegram.json", draw_telegram),
    Plot("bench-claims.svg", "claims.json", draw_claims),
    Plot("bench-campaign.svg", "campaign*.json", draw_campaign),
    Plot("bench-breakdown.svg", "breakdown.json", draw_breakdown),
]


def render(plot: Plot, results: Path, out: Path) -> list[Path]:
    """Draw ``plot`` from its results files into ``out``, once per palette; the files
    written, none when it has no results."""
    paths = sources(plot, results)
    if not paths:
        return []
    records = [load(path) for path in paths]
    import matplotlib.pyplot as plt

    written = []
    for palette in PALETTES:
        _style(palette)
        figure = plot.draw(records, palette)
        target = out / plot.file(palette)
        figure.savefig(
            target,
            format="svg",
            metadata={
                "Date": None,  # no timestamp: the file changes only when its results do
                "Creator": "bench/plot_benchmarks.py",
                "Source": "; ".join(digest(path) for path in paths),
            },
        )
        plt.close(figure)
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON files' folder")
    parser.add_argument("--out", type=Path, default=OUT, help="where the SVGs go")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        written = render(plot, args.results, args.out)
        if not written:
            print(f"{plot.name}: no {plot.pattern} in {args.results}, not drawn")
        for target in written:
            print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
