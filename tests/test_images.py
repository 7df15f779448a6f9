"""The images of README.md and the documentation (docs/scripts/images.py): each is the output of the command
cited beside it, drawn by the current sources."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "scripts" / "images.py"


def _images():
    spec = importlib.util.spec_from_file_location("attnflow_docs_images", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


images = _images()


def _pages() -> list[Path]:
    """README.md and the hand-written pages of docs/ (the gallery's pages are generated)."""
    return [REPO / "README.md"] + sorted(p for p in (REPO / "docs").rglob("*.md") if "gallery" not in p.parts)


def _spans(text: str) -> list[str]:
    """The inline code spans of Markdown text, line breaks inside them read as spaces."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]


def cited_beside(text: str, image_file: str) -> list[list[str]]:
    """For each citation of ``image_file`` (its file name) in the Markdown ``text``, the code spans beside it:
    in a table, the same column of the next row; elsewhere, the paragraph just before the image."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if f"{image_file})" not in line:
            continue
        if line.lstrip().startswith("|"):
            cells = line.strip().strip("|").split("|")
            column = next(k for k, cell in enumerate(cells) if f"{image_file})" in cell)
            below = lines[i + 1].strip().strip("|").split("|") if i + 1 < len(lines) else []
            out.append(_spans(below[column]) if column < len(below) else [])
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        paragraph = []
        while j >= 0 and lines[j].strip():
            paragraph.insert(0, lines[j])
            j -= 1
        out.append(_spans(" ".join(paragraph)))
    return out


def test_the_citation_parser_reads_a_table_column_and_a_paragraph():
    table = "| a | b |\n|---|---|\n| ![x](img/one.png) | ![y](img/two.png) |\n| `cmd one` | `cmd  two` `and` |\n"
    assert cited_beside(table, "one.png") == [["cmd one"]]
    assert cited_beside(table, "two.png") == [["cmd two", "and"]]
    para = "Below: `attnflow run x --set\n'k=[1]'` draws it.\n\n![it](img/it.png)\n"
    assert cited_beside(para, "it.png") == [["attnflow run x --set 'k=[1]'"]]


@pytest.mark.parametrize("name", list(images.IMAGES))
def test_each_page_cites_the_command_the_image_records(name):
    image = images.IMAGES[name]
    file = Path(image.path).name
    citations = {
        page.relative_to(REPO).as_posix(): cited_beside(page.read_text(encoding="utf-8"), file) for page in _pages()
    }
    citations = {page: found for page, found in citations.items() if found}
    assert citations, f"{image.path} is cited nowhere: drop it from docs/scripts/images.py's IMAGES"
    for page, found in citations.items():
        for spans in found:
            assert image.command in spans, (
                f"{page} cites {file} beside {spans}, but docs/scripts/images.py draws it with {image.command!r}: "
                "cite that command, or change the image's command and regenerate it"
            )


@pytest.mark.parametrize("name", list(images.IMAGES))
def test_each_image_is_its_command_output_by_the_current_sources(name):
    why = images.stale(name)
    assert why is None, f"{name}: stale: {why}; regenerate with python docs/scripts/images.py {name}"


def _png(path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    fig.savefig(path, format="png", dpi=20)
    return path


def test_an_image_is_stale_when_a_source_or_its_command_changes(tmp_path, monkeypatch):
    name, image = "circle_beta9", images.IMAGES["circle_beta9"]
    for source in image.sources:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / source, tmp_path / source)
    assert images.stale(name, tmp_path) == f"{image.path} is missing"
    written = images.write_image(name, _png(tmp_path / "figure.png"), tmp_path)
    text = images.recorded(written)
    assert text[images.COMMAND_KEY] == "attnflow run fig4-circle"
    assert text[images.DIGEST_KEY] == images.source_digest(image, tmp_path)
    assert len(text[images.DIGEST_KEY]) == 64
    assert images.stale(name, tmp_path) is None
    # the pixels are the figure's
    from PIL import Image as PILImage

    with PILImage.open(written) as a, PILImage.open(tmp_path / "figure.png") as b:
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # one byte more in the module that draws it: stale
    with open(tmp_path / image.sources[1], "a", encoding="utf-8") as f:
        f.write("\n")
    assert "drawn by other sources" in images.stale(name, tmp_path)
    images.write_image(name, tmp_path / "figure.png", tmp_path)
    assert images.stale(name, tmp_path) is None
    # another command cited for it: stale
    monkeypatch.setitem(images.IMAGES, name, dataclasses.replace(image, command="attnflow run fig4-circle --quick"))
    assert "records the command 'attnflow run fig4-circle'" in images.stale(name, tmp_path)


def test_the_script_refuses_an_unknown_image(capsys):
    with pytest.raises(SystemExit) as e:
        images.main(["no_such_image", "--check"])
    assert e.value.code == 2
    assert "no image no_such_image; the images are phase_diagram" in capsys.readouterr().err
