"""The documentation site (docs/, Sphinx): built with warnings as errors (a public name without a
docstring is one: docs/_ext/kopf_docs.py), every internal link and asset of the built pages
present, and three pages opened in headless Chromium (Debian's package, with its chromedriver):
the landing page, the API reference and the benchmarks' page with its plot render with no console
error and no image missing."""

from __future__ import annotations

import functools
import html.parser
import http.server
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("docs") / "html"
    result = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
                             str(ROOT / "docs"), str(output)], capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stderr
    return output


def test_the_site_builds_with_every_page_in_it(site: Path) -> None:
    pages = {path.relative_to(site).as_posix() for path in site.rglob("*.html")}
    sources = {path.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
               for path in (ROOT / "docs").rglob("*.md")}
    assert sources <= pages, sources - pages
    api = (site / "reference" / "api.html").read_text()
    for name in ("kopf.on.create", "kopf.OperatorSettings", "kopf.testing.KopfRunner", "kopf.Labels",
                 "kopf.lifecycles.asap"):
        assert f'id="{name}"' in api, name
    # Each decorator parameter is described (kopf._structures.parameters), not only typed.
    assert "the key of its progress, results and retries in the object" in api
    # Options as typed: a copied `--lease` must work (no smart dashes).
    cli = (site / "reference" / "cli.html").read_text()
    assert "--lease" in cli and "\u2013lease" not in cli


class Links(html.parser.HTMLParser):
    """The links and assets of a page, and the ids it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        for attribute in ("href", "src"):
            if found.get(attribute) and tag in ("a", "link", "script", "img"):
                self.targets.append(str(found[attribute]))


@functools.cache
def parsed(path: Path) -> Links:
    links = Links()
    links.feed(path.read_text())
    return links


def test_every_internal_link_and_asset_is_there(site: Path) -> None:
    broken = []
    for page in sorted(site.rglob("*.html")):
        for target in parsed(page).targets:
            url = urllib.parse.urlsplit(target)
            if url.scheme or url.netloc or target.startswith("mailto:"):
                continue  # another site's: not checked (no network here)
            path = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path else page
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                broken.append(f"{page.relative_to(site)}: {target} (no such file)")
            elif url.fragment and path.suffix == ".html" and url.fragment not in parsed(path).ids:
                broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert broken == []


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("page, heading", [
    ("index.html", "kopf-rs"),
    ("reference/api.html", "Python API"),
    ("benchmarks.html", "Benchmarks"),
])
def test_a_page_renders_in_chromium(served: str, page: str, heading: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), "checks/run installs Debian's chromium and chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(f"{served}/{page}")
        assert driver.find_element("css selector", "h1").text.rstrip("¶ \n") == heading
        # The theme's stylesheet applied: its sidebar is laid out beside the content.
        sheets = driver.execute_script("return document.styleSheets.length")
        assert sheets >= 2, sheets
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])")
        assert all(loaded for _, loaded in images), images
        if page == "benchmarks.html":
            assert any("latest.png" in src for src, _ in images), images
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []
    finally:
        driver.quit()
