"""The documentation: every public name documented, and the site (mkdocs.yml) built without a warning.

The rule for docstrings (a): every public name — attnflow's exports, the names the subpackages
``particles`` and ``solvers`` import in their ``__init__``, and the experiments' API listed in
EXPERIMENTS_API — has a docstring whose first line is a sentence; a function's docstring also names
every parameter without a default (by its name, or by its Greek letter: ``beta`` as β); every public
name appears in the API reference (docs/api/); every command of the command line and every argument
has help text. (b) builds the site with ``mkdocs build --strict`` and follows every internal link and
image of the built HTML.
"""

from __future__ import annotations

import argparse
import ast
import html
import html.parser
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import attnflow as af

ROOT = Path(af.__file__).resolve().parent
DOCS = ROOT / "docs"

# the experiments' side of the API (attnflow.experiments has no namespace of its own)
EXPERIMENTS_API = {
    "attnflow.experiments.config": [
        "Config",
        "load_config",
        "ConfigError",
        "Key",
        "KEYS",
        "validate",
        "parse_override",
        "parse_grid",
        "expand_grid",
        "to_toml",
        "describe_keys",
    ],
    "attnflow.experiments.registry": ["Experiment", "Check", "EXPERIMENTS", "register", "get"],
    "attnflow.experiments.builtin": ["resolve"],
    "attnflow.experiments.run.preflight": ["check"],
    "attnflow.experiments.run.runner": ["run", "RunResult"],
    "attnflow.experiments.sweep.schedule": ["run_sweep"],
    "attnflow.experiments.results.dataset": ["load"],
    "attnflow.experiments.commands.cli": ["build_parser", "main"],
}
GREEK = {
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "eps": "ε",
    "epsilon": "ε",
    "theta": "θ",
    "rho": "ρ",
    "sigma": "σ",
    "tau": "τ",
}
DATA = (dict, tuple, list, str, int, float, frozenset)


def _subpackage_names(sub: str) -> list[str]:
    """The names ``attnflow.<sub>/__init__.py`` imports: its public namespace."""
    tree = ast.parse((ROOT / sub / "__init__.py").read_text(encoding="utf-8"))
    names = [
        alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    ]
    return [name for name in names if not name.startswith("_")]


def public_names() -> list[tuple[str, str]]:
    names = [("attnflow", name) for name in af.__all__ if name != "__version__"]
    for sub in ("particles", "solvers"):
        module = importlib.import_module(f"attnflow.{sub}")
        names += [(f"attnflow.{sub}", name) for name in getattr(module, "__all__", _subpackage_names(sub))]
    names += [(module, name) for module, listed in EXPERIMENTS_API.items() for name in listed]
    return names


def _object(module: str, name: str):
    return getattr(importlib.import_module(module), name)


PUBLIC = public_names()


def _mentioned(parameter: str, doc: str) -> bool:
    if re.search(rf"(?<![A-Za-z0-9]){re.escape(parameter)}(?![A-Za-z0-9])", doc):
        return True
    return parameter in GREEK and GREEK[parameter] in doc


@pytest.mark.parametrize("module,name", PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_public_name_is_documented(module, name):
    obj = _object(module, name)
    if isinstance(obj, DATA):
        return  # constants: documented on their API page (test_every_public_name_is_in_the_api_reference)
    doc = inspect.getdoc(obj)
    assert doc, f"{module}.{name} has no docstring"
    first = doc.strip().split("\n\n")[0]
    assert len(first.split()) >= 3, f"{module}.{name}: the docstring's first paragraph is not a sentence: {first!r}"
    if inspect.isroutine(obj):
        required = [
            p.name
            for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.name not in ("self", "cls")
        ]
        missing = [p for p in required if not _mentioned(p, doc)]
        assert not missing, f"{module}.{name}: the docstring does not mention the parameter(s) {missing}"


def _api_identifiers() -> list[str]:
    text = "\n".join(page.read_text(encoding="utf-8") for page in sorted((DOCS / "api").glob("*.md")))
    return re.findall(r"^:::\s+(\S+)", text, re.M)


def _resolve(identifier: str):
    """The object ``a.b.c`` names, as mkdocstrings reads it: a submodule before an attribute of that name
    (``attnflow.particles.energy`` is the module particles/energy.py, not the function)."""
    first, *rest = identifier.split(".")
    obj, path = importlib.import_module(first), first
    for attribute in rest:
        path = f"{path}.{attribute}"
        submodule = inspect.ismodule(obj) and hasattr(obj, "__path__") and importlib.util.find_spec(path)
        obj = importlib.import_module(path) if submodule else getattr(obj, attribute)
    return obj


def test_every_public_name_is_in_the_api_reference():
    documented = {id(_resolve(identifier)) for identifier in _api_identifiers()}
    missing = [f"{module}.{name}" for module, name in PUBLIC if id(_object(module, name)) not in documented]
    assert not missing, f"public names missing from docs/api/*.md (add a '::: attnflow.…' line): {missing}"


def _subparsers(parser: argparse.ArgumentParser) -> tuple[argparse._SubParsersAction, dict[str, str]]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action, {choice.dest: choice.help for choice in action._choices_actions}


def test_every_command_and_argument_has_help():
    from attnflow.experiments.commands.cli import build_parser

    parser = build_parser()
    assert parser.description
    action, helps = _subparsers(parser)
    assert set(action.choices) == set(helps)
    for command, subparser in action.choices.items():
        assert helps[command] and len(helps[command].split()) >= 3, f"attnflow {command} has no help"
        for argument in subparser._actions:
            if isinstance(argument, argparse._HelpAction):
                continue
            assert argument.help, f"attnflow {command} {argument.option_strings or argument.dest}: no help text"


def test_cli_reference_is_generated_from_the_parser():
    pytest.importorskip("mkdocs", reason='the hook is a MkDocs hook (pip install -e ".[docs]")')
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import attnflow_docs
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    from attnflow.experiments.commands.cli import build_parser

    page = attnflow_docs.cli_markdown()
    action, _ = _subparsers(build_parser())
    for command, subparser in action.choices.items():
        assert f"## attnflow {command}" in page
        for argument in subparser._actions:
            for flag in argument.option_strings:
                assert flag in page, f"attnflow {command} {flag} is missing from the CLI reference"
    assert not (DOCS / "cli.md").exists(), "docs/cli.md is generated at build time; remove the copy"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if value and (
                (tag == "a" and key == "href")
                or (tag in ("img", "script", "source") and key == "src")
                or (tag == "link" and key == "href")
            ):
                self.links.append((tag, value))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``mkdocs build --strict`` writes it (about 10 s on 2 cores), built once for this module.
    Without docs/scripts/gallery.py's runs the gallery's pages are the hook's stubs; the tutorial notebook
    is rendered without executing it (``ATTNFLOW_DOCS_EXECUTE=false``: CI's build executes it)."""
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]")')
    site = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", ATTNFLOW_DOCS_EXECUTE="false")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return site


@pytest.mark.slow
def test_site_builds_strict_and_every_internal_link_resolves(site):
    """Every internal href and src of the built HTML names a file of the site."""
    broken = []
    for page in site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for tag, link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("#", "mailto:", "data:")):
                continue
            path = unquote(parts.path)
            target = (site / path.lstrip("/") if path.startswith("/") else page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: <{tag}> {link}")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken))[:50])


def _without_code(html_text: str) -> str:
    """``html_text`` without its code blocks and inline code, where a dollar sign is meant literally."""
    html_text = re.sub(r"<pre\b.*?</pre>", "", html_text, flags=re.S)
    return re.sub(r"<code\b.*?</code>", "", html_text, flags=re.S)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_model_page_is_typeset_math(site):
    """docs/model.md's formulas reach the browser as arithmatex's markup for MathJax, displayed (``\\[...\\]``
    in a div) and inline (``\\(...\\)`` in a span), and no ``$`` of the Markdown is left in the text."""
    page = (site / "model" / "index.html").read_text(encoding="utf-8")
    displayed = re.findall(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', page, flags=re.S)
    inline = re.findall(r'<span class="arithmatex">\\\((.*?)\\\)</span>', page, flags=re.S)
    assert len(displayed) >= 20 and len(inline) >= 200, (len(displayed), len(inline))
    # the equation of motion, §1.1
    assert any(r"\dot x_i" in d and "P_{x_i}" in d for d in displayed)
    assert sum("S^{d-1}" in formula for formula in inline) >= 5  # the sphere, as LaTeX
    text = _without_code(page)
    assert "$$" not in text
    assert not re.search(r"\$[^$<>]*\\[a-zA-Z]+[^$<>]*\$", text), "raw $...$ LaTeX left on the Model page"
    assert "mathjax" in page.lower()


def test_class_page_shows_the_constructor_and_its_parameters(site):
    """The API page of ``af.SA``: its constructor's signature, formatted (one parameter a line when long), and a
    parameter table with each parameter's type and default; a field's protocol (``kernel_logits``,
    ``uses_blocked``, ``jump_times``) is not on the user's page but on the page about writing a field."""
    page = (site / "api" / "fields" / "index.html").read_text(encoding="utf-8")
    start = page.index('id="attnflow.particles.SA"')
    end = page.index('id="attnflow.particles.USA"')
    sa = page[start:end]
    signature = re.search(r'<div class="doc-signature highlight">(.*?)</div>', sa, flags=re.S)
    assert signature, "no signature on SA's page"
    signature_text = html.unescape(re.sub(r"<[^>]+>", "", signature.group(1)))
    parameters = inspect.signature(af.SA).parameters
    assert len(parameters) >= 8
    # formatted by ruff: one parameter a line, each with its default as the constructor has it
    lines = [line.strip().rstrip(",") for line in signature_text.splitlines()]
    for name, parameter in parameters.items():
        default = repr(parameter.default).replace("'", '"')
        assert any(re.fullmatch(rf"{name}(: .+)? ?= ?{re.escape(default)}", line) for line in lines), (name, lines)
    table = re.search(r"<table>.*?</table>", sa, flags=re.S)
    assert table, "no parameter table on SA's page"
    rows = {}
    for row in re.findall(r"<tr\b.*?</tr>", table.group(0), flags=re.S):
        cells = [
            html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cell))).strip()
            for cell in re.findall(r"<td\b.*?</td>", row, flags=re.S)
        ]
        if cells:
            rows[cells[0]] = cells
    assert list(rows) == list(parameters), list(rows)
    for name, parameter in parameters.items():
        assert rows[name][-1] == repr(parameter.default), (name, rows[name])
        assert rows[name][2], f"{name} has no description"
    assert rows["mask"][1] == "str" and rows["positional"][1] == "str"
    for internal in ("kernel_logits", "uses_blocked", "jump_times"):
        assert f'id="attnflow.particles.SA.{internal}"' not in sa, internal
    new_field = (site / "howto" / "new-field" / "index.html").read_text(encoding="utf-8")
    assert all(name in new_field for name in ("kernel_logits", "uses_blocked", "jump_times"))


def _title(path: Path) -> str:
    if path.suffix == ".ipynb":
        import json

        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
    else:
        text = path.read_text(encoding="utf-8")
    return re.search(r"^# (.+)$", text, flags=re.M).group(1).strip()


def test_nav_labels_are_the_pages_titles():
    """Every page named in mkdocs.yml's nav with a label of its own is listed under its title (the home page's
    label is "Home"; the generated command line page's title is the hook's)."""
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!ENV", lambda loader, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    labelled = []

    def walk(items):
        for item in items:
            if isinstance(item, dict):
                for label, value in item.items():
                    if isinstance(value, list):
                        walk(value)
                    elif isinstance(value, str) and not value.endswith("/"):
                        labelled.append((label, value))

    walk(config["nav"])
    assert len(labelled) >= 10
    wrong = []
    for label, page in labelled:
        if page == "index.md":
            continue
        generated = {"cli.md": "Command line", "experiments.md": "Experiments"}  # made by docs/hooks at build time
        title = generated[page] if page in generated else _title(DOCS / page)
        if label != title:
            wrong.append(f"{page}: nav says {label!r}, the page {title!r}")
    assert not wrong, "\n".join(wrong)


def test_no_heading_holds_maths():
    """A heading is also a line of the table of contents, which MathJax does not typeset: its maths would stay raw
    TeX there (tests/test_site_offline.py reads the whole page), so headings spell it in plain text."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        if "gallery" in page.relative_to(DOCS).parts[:1]:
            continue  # generated
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fenced ^= line.startswith("```")
            if not fenced and line.startswith("#") and ("$" in line or "\\(" in line):
                found.append(f"{page.relative_to(DOCS)}:{number}: {line}")
    assert not found, "headings with maths:\n" + "\n".join(found)


def test_docstring_prose_sets_scripts_and_leaves_names_alone():
    """The API pages' docstrings are plain Unicode (docs/design.md §2.3): in their prose, a ``^`` and a braced or
    one-symbol ``_`` are set as super- and subscripts, a name such as ``n_modes`` and code spans stay as
    written."""
    pytest.importorskip("griffe", reason='the griffe extension runs under mkdocstrings (pip install -e ".[docs]")')
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import griffe_prose
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    md = griffe_prose.prose_to_markdown
    assert md("on (S^{d-1})^n from x0") == "on (S<sup>d−1</sup>)<sup>n</sup> from x0"
    assert (
        md("A_ij V x_j and e^{β⟨x_i, x_j⟩}")
        == "A<sub>ij</sub> V x<sub>j</sub> and e<sup>β⟨x<sub>i</sub>, x<sub>j</sub>⟩</sup>"
    )
    assert md("n_modes of `x_i^2`, t*(β)") == "n\\_modes of `x_i^2`, t\\*(β)"


def test_gallery_pages_are_titled_by_their_heading(site):
    """A gallery page opens with a "generated by" comment, then its heading, the experiment's name: the page's
    title, and so its label in the nav, is that heading (the hook moves the comment below it)."""
    from attnflow.experiments import builtin

    for name in builtin.EXPERIMENTS:
        page = (site / "gallery" / name / "index.html").read_text(encoding="utf-8")
        assert f"<title>{name} - attnflow</title>" in page, name
