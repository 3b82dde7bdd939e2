"""The built docs site works without the internet: nothing in it loads from another host
(Mermaid is served from the site, the fonts are the reader's own), and the slot page's
state diagram is drawn in Chromium with every request outside the site refused.

The site is built once for the module with ``mkdocs build --strict`` into a temporary
directory and served on 127.0.0.1; mkdocs (``docs/requirements.txt``) and Chromium missing
skip locally and fail under CI=true, like the console's browser test."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ._browser import chromium
from ._optional import require

ROOT = Path(__file__).resolve().parent.parent

# What makes a browser fetch from another host: an absolute or protocol-relative URL in an
# element that loads it, a stylesheet's @import or url() (fonts among them).
_ELSEWHERE = r"""["']?(?:https?:)?//"""
_LOADS_ELSEWHERE = re.compile(
    rf"<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\b(?:src|srcset|poster)={_ELSEWHERE}"
    rf"|<link\b[^>]*\bhref={_ELSEWHERE}"
    rf"|@import\s+(?:url\()?{_ELSEWHERE}"
    rf"|\burl\(\s*{_ELSEWHERE}",
    re.IGNORECASE,
)


def loads_from_elsewhere(text: str) -> list[str]:
    """The places in an HTML page or a stylesheet that make a browser fetch from another
    host."""
    return [m.group(0) for m in _LOADS_ELSEWHERE.finditer(text)]


def test_the_finder_finds_each_way_of_loading_from_another_host() -> None:
    """A script, a stylesheet link, a preconnect, an image, an @import and a font's url()
    from another host are found; the site's own paths and plain links are not."""
    elsewhere = [
        '<script src="https://unpkg.com/mermaid@11/dist/mermaid.min.js"></script>',
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">',
        '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>',
        "<img alt='x' src='//example.com/x.png'>",
        '@import url("https://fonts.googleapis.com/css2?family=Inter");',
        "@font-face{font-family:X;src:url(https://fonts.gstatic.com/x.woff2)}",
    ]
    assert len(elsewhere) == len(loads_from_elsewhere("\n".join(elsewhere)))
    own = [
        '<script src="../assets/js/mermaid.min.js"></script>',
        '<link rel="stylesheet" href="assets/css/fonts.css">',
        '<a href="https://github.com/notifyonce/notifyonce">source</a>',
        "@font-face{src:url(../fonts/x.woff2)}",
        "background: url(data:image/svg+xml;base64,AAAA)",
    ]
    assert [] == loads_from_elsewhere("\n".join(own))


def test_the_vendored_mermaid_is_the_version_mkdocs_yml_names() -> None:
    """docs/assets/js/mermaid.min.js is the Mermaid 11 that mkdocs.yml says it is (the
    major version Material drives), with its licence beside it."""
    named = re.search(r"npm package mermaid@(\d+\.\d+\.\d+)", (ROOT / "mkdocs.yml").read_text())
    assert named is not None, "mkdocs.yml names the vendored Mermaid's version"
    script = (ROOT / "docs" / "assets" / "js" / "mermaid.min.js").read_text(encoding="utf-8")
    assert [named.group(1)] == sorted(set(re.findall(r'=\{version:"(\d+\.\d+\.\d+)"\}', script)))
    assert named.group(1).startswith("11.")
    licence = (ROOT / "docs" / "assets" / "js" / "mermaid.LICENSE").read_text()
    assert licence.startswith("The MIT License")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built with ``mkdocs build --strict`` into a temporary directory."""
    for module in ("mkdocs", "material", "mkdocstrings"):
        require(module, "dev")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == built.returncode, built.stderr[-4000:]
    return out


def test_the_built_site_loads_nothing_from_another_host(site: Path) -> None:
    """No page or stylesheet of the site loads a script, stylesheet, font or picture from
    another host (Material's Google fonts and unpkg's Mermaid among them)."""
    found = {
        str(path.relative_to(site)): hits
        for path in sorted(site.rglob("*"))
        if path.suffix in (".html", ".css")
        and (hits := loads_from_elsewhere(path.read_text(encoding="utf-8")))
    }
    assert {} == found
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20, "the site was built where this test looks for it"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Requests are not printed."""


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a free port); its base URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# Material draws each diagram into a closed shadow root, out of a test's reach; opened, the
# drawn <svg> can be found (nothing else on the page changes).
_OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attach.call(this, { ...init, mode: "open" });
};
"""


# The pages with a diagram, and words each drawn diagram shows.
DIAGRAMS = {
    "concepts/slots": ("claimed", "sent", "unknown", "failed", "released", "mark_sent"),
    "concepts/delivery": ("intake", "a worker", "writer", "ledger", "sender", "SIGKILL"),
}


@pytest.mark.parametrize(("page_path", "words"), DIAGRAMS.items(), ids=list(DIAGRAMS))
def test_the_diagrams_are_drawn_with_no_other_host_reachable(
    served: str, page_path: str, words: tuple[str, ...]
) -> None:
    """With every request outside the site refused, the slot page's state diagram and the
    pipeline's sequence diagram are drawn as SVGs with their states, moves and actors in
    them, and the page asked no other host for anything."""
    site_host = urlsplit(served).netloc
    refused: list[str] = []

    def only_the_site(route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if urlsplit(url).netloc == site_host:
            route.continue_()  # type: ignore[attr-defined]
        else:
            refused.append(url)
            route.abort()  # type: ignore[attr-defined]

    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", only_the_site)
        context.add_init_script(_OPEN_SHADOW_ROOTS)
        page = context.new_page()
        page.goto(f"{served}/{page_path}/", wait_until="load")
        drawn = page.locator("div.mermaid svg").first
        drawn.wait_for(state="visible", timeout=30_000)
        shown = drawn.evaluate("svg => svg.textContent")
        box = drawn.bounding_box()
        page.wait_for_load_state("networkidle", timeout=30_000)
        context.close()
    for name in words:
        assert name in shown, f"{name!r} is not in the drawn diagram: {shown[:300]!r}"
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 200
    assert [] == refused


def _requirements(lines: list[str]) -> set[str]:
    """Requirement lines, each spelt one way."""
    from packaging.requirements import Requirement

    return {str(Requirement(line)) for line in lines}


def test_the_dev_extra_installs_what_the_docs_need() -> None:
    """docs/requirements.txt is what the docs site needs; the dev extra (whose tests build
    the site) asks for the same, so the two never drift apart."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib

    listed = (ROOT / "docs" / "requirements.txt").read_text().splitlines()
    docs = _requirements([r for line in listed if (r := line.split("#")[0].strip())])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = _requirements(pyproject["project"]["optional-dependencies"]["dev"])
    assert {"mkdocs-material<10,>=9.5", "mkdocstrings[python]>=0.25"} <= docs
    assert set() == docs - dev


def test_make_docs_installs_the_docs_requirements_only() -> None:
    """``make docs`` on a fresh clone installs docs/requirements.txt, not the dev extra
    (Celery, Playwright, aiogram... are not the site's), then builds the site strictly."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    planned = subprocess.run(
        ["make", "--always-make", "--dry-run", "docs", "VENV=.venv-that-is-not-there"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    installs = [line for line in planned.splitlines() if "pip install" in line]
    assert [] == [line for line in installs if "[" in line or " -e " in line]
    assert any("-r docs/requirements.txt" in line for line in installs), planned
    assert "mkdocs build --strict" in planned
