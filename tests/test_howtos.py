"""The how-tos run as written: each page of docs/howto/ is followed literally, block by block, on a scratch copy of
the repository, so that the new-experiment page adds a working, tested study, the new-field page a working, tested
field and the new-integrator page a measured method (docs/howto/index.md, "How the pages are run").

A block is run by its fence: a ``title="PATH"`` writes the file PATH (relative to the repository root) or, for a
``diff``, edits it (lines `` `` kept, ``-`` removed, ``+`` added; no kept or removed line: added at the end); an
untitled ``python`` block runs as a script, an untitled ``bash`` block command by command (a command continued by
``\\``), each of which must exit 0, or the status its comment names (``# exit 2: ...``), in the repository's root.
Any other block, and one right after ``<!-- howto: not run (why) -->``, is read, not run; a page that opens with
``<!-- howto: page not run (why) -->`` is not run at all.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOWTO = REPO / "docs" / "howto"
FENCE = re.compile(r"^(\s*)```+\s*([\w+-]*)(.*)$")
TITLE = re.compile(r'title="([^"]+)"')
NOT_RUN = re.compile(r"^\s*<!-- howto: not run \((.+)\) -->\s*$")
PAGE_NOT_RUN = re.compile(r"\A<!-- howto: page not run \((.+)\) -->")
EXIT = re.compile(r"#\s*exit (\d+)\b")
BLOCK_TIMEOUT = 900  # seconds for one block (a bash block's commands together)


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    title: str | None
    text: str
    run: bool  # False after a "not run" marker


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a page, in order, with their language, title and whether a marker says not to run."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, rest = m.groups()
        title = TITLE.search(rest)
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^{re.escape(indent)}```+\s*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        out.append(
            Block(i + 1, lang, title.group(1) if title else None, "\n".join(body) + "\n", not NOT_RUN.match(previous))
        )
        i = j + 1
    return out


def runnable(block: Block) -> bool:
    return block.run and (block.title is not None or block.lang in ("python", "bash"))


def apply_diff(path: Path, diff: str) -> None:
    """Edit ``path`` by ``diff``: its kept and removed lines, found once in the file, become its kept and added ones;
    a diff of added lines only appends them."""
    lines = diff.splitlines()
    bad = [line for line in lines if line and line[0] not in " +-"]
    assert not bad, f"a diff's lines start with ' ', '+' or '-': {bad}"
    old = [line[1:] for line in lines if not line or line[0] in " -"]
    new = [line[1:] for line in lines if not line or line[0] in " +"]
    text = path.read_text(encoding="utf-8")
    if not old:
        path.write_text(text.rstrip("\n") + "\n" + "\n".join(new) + "\n", encoding="utf-8")
        return
    have = text.split("\n")
    starts = [k for k in range(len(have) - len(old) + 1) if have[k : k + len(old)] == old]
    assert len(starts) == 1, f"{path.name}: the diff's kept and removed lines occur {len(starts)} times, not once"
    k = starts[0]
    path.write_text("\n".join(have[:k] + new + have[k + len(old) :]), encoding="utf-8")


def bash_script(text: str) -> str:
    """A bash block as a script that checks each command's exit status (0, or the one its comment names)."""
    commands, current = [], ""
    for line in text.splitlines():
        current += line
        if line.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.strip().startswith("#"):
            commands.append(current)
        current = ""
    out = []
    for command in commands:
        m = EXIT.search(command)
        want = m.group(1) if m else "0"
        shown = shlex.quote(command.strip())
        out += [
            command,
            f's=$?; if [ "$s" != {want} ]; then echo "exit status $s, not {want}: "{shown} >&2; exit 1; fi',
        ]
    return "\n".join(out) + "\n"


def scratch_copy(dest: Path) -> Path:
    """The working tree (tracked files and untracked ones git does not ignore) copied to ``dest/attnflow``."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    root = dest / "attnflow"
    for name in filter(None, listed):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = root / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return root


def follow(page: Path, tmp_path: Path) -> list[str]:
    """Follow ``page`` on a scratch copy: every block it runs, in order; what ran, one line each."""
    root = scratch_copy(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
    }
    found = subprocess.run(
        [sys.executable, "-c", "import attnflow; print(attnflow.__file__)"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert Path(found.stdout.strip()) == root / "__init__.py", found.stdout + found.stderr
    done = []
    for block in blocks(page.read_text(encoding="utf-8")):
        if not runnable(block):
            continue
        where = f"{page.name}:{block.line}"
        if block.title is not None:
            target = root / block.title
            if block.lang == "diff":
                assert target.is_file(), f"{where}: {block.title} does not exist"
                apply_diff(target, block.text)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text, encoding="utf-8")
            done.append(f"{block.lang} {block.title}")
            continue
        if block.lang == "python":
            command = [sys.executable, "-c", block.text]
        else:
            command = ["bash", "-c", bash_script(block.text)]
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
        assert proc.returncode == 0, f"{where} ({block.lang}) failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        done.append(f"{block.lang} at line {block.line}")
    return done


PAGES = sorted(HOWTO.glob("*.md"))


# -- the conventions themselves, quickly -------------------------------------------------------------


def test_every_page_runs_or_says_why_not():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        found = blocks(text)
        if PAGE_NOT_RUN.match(text):
            continue
        assert any(runnable(b) for b in found), (
            f"{page.name}: nothing to run; mark it '<!-- howto: page not run (why) -->'"
        )


def test_the_recipes_run():
    """The pages of the recipes are run, not marked away: each adds files and runs commands."""
    for name in ("new-experiment.md", "new-field.md", "new-integrator.md"):
        text = (HOWTO / name).read_text(encoding="utf-8")
        assert not PAGE_NOT_RUN.match(text), name
        kinds = {("file" if b.title else b.lang) for b in blocks(text) if runnable(b)}
        assert {"file", "bash"} <= kinds or {"file", "python"} <= kinds, (name, kinds)


def test_a_block_is_read_by_its_fence_and_marker():
    text = (
        '```python title="a/b.py"\nX = 1\n```\n\n<!-- howto: not run (an output) -->\n```bash\nfalse\n```\n'
        "```text\nout\n```\n    ```bash\n    echo indented\n    ```\n"
    )
    found = blocks(text)
    assert [(b.lang, b.title, b.run, runnable(b)) for b in found] == [
        ("python", "a/b.py", True, True),
        ("bash", None, False, False),
        ("text", None, True, False),
        ("bash", None, True, True),
    ]
    assert found[0].text == "X = 1\n" and found[3].text == "echo indented\n"


def test_a_diff_edits_the_one_place_it_names(tmp_path):
    path = tmp_path / "f.py"
    path.write_text('S = (\n    "a",\n    "b",\n)\n', encoding="utf-8")
    apply_diff(path, '     "b",\n+    "c",\n )\n')
    assert path.read_text(encoding="utf-8") == 'S = (\n    "a",\n    "b",\n    "c",\n)\n'
    apply_diff(path, '-    "a",\n+    "z",\n')
    assert path.read_text(encoding="utf-8") == 'S = (\n    "z",\n    "b",\n    "c",\n)\n'
    apply_diff(path, "+\n+T = 1\n")
    assert path.read_text(encoding="utf-8").endswith(")\n\nT = 1\n")
    with pytest.raises(AssertionError, match="occur 0 times"):
        apply_diff(path, ' "q"\n+"r"\n')


def test_a_bash_block_checks_each_commands_status(tmp_path):
    def run(text):
        return subprocess.run(["bash", "-c", bash_script(text)], cwd=tmp_path, capture_output=True, text=True)

    assert run("true\necho a \\\n  b > f.txt\n").returncode == 0
    assert (tmp_path / "f.txt").read_text() == "a b\n"
    failed = run("false\ntrue\n")
    assert failed.returncode == 1 and "exit status 1, not 0: false" in failed.stderr
    assert run("(exit 2)   # exit 2: refused\n").returncode == 0
    assert run("true   # exit 2: refused\n").returncode == 1


# -- the pages, followed (slow: each runs experiments, simulations and tests) -----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", [p for p in PAGES if not PAGE_NOT_RUN.match(p.read_text(encoding="utf-8"))], ids=lambda p: p.stem
)
def test_following_the_page_works(page, tmp_path):
    done = follow(page, tmp_path)
    assert done
