"""MkDocs hook: attnflow's site works offline (loaded by mkdocs.yml's ``hooks:``).

Every asset a page needs ships with the built site; nothing is fetched from another host:

* **MathJax 3** is served from the site itself, under ``javascripts/mathjax/``: its files come from the
  Python package django-static-mathjax (the docs extra pins it; it ships MathJax's own ``es5`` build and
  nothing else), added to the build in ``on_files``. The site needs the combined component
  ``tex-chtml.js`` and what it loads on demand: the TeX extensions (``input/tex/``), the CHTML fonts
  (``output/chtml/``), the menu and accessibility modules (``ui/``, ``a11y/``, ``sre/``).
* **Fonts**: mkdocs.yml sets ``theme.font: false`` (system fonts), so Material links no font service.
* **The tutorial notebook's page** (mkdocs-jupyter, through nbconvert's lab template) would load MathJax 2
  from a CDN (an empty ``src`` when no URL is configured) and, for Mermaid diagrams, import Mermaid from a
  CDN: ``on_post_page`` removes both (the site's MathJax 3 typesets the notebook's Markdown, see
  docs/javascripts/mathjax.js; a notebook with a Mermaid diagram stops the build, as it cannot be drawn
  offline).
* **A guard**: a page whose ``script``, ``link``, ``img``, ``iframe``, ``source``, ``audio``, ``video``,
  ``embed`` or ``object`` names an asset on another host (``src``, ``href``, ``data``), or whose inline
  style imports one (``url(https://...)``, ``@import``), stops the build, naming the page and the address.
  Links (``<a href>``) are the reader's to follow and are left alone.

tests/test_site_offline.py opens pages of the built site in Chromium with the network cut off.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

MATHJAX_DEST = "javascripts/mathjax"
MATHJAX_DISTRIBUTION = "django-static-mathjax"
# the combined component the pages load, and the folders it loads from on demand
MATHJAX_PARTS = ("tex-chtml.js", "input/tex", "output/chtml", "ui", "a11y", "sre")

_ASSET = re.compile(
    r"<(script|link|img|iframe|source|audio|video|embed|object)\b([^>]*)>",
    re.I,
)
_ATTRIBUTE = re.compile(r"""\b(src|href|data|srcset)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
_REL = re.compile(r"""\brel\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
_STYLE_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])((?:https?:)?//[^'")\s]+)""", re.I)
_EXTERNAL = re.compile(r"^\s*(?:https?:)?//", re.I)
# a <link> that names a page rather than loading an asset
_NOT_FETCHED_RELS = {"canonical", "alternate", "author", "license", "me", "next", "prev", "help", "search"}

# nbconvert's MathJax 2 loader and configuration (templates/base/mathjax.html.j2)
_NB_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
# nbconvert's Mermaid loader (templates/lab/mermaidjs.html.j2): a module script importing Mermaid from a CDN
_NB_MERMAID = re.compile(
    r'<script type="module">(?:(?!</script>).)*?\.jp-Mermaid > pre\.mermaid(?:(?!</script>).)*?</script>',
    re.S,
)
_MERMAID_DIAGRAM = re.compile(r"""<div\b[^>]*\bclass\s*=\s*["'][^"']*\bjp-Mermaid\b""")


def mathjax_root() -> Path:
    """The folder of MathJax 3's ``es5`` build, as the docs extra installs it (django-static-mathjax)."""
    spec = importlib.util.find_spec("mathjax")
    hint = (
        f"MathJax's files for the offline site are missing: install the docs extra "
        f'(pip install -e ".[docs]"), which brings {MATHJAX_DISTRIBUTION}'
    )
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(hint)
    base = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    root = base / "es5"
    if not (root / MATHJAX_PARTS[0]).is_file():
        raise PluginError(f"{hint} (the package 'mathjax' at {base.parent} has no es5/{MATHJAX_PARTS[0]})")
    version = json.loads((base / "package.json").read_text(encoding="utf-8")).get("version", "")
    if not version.startswith("3."):
        raise PluginError(
            f"{hint}: found MathJax {version or '(no version)'}, the site's configuration is for MathJax 3"
        )
    return root


def mathjax_files(root: Path) -> list[Path]:
    """MathJax's files that the site serves, relative to ``root`` (the ``es5`` folder), in a fixed order."""
    found: list[Path] = []
    for part in MATHJAX_PARTS:
        path = root / part
        if path.is_file():
            found.append(Path(part))
        elif path.is_dir():
            found.extend(sorted(p.relative_to(root) for p in path.rglob("*") if p.is_file()))
        else:
            raise PluginError(f"MathJax's build at {root} lacks {part}: reinstall {MATHJAX_DISTRIBUTION}")
    return found


def external_assets(html: str) -> list[str]:
    """The addresses on other hosts that a page's HTML would fetch: the ``src``/``href``/``data``/``srcset`` of
    its asset tags (a ``<link>`` whose ``rel`` only names another page excepted) and its inline styles'
    ``url(...)`` and ``@import``. Links (``<a href>``) are not fetched and not listed."""
    found: list[str] = []
    for m in _ASSET.finditer(html):
        tag, attributes = m.group(1).lower(), m.group(2)
        if tag == "link":
            rel = _REL.search(attributes)
            rels = set((rel.group(1) or rel.group(2) or "").lower().split()) if rel else set()
            if rels and rels <= _NOT_FETCHED_RELS:
                continue
        for a in _ATTRIBUTE.finditer(attributes):
            value = a.group(2) if a.group(2) is not None else a.group(3)
            urls = [u.split()[0] for u in value.split(",") if u.strip()] if a.group(1).lower() == "srcset" else [value]
            found.extend(u for u in urls if _EXTERNAL.match(u))
    for style in re.findall(r"<style\b[^>]*>(.*?)</style>", html, flags=re.S | re.I):
        found.extend(_STYLE_URL.findall(style))
    return found


def offline_notebook(html: str, where: str) -> str:
    """A notebook page without nbconvert's CDN loaders: MathJax 2 (the site's MathJax 3 typesets the page)
    and Mermaid (only where the page has no Mermaid diagram; one that has stops the build)."""
    html = _NB_MATHJAX.sub("", html)
    if _MERMAID_DIAGRAM.search(html):
        raise PluginError(
            f"{where}: a Mermaid diagram in the notebook, which nbconvert draws with Mermaid from a CDN; the site "
            "must work offline: draw it as an image instead"
        )
    return _NB_MERMAID.sub("", html)


# -- MkDocs events ----------------------------------------------------------------------------------


def on_files(files: Files, config, **kwargs) -> Files:
    root = mathjax_root()
    for relative in mathjax_files(root):
        uri = f"{MATHJAX_DEST}/{relative.as_posix()}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(root / relative)))
    return files


def on_post_page(output: str, page, config, **kwargs) -> str:
    where = page.file.src_uri
    if where.endswith(".ipynb"):
        output = offline_notebook(output, where)
    external = external_assets(output)
    if external:
        shown = ", ".join(sorted(set(external))[:5])
        raise PluginError(
            f"{where}: the page fetches {len(set(external))} asset(s) from other hosts ({shown}); every asset "
            "of the site ships with it (docs/hooks/offline_assets.py)"
        )
    return output
