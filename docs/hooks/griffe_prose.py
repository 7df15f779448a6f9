"""Griffe extension for the API reference: attnflow's docstrings are plain prose, not Markdown.

mkdocstrings renders them with ``docstring_style: null`` (as Markdown). What of the prose style would
read badly is rewritten in the rendered copy only (the source is untouched):

* **Parameters.** An aligned list, ``name    text`` with indented continuation lines, whose names are all
  parameters of the function (of the constructor, for a class) becomes the parameter table, in the place
  the list had: name, type and default from the signature (a class's constructor takes the type of the
  field it sets where its own parameter has none), description from the list. Every class gets that table
  for its constructor's parameters, described or not, and a constructor signature: equinox modules and
  named tuples without an ``__init__`` of their own get the one their fields make.
* **Other aligned lists** (``Solution``'s fields, a field's options) become bullet lists
  (``- `name` — text``), which Markdown would otherwise run together into one paragraph.
* **Formula lines.** An indented block (``ẋ_i = P_{x_i}( Σ_j A_ij V x_j )``) is typeset as a displayed
  formula: its columns (separated by three or more spaces) aligned in a table, ``_ij``, ``_{...}``,
  ``^{...}`` and ``^h`` as sub- and superscripts, in a block that scrolls sideways rather than being cut.
* In prose, ``*``, ``_`` and ``[`` (``t*(β)``, ``r_i = ‖x_i‖``, ``X[ρ](θ)``) would open an emphasis or a
  link; they are escaped outside code spans, so the text reads as written.

Loaded by mkdocs.yml (``extensions: [docs/hooks/griffe_prose.py]``), relative to the repository root.
"""

from __future__ import annotations

import html
import re

import griffe

# an entry of an aligned list: a name (or "a, b"), then two spaces or the end of the line
_NAME = r"\*{0,2}[A-Za-z_][\w.\[\]-]*(?:=\S+)?(?:, ?\*{0,2}[A-Za-z_][\w-]*)*"
_ENTRY = re.compile(rf"^({_NAME}):?(?: {{2,}}(\S.*))?$")
_LONG_ENTRY = re.compile(rf"^({_NAME}):? (\S.*)$")
_CODE = re.compile(r"(``?)(?:(?!\1).)+?\1")
# a subscript or superscript without braces: a run of letters, digits, primes and stars (A_ij, x_j*, e^β)
_SCRIPT_RUN = r"[^\W_⁰¹²³⁴⁵⁶⁷⁸⁹]+[*′]*|\*"
_COLUMNS = re.compile(r" {3,}")
_MARKUP = re.compile(r"(?<!\\)[*_\[]")
_SELF = {"self", "cls"}


def _escape_prose(text: str) -> str:
    """Escape what Markdown would read as markup in plain prose, outside code spans: ``*`` and ``_``
    (emphasis: ``t*(β)``, ``r_i = ‖x_i‖``) and ``[`` (a link: ``X[ρ](θ)``); and set the formulas' scripts
    in it (``_prose_scripts``)."""
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(_prose_scripts(text[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_prose_scripts(text[last:]))
    return "".join(out)


_SHORT_SUB = re.compile(r"(?<![\w.])([^\W\d_])_([^\W_]{1,3})(?!\w)")


def _prose_scripts(text: str) -> str:
    """Plain prose with its formulas' scripts as <sub>/<sup>: ``^`` always (``e^{βt}``, ``x^2``), ``_`` with a
    brace group (``S_{n ≤ 20}``) or after a one-letter symbol with at most three characters (``x_i``,
    ``A_ij``: not ``n_modes``, a name); every other ``*``, ``_`` and ``[`` escaped."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c in "_^" and i > 0 and i + 1 < len(text) and not text[i - 1].isspace():
            tag = "sub" if c == "_" else "sup"
            if text[i + 1] == "{" and (end := _group(text, i + 1)) > 0:
                out.append(f"<{tag}>{_prose_scripts(text[i + 2 : end - 1]).replace('-', '−')}</{tag}>")
                i = end
                continue
            m = re.compile(_SCRIPT_RUN).match(text, i + 1) if c == "^" else _SHORT_SUB.match(text, i - 1)
            if m is not None:
                script = _MARKUP.sub(r"\\\g<0>", m.group(0) if c == "^" else m.group(2))
                out.append(f"<{tag}>{script}</{tag}>")
                i = m.end()
                continue
        out.append(_MARKUP.sub(r"\\\g<0>", c))
        i += 1
    return "".join(out)


# -- aligned lists ----------------------------------------------------------------------------------


def _aligned(lines: list[str]) -> tuple[list[str], list[tuple[str, str]]] | None:
    """The paragraph ``lines`` as (intro lines, [(name, text)]) if it is an aligned list, else None."""
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
    return intro, [(name.strip("*"), " ".join(t for t in text if t)) for name, *text in entries]


def _bullets(intro: list[str], entries: list[tuple[str, str]]) -> list[str]:
    out = [_escape_prose(line) for line in intro] + ([""] if intro else [])
    for name, body in entries:
        out.append(f"- `{name}` — {_escape_prose(body)}" if body else f"- `{name}`")
    return out


def _names(entry: str) -> list[str]:
    """The parameter names an entry describes: ``a, b`` describes both; ``name=VALUE`` names ``name``."""
    return [part.strip().strip("*").split("=", 1)[0] for part in entry.split(",")]


# -- formula lines ----------------------------------------------------------------------------------


def _group(text: str, start: int) -> int:
    """The index just past the brace group that opens at ``text[start]``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return -1


def formula_html(text: str) -> str:
    """One formula of plain Unicode maths as HTML: ``_``/``^`` scripts as <sub>/<sup>, the rest escaped."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c in "_^" and i > 0 and i + 1 < len(text) and not text[i - 1].isspace():
            tag = "sub" if c == "_" else "sup"
            if text[i + 1] == "{" and (end := _group(text, i + 1)) > 0:
                out.append(f"<{tag}>{formula_html(text[i + 2 : end - 1])}</{tag}>")
                i = end
                continue
            m = re.compile(_SCRIPT_RUN).match(text, i + 1)
            if m is not None:
                out.append(f"<{tag}>{html.escape(m.group(0))}</{tag}>")
                i = m.end()
                continue
        out.append(html.escape(c))
        i += 1
    return "".join(out)


def _formula(block: list[str]) -> list[str]:
    """An indented block of formula lines as one HTML block: a row per line, a cell per column."""
    rows = []
    for line in block:
        cells = "".join(f"<td>{formula_html(cell)}</td>" for cell in _COLUMNS.split(line.strip()))
        rows.append(f"<tr>{cells}</tr>")
    return ['<div class="af-formula"><table class="af-formula-lines">' + "".join(rows) + "</table></div>"]


# -- a docstring into sections ----------------------------------------------------------------------


def prose_sections(text: str, parameters: frozenset[str] = frozenset()) -> list[tuple[str, object]]:
    """Rewrite a prose docstring for Markdown, as ("text", markdown) and ("parameters", [(name, text)])
    parts: an aligned list whose names are all in ``parameters`` is a "parameters" part."""
    lines = text.split("\n")
    parts: list[tuple[str, object]] = []
    out: list[str] = []

    def flush() -> None:
        if "".join(out).strip():
            parts.append(("text", "\n".join(out).strip("\n")))
        out.clear()

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
        listed = _aligned(block)
        if listed is not None:
            intro, entries = listed
            names = [n for entry, _ in entries for n in _names(entry)]
            if parameters and not intro and set(names) <= parameters:
                flush()
                parts.append(("parameters", [(n, body) for entry, body in entries for n in _names(entry)]))
            else:
                if out and out[-1].strip():
                    out.append("")
                out.extend(_bullets(intro, entries))
        elif block[0].startswith("    "):
            out.extend(_formula(block))
        else:
            out.extend(_escape_prose(line) for line in block)
        i = j
    flush()
    return parts


def prose_to_markdown(text: str) -> str:
    """Rewrite a prose docstring for Markdown: aligned lists as bullet lists, formula lines as formulas,
    lone stars escaped."""
    return "\n\n".join(str(value) for kind, value in prose_sections(text) if kind == "text")


# -- signatures and parameter tables ----------------------------------------------------------------


def _field_default(value) -> str | None:
    """The default of a dataclass-style field from its assigned value: ``x = 1`` or
    ``x = eqx.field(..., default=1)``; None where the field has none (required)."""
    if value is None:
        return None
    text = str(value)
    if re.match(r"^(eqx\.|equinox\.|dataclasses\.)?field\(", text):
        m = re.search(r"\bdefault=(.+?)(?:,\s*\w+=|\)$)", text)
        if m is not None:
            return m.group(1)
        return "..." if "default_factory=" in text else None
    return text


def _fields_init(cls: griffe.Class) -> griffe.Function:
    """The ``__init__`` an equinox module or a named tuple gets from its annotated fields."""
    fields: dict[str, griffe.Attribute] = {}
    for klass in [*reversed(cls.mro()), cls]:
        for name, member in klass.members.items():
            # a field: an annotated instance attribute (griffe labels a ClassVar "class-attribute" alone)
            if member.is_alias or not member.is_attribute or "instance-attribute" not in member.labels:
                continue
            if "property" in member.labels or "init=False" in str(member.value or ""):
                continue
            fields[name] = member
    parameters = [
        griffe.Parameter(
            name,
            annotation=field.annotation,
            kind=griffe.ParameterKind.positional_or_keyword,
            default=_field_default(field.value),
        )
        for name, field in fields.items()
        if not name.startswith("_")
    ]
    return griffe.Function("__init__", parameters=griffe.Parameters(*parameters), returns=None)


def _constructs_from_fields(cls: griffe.Class) -> bool:
    bases = {str(b) for klass in [cls, *cls.mro()] for b in klass.bases}
    return any(b.endswith(("Module", "NamedTuple")) for b in bases)


def _field_annotation(cls: griffe.Class, name: str):
    member = cls.all_members.get(name)
    return member.annotation if member is not None and member.is_attribute else None


class ProseDocstrings(griffe.Extension):
    """Rewrite every docstring of the package as described in the module docstring."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        objects = list(_walk(pkg))
        # constructors first, before any class's members change
        for cls in [o for o in objects if o.is_class]:
            try:
                if "__init__" not in cls.all_members and _constructs_from_fields(cls):
                    cls.set_member("__init__", _fields_init(cls))
            except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue  # bases outside the package that cannot be resolved: leave the class as it is
        raw = {o.path: o.docstring.value for o in objects if o.docstring is not None}
        for obj in objects:
            if obj.docstring is not None:
                _rewrite(obj, raw)


def _walk(obj):
    for member in obj.members.values():
        if member.is_alias:
            continue
        yield member
        if member.is_module or member.is_class:
            yield from _walk(member)


def _signature(obj) -> tuple[list[griffe.Parameter], griffe.Class | None, list[str]]:
    """The parameters a user passes (self left out), for a class the class, and the paths of the objects
    whose docstrings may describe them besides ``obj``'s own (an inherited constructor's class)."""
    if obj.is_class:
        try:
            init = obj.all_members.get("__init__")
        except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            init = obj.members.get("__init__")
        if init is None or not init.is_function:
            return [], obj, []
        defined = init.final_target if init.is_alias else init
        owner = defined.parent.path if defined.parent is not None and defined.parent.path != obj.path else None
        more = [f"{obj.path}.__init__"] + ([owner, f"{owner}.__init__"] if owner else [])
        # a constructor restated for type checkers (``if TYPE_CHECKING: def __init__(...): ...``) is described
        # where it is written: in the base classes' docstrings
        try:
            bases = [base.path for base in obj.mro()]
        except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            bases = []
        more += [path for base in bases for path in (base, f"{base}.__init__") if path not in more]
        return [p for p in init.parameters if p.name not in _SELF], obj, more
    if obj.is_function:
        return [p for p in obj.parameters if p.name not in _SELF], None, []
    return [], None, []


def _described(text: str, names: frozenset[str]) -> dict[str, str]:
    return {n: d for kind, value in prose_sections(text, names) if kind == "parameters" for n, d in value}


def _rewrite(obj, raw: dict[str, str]) -> None:
    params, cls, more = _signature(obj)
    names = frozenset(p.name for p in params)
    parts = prose_sections(obj.docstring.value, names)
    described: dict[str, str] = {}
    for path in reversed(more):
        if path in raw:
            described.update(_described(raw[path], names))
    for kind, value in parts:
        if kind == "parameters":
            described.update(value)
    variadic = (griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword)
    visible = [p for p in params if not p.name.startswith("_") and (p.kind not in variadic or p.name in described)]
    sections: list[griffe.DocstringSection] = []

    def table() -> griffe.DocstringSectionParameters:
        return griffe.DocstringSectionParameters(
            [
                griffe.DocstringParameter(
                    p.name.lstrip("*"),
                    description=_escape_prose(described.get(p.name, "")),
                    annotation=p.annotation
                    if p.annotation is not None or cls is None
                    else _field_annotation(cls, p.name),
                    value=p.default,
                )
                for p in visible
            ]
        )

    for kind, value in parts:
        sections.append(griffe.DocstringSectionText(str(value)) if kind == "text" else table())
    if cls is not None and visible and not any(kind == "parameters" for kind, _ in parts):
        sections.append(table())
    obj.docstring.value = "\n\n".join(str(v) for k, v in parts if k == "text")
    obj.docstring.parsed[:] = sections
