"""The benchmark plots of docs/benchmarks.md stay the pictures of the results beside them.

``bench/plot_benchmarks.py`` draws each plot from the JSON the benchmarks write
(``--json``) into ``bench/results/``. Without matplotlib (the plots' own dependency) these
tests check that each plot was drawn from the results files as they are now, that the page
shows each plot with the figures of the same run in its table, and that what each
benchmark writes is what the plot script reads.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ._examples import load_module

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PAGE = ROOT / "docs" / "benchmarks.md"


def _module(name: str) -> ModuleType:
    return load_module(f"_bench_{name}", BENCH / f"{name}.py")


PLOTTER = _module("plot_benchmarks")
RESULTS = sorted((BENCH / "results").glob("*.json"))


def _section(heading: str) -> str:
    """The text of docs/benchmarks.md under ``## heading``, up to the next ``## ``."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_each_results_file_is_what_the_plot_script_reads(path: Path) -> None:
    """Every file in bench/results/ has its benchmark's figures, a date and a machine."""
    record = PLOTTER.load(path)
    assert [] == [key for key in ("date", "machine") if not record[key].strip()]


DRAWN = [(plot, palette) for plot in PLOTTER.PLOTS for palette in PLOTTER.PALETTES]
DRAWN_IDS = [plot.file(palette) for plot, palette in DRAWN]


@pytest.mark.parametrize(("plot", "palette"), DRAWN, ids=DRAWN_IDS)
def test_each_plot_is_drawn_from_the_results_as_they_are(plot: Any, palette: Any) -> None:
    """docs/assets/<plot>.svg and its dark twin record the SHA-256 of exactly the results
    files they are drawn from now (regenerate: python bench/plot_benchmarks.py)."""
    sources = PLOTTER.sources(plot)
    assert sources, f"no {plot.pattern} in bench/results"
    svg = (ROOT / "docs" / "assets" / plot.file(palette)).read_text(encoding="utf-8")
    recorded = re.search(r"<dc:source>(.*?)</dc:source>", svg, re.S)
    assert recorded is not None, f"{plot.file(palette)} names no source"
    assert "; ".join(PLOTTER.digest(path) for path in sources) == recorded[1]


@pytest.mark.parametrize(("plot", "palette"), DRAWN, ids=DRAWN_IDS)
def test_each_plot_has_a_transparent_background_and_its_palettes_text(
    plot: Any, palette: Any
) -> None:
    """A plot lets the page's background show through (no white sheet in the dark
    palette), and its text is in the colour of the palette it is shown in."""
    svg = (ROOT / "docs" / "assets" / plot.file(palette)).read_text(encoding="utf-8")
    background = re.search(r'<g id="patch_1">\s*<path [^>]*style="([^"]*)"', svg)
    assert background is not None, f"{plot.file(palette)} has no figure background"
    assert "fill: none" == background[1]
    fills = re.findall(r"fill: (#[0-9a-f]{6})", svg)
    assert palette.text == max(set(fills), key=fills.count), "most of the text is its colour"


@pytest.mark.parametrize("plot", PLOTTER.PLOTS, ids=lambda p: p.name)
def test_the_benchmarks_page_shows_each_plot(plot: Any) -> None:
    """docs/benchmarks.md shows every plot the script draws, in the palette read: the
    light one with #only-light, the dark twin with #only-dark (Material shows one)."""
    page = PAGE.read_text(encoding="utf-8")
    assert f"](assets/{plot.file(PLOTTER.LIGHT)}#only-light)" in page
    assert f"](assets/{plot.file(PLOTTER.DARK)}#only-dark)" in page


def test_the_sender_table_shows_the_plotted_run() -> None:
    """The TelegramSender tables show the msg/s and CPU of every side the plot draws."""
    record = PLOTTER.load(BENCH / "results" / "telegram.json")
    section = _section("TelegramSender against aiogram and httpx")
    figures = [
        text
        for run in record["latencies"]
        for side in run["sides"]
        for text in (f"| {side['msg_per_s']:,.0f} |", f"| {side['cpu_ms_per_msg']:.2f} |")
    ]
    assert [] == [text for text in figures if text not in section]


def test_the_claims_table_shows_the_plotted_run() -> None:
    """The claims table shows the rate of every case the plot draws."""
    record = PLOTTER.load(BENCH / "results" / "claims.json")
    section = _section("The ledger: claims against the raw driver")
    figures = [f"{case['rate']:,.0f} /s" for case in record["cases"]]
    assert [] == [text for text in figures if text not in section]


def test_the_campaign_table_shows_every_plotted_run() -> None:
    """The campaign section shows every chunk's rate of every run the plot draws."""
    section = _section("One campaign as it grows")
    figures = [
        f"{rate:,.0f} /s"
        for path in sorted((BENCH / "results").glob("campaign*.json"))
        for database in PLOTTER.load(path)["databases"]
        for rate in database["rates"]
    ]
    assert [] == [text for text in figures if text not in section]


def test_a_results_file_without_a_machine_is_refused(tmp_path: Path) -> None:
    """The plot script refuses results that do not say where they were measured."""
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"benchmark": "claims", "date": "today", "cases": []}))
    with pytest.raises(PLOTTER.ResultsError, match="machine"):
        PLOTTER.load(path)


# -- what each benchmark writes with --json, read back by the plot script ----------------------


@pytest.fixture
def bench_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/ on sys.path, as when a benchmark runs (they import _results from there)."""
    monkeypatch.syspath_prepend(str(BENCH))


def _written(tmp_path: Path, benchmark: str, figures: dict[str, Any]) -> dict[str, Any]:
    results = _module("_results")
    path = tmp_path / f"{benchmark}.json"
    results.write(str(path), benchmark, figures)
    record: dict[str, Any] = PLOTTER.load(path)
    return record


@pytest.mark.usefixtures("bench_on_path")
def test_bench_telegram_json_is_read_by_the_plot_script(tmp_path: Path) -> None:
    """bench_telegram.py's --json figures load, with the run's date and this machine."""
    import argparse

    bench = _module("bench_telegram")
    args = argparse.Namespace(sends=10, concurrency=2, rounds=1, limited_sends=5)
    side = {"name": "aiogram", "msg_per_s": 9.0, "cpu_ms_per_msg": 0.2, "connections": 2}
    runs = [{"latency_ms": 20.0, "sides": [side]}]
    record = _written(tmp_path, "telegram", bench.results(args, runs, 5, 4.5))
    assert [side] == record["latencies"][0]["sides"]
    assert "CPUs" in record["machine"]


@pytest.mark.usefixtures("bench_on_path")
def test_bench_claims_json_is_read_by_the_plot_script(tmp_path: Path) -> None:
    """bench_claims.py's --json figures load, each case with its median."""
    bench = _module("bench_claims")
    rates = {"raw, held connection, sequential": [3.0, 1.0, 2.0]}
    record = _written(tmp_path, "claims", bench.results(rates, 0.0))
    assert [("raw, held connection, sequential", 2.0)] == [
        (case["label"], case["rate"]) for case in record["cases"]
    ]


@pytest.mark.usefixtures("bench_on_path")
async def test_bench_campaign_json_is_read_by_the_plot_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_campaign.py --json writes each database's rates and raw rate as the plot reads
    them (its campaign and raw runs stubbed: only what it writes is under test)."""
    bench = _module("bench_campaign")
    figures = {"rates": [5.0, 4.0], "overall": 4.5, "statements": 0.1, "memory": 1.0}

    async def campaign(*args: object) -> dict[str, Any]:
        return figures

    async def raw(*args: object) -> float:
        return 9.0

    monkeypatch.setattr(bench, "run_campaign", campaign)
    monkeypatch.setattr(bench, "raw_sqlite", raw)
    monkeypatch.setattr(bench.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    path = tmp_path / "campaign.json"
    argv = ["bench_campaign.py", "--databases", "sqlite", "--every", "10", "--json", str(path)]
    monkeypatch.setattr(sys, "argv", argv)
    await bench.main()
    record = PLOTTER.load(path)
    assert 10 == record["settings"]["every"]
    assert [("SQLite (aiosqlite)", [5.0, 4.0], 9.0)] == [
        (d["name"], d["rates"], d["raw"]) for d in record["databases"]
    ]


def test_the_personal_table_shows_the_results_file() -> None:
    """The million-row table shows each phase's peak RSS of the results file, under 150 MB."""
    record = PLOTTER.load(BENCH / "results" / "personal.json")
    section = _section("A million recipients as rows, in bounded memory")
    assert 1_000_000 == record["rows"]
    for phase in ("imports", "read", "check", "dry run"):
        peak = record["phases"][phase]["peak_rss_mb"]
        assert f"| {peak:.1f} MB |" in section, phase
        assert peak < 150


@pytest.mark.slow
def test_bench_personal_json_is_read_by_the_plot_script(tmp_path: Path) -> None:
    """bench_personal.py's --json figures load, each phase with its peak RSS and rows."""
    import os
    import subprocess

    target = tmp_path / "personal.json"
    subprocess.run(
        [sys.executable, str(BENCH / "bench_personal.py"), "--rows", "300", "--json", str(target)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    record = PLOTTER.load(target)
    assert 300 == record["rows"]
    assert [300, 300, 300] == [record["phases"][p]["rows"] for p in ("read", "check", "dry run")]


def test_the_breakdown_table_shows_the_plotted_runs() -> None:
    """The paid lane's breakdown table shows every part's µs of every run the plot draws."""
    record = PLOTTER.load(BENCH / "results" / "breakdown.json")
    section = _section("Where a message's CPU goes on the paid lane")
    rows = [
        (part["part"], [f"{run['parts'][index]['us']:.0f} µs" for run in record["runs"]])
        for index, part in enumerate(record["runs"][0]["parts"])
    ]
    missing = [
        (part, cells) for part, cells in rows if f"| {part} | {' | '.join(cells)} |" not in section
    ]
    assert [] == missing


@pytest.mark.usefixtures("bench_on_path")
def test_profile_breakdown_json_is_read_by_the_plot_script(tmp_path: Path) -> None:
    """profile_breakdown.py's --json figures load: each run's parts, in one order, scaled
    to the run's CPU per message."""
    import cProfile

    bench = _module("profile_breakdown")
    profile = tmp_path / "run.prof"
    cProfile.runctx("sum(range(10_000))", {}, {}, str(profile))
    figures = bench.results([("before", str(profile), 1.0), ("after", str(profile), 0.5)], 10)
    record = _written(tmp_path, "breakdown", figures)
    assert [1000.0, 500.0] == [
        round(sum(part["us"] for part in run["parts"]), 6) for run in record["runs"]
    ]
    assert record["runs"][0]["parts"][0]["part"] == record["runs"][1]["parts"][0]["part"]


@pytest.mark.usefixtures("bench_on_path")
def test_spread_takes_each_ratio_within_a_run_then_the_median_and_range_of_the_runs() -> None:
    """bench/spread.py's summary: per ratio, the median of the runs' values (the middle
    one, not their mean), the lowest, the highest and every run's value in order."""
    spread = _module("spread")
    runs = [{"a": 0.9, "b": 2.0}, {"a": 0.7, "b": 1.0}, {"a": 1.3, "b": 1.5}]
    assert {
        "a": {"median": 0.9, "low": 0.7, "high": 1.3, "runs": [0.9, 0.7, 1.3]},
        "b": {"median": 1.5, "low": 1.0, "high": 2.0, "runs": [2.0, 1.0, 1.5]},
    } == spread.summarise(runs)
    with pytest.raises(ValueError, match="run 2 gave ratios"):
        spread.summarise([{"a": 1.0}, {"b": 1.0}])
    with pytest.raises(ValueError, match="no run"):
        spread.summarise([])


@pytest.mark.usefixtures("bench_on_path")
def test_spread_reads_the_ratios_of_each_benchmarks_own_results() -> None:
    """The ratios bench/spread.py works out of a run are the ones docs/benchmarks.md
    quotes: the ledger over raw asyncpg (bulk against raw's faster chunking), the sender
    over aiogram (rate and CPU at each latency)."""
    spread = _module("spread")
    claims = json.loads((BENCH / "results" / "claims.json").read_text(encoding="utf-8"))
    rate = {case["label"]: case["rate"] for case in claims["cases"]}
    ratios = spread._claims(claims)
    assert rate["AsyncLedger.claim_slot, 16 workers"] / rate[
        "raw, 16 held connections"
    ] == pytest.approx(ratios["claim_slot, 16 workers / raw"])
    assert 0.83 == round(ratios["claim_many / raw unnest (the faster chunking)"], 2)
    telegram = json.loads((BENCH / "results" / "telegram.json").read_text(encoding="utf-8"))
    ratios = spread._telegram(telegram)
    assert 0.97 == round(ratios["msg/s / aiogram's, at 20 ms"], 2)
    assert 1.2 == round(ratios["CPU per message / aiogram's, at 20 ms"], 1)
    assert 4 == len(ratios)


@pytest.mark.usefixtures("bench_on_path")
def test_spread_turns_the_senders_order_so_each_side_goes_first_once() -> None:
    """bench/spread.py sender: the sides run in an order turned by one each run, and each
    side's CPU per message is divided by the bare aiohttp loop's of the same run."""
    spread = _module("spread")
    sides = len(spread.SENDER_SIDES)
    orders = [spread.sides_in_turn(spread.SENDER_SIDES, n) for n in range(1, sides + 1)]
    assert sorted(spread.SENDER_SIDES) == sorted(order[0] for order in orders)
    assert all(sorted(order) == sorted(spread.SENDER_SIDES) for order in orders)
    assert orders[0] == spread.sides_in_turn(spread.SENDER_SIDES, sides + 1)
    cpu = {
        "aiohttp": 100.0,
        "aiohttp-paced": 250.0,
        "aiogram": 150.0,
        "notifyonce-nolimit": 120.0,
        "notifyonce": 300.0,
    }
    # the paced sender over the unpaced floor, then over the floor paced alike
    assert [1.5, 1.2, 3.0, 2.5, 1.2] == list(spread._sender(cpu).values())


def test_the_spread_table_shows_each_spread_results_file() -> None:
    """Each median and range in the spread table of docs/benchmarks.md is the one its
    results file (bench/results/spread-*.json, written by bench/spread.py) holds."""
    table = _section("How far each ratio moves between runs")
    files = sorted((BENCH / "results").glob("spread-*.json"))
    assert 8 == len(files)
    for path in files:
        record = PLOTTER.load(path)
        assert record["benchmark"].endswith("-spread")
        for name, figures in record["ratios"].items():
            assert 5 == len(figures["runs"]), (path.name, name)
            shown = f"| {figures['median']:.2f}x | {figures['low']:.2f}-{figures['high']:.2f}x |"
            assert shown in table, (path.name, name, shown)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([], (0, 0.0)),
        ([5.0], (1, 0.0)),
        ([0.0, 0.5, 0.999, 1.0, 1.2, 1.9], (4, 0.5)),  # [0.5, 1.5): 0.5, 0.999, 1.0, 1.2
        ([0.0, 1.0, 2.0], (1, 0.0)),  # a window is half-open: 1.0 is not in [0, 1)
        ([3.0, 2.0, 2.5, 2.9], (3, 0.0)),  # unsorted in: [2.0, 3.0) holds 2.0, 2.5, 2.9
    ],
)
def test_the_pool_bench_counts_the_busiest_half_open_second(
    bench_on_path: None, times: list[float], expected: tuple[int, float]
) -> None:
    """bench_pool_bunching's busiest second: the most moments in any [t, t + 1), and where
    it begins, counted from the first moment."""
    bench = _module("bench_pool_bunching")
    count, at = bench.busiest(times)
    assert expected == (count, pytest.approx(at))
