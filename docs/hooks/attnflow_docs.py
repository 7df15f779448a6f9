"""MkDocs hook of attnflow's documentation site (loaded by mkdocs.yml's ``hooks:``).

What it adds to a plain MkDocs build, so that nothing in the site is copied by hand and drifts:

* **cli.md** is generated from the command line's parser, ``attnflow.experiments.commands.cli.build_parser()``:
  every subcommand's usage, help and arguments. There is no docs/cli.md in the repository.
* **experiments.md** is generated from the experiments' declarations: for each, the text of ``attnflow list NAME``
  (``experiments/commands/describe.py``). There is no docs/experiments.md in the repository.
* **Directory sections in the nav.** A nav entry that names a folder with a trailing slash
  (``- Gallery: gallery/``) becomes that folder's pages: ``index.md`` first, then the others by file
  name. Pages added to the folder appear without editing mkdocs.yml.
* **Includes.** A line ``<!-- include PATH -->`` (PATH relative to the repository root) is replaced by
  that file, its headings one level down and its relative links and images rewritten for the page
  (docs/performance.md includes benchmarks/README.md this way).
* **Links out of docs/.** The repository's Markdown links source files (``../particles/fields.py``,
  ``../README.md``) that are not part of the site. Such a link becomes a link to the file on the
  repository host when mkdocs.yml sets ``repo_url``, and its plain text otherwise; an image outside
  docs/ (``benchmarks/scaling.png``) is copied into the site under ``_repo/``. A link to a file that
  does not exist is left alone, so that ``mkdocs build --strict`` reports it.
* **The gallery without its runs.** ``docs/scripts/gallery.py`` runs every experiment's quick version and
  writes ``docs/gallery/``; until it has, the gallery's pages are served from ``gallery.stub_pages()``
  (each experiment's description, text and commands, with a note on how to build the figures), so
  ``mkdocs build`` and ``mkdocs serve`` work on a fresh clone.
* **Links out of notebooks.** The tutorial notebook links pages as Jupyter reads them (``model.md#...``);
  on the site those links point to the pages.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import posixpath
import re
import shutil
import sys
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

IMAGE_SUFFIXES = {".png", ".svg", ".gif", ".jpg", ".jpeg", ".webp"}
REPO_ASSETS = "_repo"
_INCLUDE = re.compile(r"^<!--\s*include\s+(\S+)\s*-->\s*$", re.M)
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(\s*)(```|~~~)", re.M)


def _package_on_path() -> None:
    """Let mkdocstrings (griffe) find the package's source as ``attnflow``.

    The repository root is the package (``package-dir = {"attnflow" = "."}``), installed editable from
    a folder that is not named attnflow, which griffe's static finder cannot follow; and run as
    ``mkdocs build``, the scripts directory comes first on sys.path, where griffe would take the
    console script ``bin/attnflow`` for the module. A temporary folder holding a link ``attnflow`` to
    the root goes first on sys.path (in ``on_config``, as MkDocs restores sys.path after loading a hook,
    and before mkdocstrings reads it)."""
    spec = importlib.util.find_spec("attnflow")
    if spec is None or spec.origin is None:
        return
    root = Path(spec.origin).resolve().parent
    if any((Path(p or ".") / "attnflow").resolve() == root for p in sys.path[:1]):
        return
    folder = Path(tempfile.mkdtemp(prefix="attnflow-docs-"))
    (folder / "attnflow").symlink_to(root, target_is_directory=True)
    atexit.register(shutil.rmtree, folder, True)
    sys.path.insert(0, str(folder))


# -- paths ------------------------------------------------------------------------------------------


def _roots(config) -> tuple[Path, Path]:
    docs = Path(config["docs_dir"]).resolve()
    return docs, Path(config["config_file_path"]).resolve().parent


def _outside_docs(target: str, base_dir: Path, docs: Path, repo: Path) -> Path | None:
    """The repository file a relative link target names, if it lies outside docs/ and exists."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = Path(os.path.normpath(base_dir / target.split("#", 1)[0]))
    if not path.exists() or path.is_dir() or docs in path.parents or repo not in path.parents:
        return None
    return path


def _outside_code(text: str, fn) -> str:
    """Apply ``fn`` to the parts of Markdown ``text`` outside fenced code blocks."""
    out, buf, in_code, fence = [], [], False, None
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if not in_code and m:
            out.append(fn("".join(buf)))
            buf, in_code, fence = [line], True, m.group(2)
            continue
        if in_code:
            buf.append(line)
            if m and m.group(2) == fence:
                out.append("".join(buf))
                buf, in_code = [], False
            continue
        buf.append(line)
    out.append("".join(buf) if in_code else fn("".join(buf)))
    return "".join(out)


def _rewrite_links(text: str, base_dir: Path, page_dir: Path, config) -> str:
    """Rewrite the relative links of ``text`` (written relative to ``base_dir``) for a page in
    ``page_dir``: into docs/ relative to the page, out of docs/ as described in the module docstring."""
    docs, repo = _roots(config)
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def one(m: re.Match) -> str:
        bang, label, target, title = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path_part, _, fragment = target.partition("#")
        fragment = f"#{fragment}" if fragment else ""
        outside = _outside_docs(target, base_dir, docs, repo)
        if outside is None:
            if base_dir == page_dir or not path_part:
                return m.group(0)
            absolute = Path(os.path.normpath(base_dir / path_part))
            new = posixpath.relpath(absolute.as_posix(), page_dir.as_posix()) + fragment
            return f"{bang}[{label}]({new}{title})"
        rel = outside.relative_to(repo).as_posix()
        if outside.suffix.lower() in IMAGE_SUFFIXES:
            new = posixpath.relpath((docs / REPO_ASSETS / rel).as_posix(), page_dir.as_posix())
            return f"{bang}[{label}]({new}{title})"
        if repo_url:
            return f"{bang}[{label}]({repo_url}/blob/{config.get('extra', {}).get('repo_branch', 'main')}/{rel}{fragment}{title})"
        return label

    return _outside_code(text, lambda part: _LINK.sub(one, part))


def _shift_headings(text: str) -> str:
    return _outside_code(text, lambda part: re.sub(r"^(#{1,5}) ", r"#\1 ", part, flags=re.M))


def _expand_includes(text: str, page_dir: Path, config) -> str:
    _, repo = _roots(config)

    def one(m: re.Match) -> str:
        path = repo / m.group(1)
        included = path.read_text(encoding="utf-8")
        return _shift_headings(_rewrite_links(included, path.parent, page_dir, config))

    return _INCLUDE.sub(one, text)


# -- the command line reference ---------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", r"\|").replace("\n", " ")


def _argument_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    return f"{names} {metavar if isinstance(metavar, str) else ' '.join(metavar)}"


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        help_text = formatter._expand_help(action) if action.help else ""
        if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
            help_text += f" (choices: {', '.join(f'`{c}`' for c in action.choices)})"
        default = action.default
        shown = "" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        rows.append(f"| `{_argument_name(action)}` | {_cell(help_text)} | {shown} |")
    if not rows:
        return []
    return ["| argument | what it does | default |", "|---|---|---|", *rows, ""]


def _usage(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_usage().strip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def cli_markdown() -> str:
    """The command line reference page, rendered from ``build_parser()``."""
    from attnflow.experiments.commands.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command line",
        "",
        "<!-- generated at build time from attnflow.experiments.commands.cli.build_parser() by "
        "docs/hooks/attnflow_docs.py; edit the parser, not this page -->",
        "",
        f"{parser.description}",
        "",
        f"```text\n{_usage(parser)}\n```",
        "",
        *_arguments_table(parser),
        "Every subcommand takes `-h`/`--help`. The [getting started](getting-started.md) page walks "
        "through a first run; the [how-to pages](howto/index.md) cover sweeps, clusters and GPUs.",
        "",
    ]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`attnflow {name}`](#attnflow-{name}) | {_cell(helps.get(name) or '')} |" for name in sub.choices]
    lines.append("")
    for name, subparser in sub.choices.items():
        lines += [f"## attnflow {name}", ""]
        text = subparser.description or helps.get(name) or ""
        if text:
            lines += [text[:1].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
        lines += [f"```text\n{_usage(subparser)}\n```", "", *_arguments_table(subparser)]
    return "\n".join(lines) + "\n"


def experiments_markdown() -> str:
    """The reference page of the experiments: for each, what ``attnflow list NAME`` prints (its description, size,
    measured time and every key it reads with its value and ``--quick`` value), from the same function."""
    from attnflow.experiments import builtin
    from attnflow.experiments.commands.describe import describe

    lines = [
        "# Experiments",
        "",
        "<!-- generated at build time from each experiment's declaration by docs/hooks/attnflow_docs.py "
        "(experiments/commands/describe.py, the text of `attnflow list NAME`); edit the experiment, not this page -->",
        "",
        "Every built-in experiment, as `attnflow list NAME` describes it: its papers, its size at full size and "
        "with `--quick` (members, the memory a run holds by the estimate the preflight checks), the full run's "
        "measured time, and every configuration key its run reads, with the value it sets and its `--quick` "
        "value. The [gallery](gallery/index.md) shows their figures and checks.",
        "",
        "| experiment | what it computes |",
        "|---|---|",
    ]
    experiments = [*builtin.EXPERIMENTS.values(), builtin.GENERIC]
    lines += [f"| [`{e.name}`](#{e.name}) | {_cell(e.description)} |" for e in experiments]
    lines.append("")
    for e in experiments:
        lines += [f"## {e.name}", "", f"```text\n{describe(e)}\n```", ""]
    return "\n".join(lines) + "\n"


# -- the nav ----------------------------------------------------------------------------------------


def _expand_nav(items, pages: list[str]):
    """Replace every ``folder/`` entry of the nav by the folder's pages (index.md first)."""
    if isinstance(items, list):
        out = []
        for item in items:
            expanded = _expand_nav(item, pages)
            out.extend(expanded if isinstance(item, str) and isinstance(expanded, list) else [expanded])
        return out
    if isinstance(items, dict):
        return {title: _expand_nav(value, pages) for title, value in items.items()}
    if isinstance(items, str) and items.endswith("/") and "://" not in items:
        inside = sorted(p for p in pages if p.startswith(items) and "/" not in p[len(items) :])
        index = [p for p in inside if p.endswith("/index.md")]
        return index + [p for p in inside if p not in index]
    return items


# -- the gallery -----------------------------------------------------------------------------------


def _gallery_stubs(config) -> dict[str, str]:
    """The gallery's pages without its runs (``docs/scripts/gallery.py``'s ``stub_pages``)."""
    docs, _ = _roots(config)
    spec = importlib.util.spec_from_file_location("attnflow_docs_gallery", docs / "scripts" / "gallery.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stub_pages()


# -- MkDocs events ----------------------------------------------------------------------------------


@event_priority(100)  # before mkdocstrings' on_config, which sets up the Python handler's search paths
def on_config(config, **kwargs):
    _package_on_path()
    return config


def on_files(files: Files, config, **kwargs) -> Files:
    docs, repo = _roots(config)
    if files.get_file_from_path("cli.md") is None:
        files.append(File.generated(config, "cli.md", content=cli_markdown()))
    if files.get_file_from_path("experiments.md") is None:
        files.append(File.generated(config, "experiments.md", content=experiments_markdown()))
    if files.get_file_from_path("gallery/index.md") is None:
        for name, text in _gallery_stubs(config).items():
            if files.get_file_from_path(f"gallery/{name}") is None:
                files.append(File.generated(config, f"gallery/{name}", content=text))
    # images outside docs/ that pages (or the files they include) show
    wanted: set[Path] = set()
    for file in files.documentation_pages():
        if file.abs_src_path is None:
            continue
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        sources = [(text, Path(file.abs_src_path).parent)]
        for m in _INCLUDE.finditer(text):
            path = repo / m.group(1)
            if path.is_file():
                sources.append((path.read_text(encoding="utf-8"), path.parent))
        for source, base in sources:
            for m in _LINK.finditer(source):
                outside = _outside_docs(m.group(3), base, docs, repo)
                if outside is not None and outside.suffix.lower() in IMAGE_SUFFIXES:
                    wanted.add(outside)
    for path in sorted(wanted):
        uri = f"{REPO_ASSETS}/{path.relative_to(repo).as_posix()}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    if config["nav"]:
        config["nav"] = _expand_nav(config["nav"], [f.src_uri for f in files.documentation_pages()])
    return files


_LEADING_COMMENT = re.compile(r"\A(\s*<!--.*?-->\s*\n)(# [^\n]+\n)", re.S)


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    docs, _ = _roots(config)
    page_dir = (docs / page.file.src_uri).parent
    # a page that opens with a comment (the gallery's "generated by" line) keeps its heading as its title:
    # MkDocs takes the title (and the nav's label) from a level-1 heading only when it comes first
    markdown = _LEADING_COMMENT.sub(lambda m: m.group(2) + m.group(1), markdown)
    markdown = _expand_includes(markdown, page_dir, config)
    return _rewrite_links(markdown, page_dir, page_dir, config)


_HREF = re.compile(r'(href=")([^"#:]+\.md)(#[^"]*)?(")')


def on_page_content(html: str, page, config, files, **kwargs) -> str:
    """A notebook page (mkdocs-jupyter renders it to HTML, past MkDocs' own link handling): its links to
    Markdown pages (``model.md#13-...``, as they work in Jupyter) become links to those pages on the site."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html

    def one(m: re.Match) -> str:
        src = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), m.group(2)))
        target = files.get_file_from_path(src)
        if target is None:  # left as written: the strict build's link check reports it
            return m.group(0)
        return f"{m.group(1)}{target.url_relative_to(page.file)}{m.group(3) or ''}{m.group(4)}"

    return _HREF.sub(one, html)
