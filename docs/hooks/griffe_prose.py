"""Griffe extension for the API reference: attnflow's docstrings are plain prose, not Markdown.

mkdocstrings renders them with ``docstring_style: null`` (as Markdown). Two things of the prose style
would then read badly, and this extension rewrites them in the rendered copy only (the source is
untouched):

* aligned parameter lists, ``name    text`` with indented continuation lines (``simulate``,
  ``Solution``...), which Markdown would run together into one paragraph, become bullet lists
  (``- `name` — text``);
* a lone ``*`` (``t*(β)``, ``x*``) would open an emphasis; it is escaped outside code spans.

Loaded by mkdocs.yml (``extensions: [docs/hooks/griffe_prose.py]``), relative to the repository root.
"""

from __future__ import annotations

import re

import griffe

# an entry of an aligned list: a name (or "a, b"), then two spaces or the end of the line
_NAME = r"\*{0,2}[A-Za-z_][\w.\[\]-]*(?:=\S+)?(?:, ?\*{0,2}[A-Za-z_][\w-]*)*"
_ENTRY = re.compile(rf"^({_NAME}):?(?: {{2,}}(\S.*))?$")
_LONG_ENTRY = re.compile(rf"^({_NAME}):? (\S.*)$")
_CODE = re.compile(r"(``?)(?:(?!\1).)+?\1")


def _escape_stars(text: str) -> str:
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(re.sub(r"(?<!\\)\*", r"\\*", text[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(re.sub(r"(?<!\\)\*", r"\\*", text[last:]))
    return "".join(out)


def _as_list(lines: list[str]) -> list[str] | None:
    """The paragraph ``lines`` as a Markdown bullet list if it is an aligned list, else None."""
    columns = [m.start(2) for m in map(_ENTRY.match, lines) if m is not None and m.group(2) is not None]
    column = max(set(columns), key=columns.count) if columns else 0
    intro: list[str] = []
    entries: list[list[str]] = []
    aligned = False
    for line in lines:
        if line[:1].isspace():
            if not entries:
                return None
            entries[-1].append(line.strip())
            continue
        m = _ENTRY.match(line)
        if m is None and column:
            # a name that reaches the column, followed by one space
            m = _LONG_ENTRY.match(line)
            if m is not None and m.start(2) < column:
                m = None
        if m is None and not entries:
            intro.append(line)  # prose introducing the list ("... as follows:")
            continue
        if m is None:
            return None
        aligned |= m.group(2) is not None
        entries.append([m.group(1), m.group(2) or ""])
    if not aligned or len(entries) < 2 or intro and not intro[-1].rstrip().endswith(":"):
        return None
    out = [_escape_stars(line) for line in intro] + ([""] if intro else [])
    for name, *text in entries:
        body = " ".join(t for t in text if t)
        out.append(f"- `{name.strip('*')}` — {_escape_stars(body)}" if body else f"- `{name.strip('*')}`")
    return out


def prose_to_markdown(text: str) -> str:
    """Rewrite a prose docstring for Markdown: aligned lists as bullet lists, lone stars escaped."""
    lines = text.split("\n")
    out: list[str] = []
    fence = False
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("```"):
            fence = not fence
        if fence or not lines[i].strip():
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip() and not lines[j].strip().startswith("```"):
            j += 1
        block = lines[i:j]
        listed = _as_list(block)
        if listed is not None:
            if out and out[-1].strip():
                out.append("")
            out.extend(listed)
        elif block[0].startswith("    "):
            out.extend(block)  # an indented block: an equation, rendered as code
        else:
            out.extend(_escape_stars(line) for line in block)
        i = j
    return "\n".join(out)


class ProseDocstrings(griffe.Extension):
    """Rewrite every docstring griffe loads with :func:`prose_to_markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = prose_to_markdown(obj.docstring.value)
