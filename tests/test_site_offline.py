"""The documentation site offline: its pages, opened in headless Chromium with every request to another host cut
off, typeset all of their maths and fetch nothing from outside the site.

The site is the one CI built (the folder named by ``ATTNFLOW_SITE_DIR``, with the tutorial notebook executed), or
else one built here with ``mkdocs build --strict`` (the notebook unexecuted). A local HTTP server on 127.0.0.1
serves it; Playwright drives Debian's Chromium (``/usr/bin/chromium``, or ``ATTNFLOW_CHROMIUM``) with a new empty
profile, and its request interception lets through the requests to that server only, recording and aborting
every other. Without MkDocs, Playwright or Chromium the tests skip, except where ``ATTNFLOW_SITE_DIR`` is set
(CI), where a missing browser fails them. The browser's tests are in the slow tier (a build and about a minute
in Chromium on 2 cores); the test of the build's own guard is not.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import attnflow as af

ROOT = Path(af.__file__).resolve().parent
SITE_ENV = "ATTNFLOW_SITE_DIR"
CHROMIUM = os.environ.get("ATTNFLOW_CHROMIUM", "/usr/bin/chromium")
# the flags that keep Chromium's own background traffic (updates, sync, safe browsing) off the network
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 180_000  # the Model page's 770 formulas take MathJax a few seconds, more on a loaded machine

# the text of the page as a reader sees it, outside code, scripts and MathJax's own output: the text nodes that
# still hold LaTeX; the page's arithmatex elements, those typeset, the formulas set in them, the formulas set
# inside another (MathJax typesetting its own output a second time); MathJax's error boxes and its version
_INSPECT = r"""
() => {
  const skip = new Set(["PRE", "CODE", "KBD", "SAMP", "SCRIPT", "STYLE", "TEXTAREA", "NOSCRIPT", "MJX-CONTAINER"]);
  const tex = /\\\[|\\\(|\$\$|\\frac|\\begin\{/;
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let e = node.parentElement; e; e = e.parentElement) {
        if (skip.has(e.tagName)) return NodeFilter.FILTER_REJECT;
      }
      return NodeFilter.FILTER_ACCEPT;
    },
  });
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (tex.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 120));
  }
  const arithmatex = [...document.querySelectorAll(".arithmatex")];
  const markdown = [...document.querySelectorAll(".jp-RenderedMarkdown mjx-container")];
  return {
    raw: raw,
    arithmatex: arithmatex.length,
    typeset: arithmatex.filter((e) => e.querySelector("mjx-container")).length,
    containers: document.querySelectorAll(".arithmatex mjx-container").length,
    nested: document.querySelectorAll("mjx-container mjx-container").length,
    notebook_typeset: markdown.length,
    errors: [...document.querySelectorAll("mjx-merror")].map((e) => e.textContent.slice(0, 80)),
    version: window.MathJax && window.MathJax.version ? window.MathJax.version : null,
  };
}
"""
_TYPESET = """
async () => {
  if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) return false;
  await MathJax.startup.promise;
  return true;
}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site: ``ATTNFLOW_SITE_DIR`` (CI's build), else ``mkdocs build --strict`` here."""
    if os.environ.get(SITE_ENV):
        path = Path(os.environ[SITE_ENV]).resolve()
        assert (path / "index.html").is_file(), f"{SITE_ENV}={path} is not a built site (no index.html)"
        return path
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]"), and ATTNFLOW_SITE_DIR names no built site')
    path = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", ATTNFLOW_DOCS_EXECUTE="false")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def origin(site):
    """The address of a local HTTP server (127.0.0.1, a free port) serving the site."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory, origin):
    """Chromium with a new empty profile, whose every request outside ``origin`` is recorded and aborted."""
    required = bool(os.environ.get(SITE_ENV))
    missing = None
    if importlib.util.find_spec("playwright") is None:
        missing = 'Playwright is not installed (pip install -e ".[docs]")'
    elif not Path(CHROMIUM).is_file():
        missing = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium, or set ATTNFLOW_CHROMIUM)"
    if missing:
        if required:
            pytest.fail(f"{missing}: {SITE_ENV} is set, so the offline check must run")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            service_workers="block",
        )
        context.set_default_timeout(TIMEOUT_MS)
        record = {"outside": [], "failed": [], "local": []}

        def route(request_route):
            url = request_route.request.url
            if url.startswith(origin + "/"):
                request_route.continue_()
            else:
                record["outside"].append(url)
                request_route.abort()

        def response(resp):
            if resp.url.startswith(origin + "/"):
                record["local"].append(resp.url)
                if resp.status >= 400:
                    record["failed"].append(f"{resp.status} {resp.url}")

        def request(req):
            if not req.url.startswith((origin + "/", "data:", "blob:")) and req.url not in record["outside"]:
                record["outside"].append(req.url)

        context.route("**/*", route)
        context.on("request", request)
        context.on("response", response)
        try:
            yield context, record
        finally:
            context.close()


def _open(browser, origin, page_path: str) -> dict:
    """Open ``page_path`` of the site, wait for MathJax's first typesetting, and inspect the page; the requests
    made meanwhile are in the result's ``outside`` (to other hosts), ``failed`` and ``local``."""
    context, record = browser
    for values in record.values():
        values.clear()
    page = context.new_page()
    websockets: list[str] = []
    page.on("websocket", lambda ws: websockets.append(ws.url))
    try:
        page.goto(f"{origin}/{page_path}", wait_until="load")
        typeset = page.evaluate(_TYPESET)
        page.wait_for_load_state("networkidle")
        found = page.evaluate(_INSPECT)
    finally:
        page.close()
    found.update(
        loaded=typeset,
        outside=list(record["outside"]) + websockets,
        failed=list(record["failed"]),
        local=list(record["local"]),
    )
    return found


def _assert_offline(found: dict, page_path: str) -> None:
    assert found["loaded"], f"{page_path}: MathJax did not load from the site"
    assert found["version"] and found["version"].startswith("3."), found["version"]
    assert not found["outside"], f"{page_path} asked other hosts: {found['outside'][:10]}"
    assert not found["failed"], f"{page_path}: files missing from the site: {found['failed'][:10]}"
    assert not found["raw"], f"{page_path}: LaTeX left as text: {found['raw'][:10]}"
    assert not found["errors"], f"{page_path}: MathJax could not typeset: {found['errors'][:10]}"
    assert found["nested"] == 0, f"{page_path}: {found['nested']} formulas typeset twice"


def _arithmatex_in_html(site: Path, page_path: str) -> int:
    html = (site / page_path).read_text(encoding="utf-8")
    return len(re.findall(r'<(?:span|div) class="arithmatex">', html))


def _notebook_formulas() -> int:
    """The formulas of the tutorial notebook's Markdown cells: ``$$...$$`` and ``$...$`` outside code."""
    notebook = json.loads((ROOT / "docs" / "tutorial.ipynb").read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    displayed = re.findall(r"\$\$.+?\$\$", text, flags=re.S)
    inline = re.findall(r"\$[^$\n]+?\$", re.sub(r"\$\$.+?\$\$", "", text, flags=re.S))
    return len(displayed) + len(inline)


@pytest.mark.slow
def test_model_page_typesets_every_formula_offline(site, origin, browser):
    """The Model page: each of its arithmatex formulas (770 in the HTML) is typeset by the MathJax the site
    serves, with its own fonts; no LaTeX is left as text and no request leaves the machine."""
    found = _open(browser, origin, "model/")
    _assert_offline(found, "model/")
    expected = _arithmatex_in_html(site, "model/index.html")
    assert expected >= 700, expected
    assert found["arithmatex"] == expected
    assert found["typeset"] == expected, f"{expected - found['typeset']} of {expected} formulas not typeset"
    assert found["containers"] == expected  # one typeset formula each
    fonts = [url for url in found["local"] if "/javascripts/mathjax/output/chtml/fonts/" in url]
    assert fonts, "MathJax's fonts were not loaded from the site"


@pytest.mark.slow
def test_tutorial_page_typesets_the_notebook_offline(site, origin, browser):
    """The tutorial notebook's page: every formula of its Markdown cells (19) is typeset, nbconvert's CDN
    loaders (MathJax 2, Mermaid, require.js) are gone and no request leaves the machine."""
    html = (site / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert "cdnjs" not in html and "Load mathjax" not in html
    found = _open(browser, origin, "tutorial/")
    _assert_offline(found, "tutorial/")
    expected = _notebook_formulas()
    assert expected >= 10, expected
    assert found["notebook_typeset"] == expected, (found["notebook_typeset"], expected)


@pytest.mark.slow
def test_api_page_offline(site, origin, browser):
    """An API reference page (the fields): no LaTeX left as text, no request outside the site."""
    found = _open(browser, origin, "api/fields/")
    _assert_offline(found, "api/fields/")
    assert any(url.endswith("/javascripts/mathjax/tex-chtml.js") for url in found["local"])


def test_the_build_refuses_a_page_that_fetches_from_another_host():
    """The hook's guard: a script, stylesheet, image or inline style on another host is listed (and stops the
    build); links, and a <link> that only names a page, are not."""
    spec = importlib.util.spec_from_file_location("offline_assets", ROOT / "docs" / "hooks" / "offline_assets.py")
    if spec is None or spec.loader is None or importlib.util.find_spec("mkdocs") is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]")')
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (
        '<link rel="stylesheet" href="https://fonts.example.org/css?family=Roboto">'
        '<link rel="canonical" href="https://attnflow.example.org/model/">'
        '<script src="//cdn.example.org/mathjax.js"></script><script src="../javascripts/mathjax.js"></script>'
        "<img src='https://img.example.org/a.png'><a href=\"https://example.org/\">a link</a>"
        '<style>@font-face { src: url("https://fonts.example.org/r.woff2") }</style>'
    )
    assert sorted(hook.external_assets(page)) == [
        "//cdn.example.org/mathjax.js",
        "https://fonts.example.org/css?family=Roboto",
        "https://fonts.example.org/r.woff2",
        "https://img.example.org/a.png",
    ]
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="fetches 4 asset"):
        hook.on_post_page(page, type("P", (), {"file": type("F", (), {"src_uri": "model.md"})()})(), {})
