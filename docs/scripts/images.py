"""Regenerate the images of README.md and the documentation from the commands cited beside them.

    python docs/scripts/images.py                  # every image of the table below (minutes: the full runs)
    python docs/scripts/images.py circle_beta9     # one or more, by name
    python docs/scripts/images.py --reuse          # redraw from the runs already in RUNS when their command is the same
    python docs/scripts/images.py --check          # list the stale images (exit 1 if any), run nothing

Each row of ``IMAGES`` names an image of ``docs/img/``, the exact command that README.md and the pages of
``docs/`` cite beside it (``attnflow run fig4-circle``), the figure of that run it copies, and the source files
that draw it (the experiment's module and the plots modules it uses). The script runs the command into
``RUNS/NAME`` (default ``runs/images/``, git-ignored), copies the figure to ``docs/img/`` and writes, as PNG text
chunks, the command (``attnflow:command``) and a digest of those sources (``attnflow:sources``, SHA-256 over each
file's path and bytes). ``tests/test_images.py`` fails when an image's command differs from the one cited beside
it, or its digest from the current sources ("stale: regenerate with python docs/scripts/images.py NAME"), so
that the README's images are the commands' outputs, drawn by the code as it is.

``--reuse`` redraws an image with ``attnflow plot`` from the run kept in ``RUNS/NAME`` when that run was made by
the same command (recorded in ``RUNS/NAME/images-command.txt``): a change to the drawing code then costs seconds,
not the run again. Exit status 0 when every image was written, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the package ``attnflow``): paths below are relative to it."""
COMMAND_KEY = "attnflow:command"
DIGEST_KEY = "attnflow:sources"
SOURCES_KEY = "attnflow:source-files"
RECORD = "images-command.txt"


@dataclass(frozen=True)
class Image:
    """An image of the documentation: the command cited beside it, the run's figure it copies, what draws it."""

    path: str
    command: str
    figure: str
    sources: tuple[str, ...]


IMAGES = {
    "phase_diagram": Image(
        "docs/img/phase_diagram.png",
        "attnflow run fig3-phase-diagram",
        "phase_diagram.png",
        ("experiments/builtin/fig3_phase_diagram.py", "experiments/plots/phase.py", "experiments/plots/style.py"),
    ),
    "circle_beta9": Image(
        "docs/img/circle_beta9.png",
        "attnflow run fig4-circle",
        "trajectories_beta9.png",
        ("experiments/builtin/fig4_circle.py", "experiments/plots/trajectory.py", "experiments/plots/style.py"),
    ),
    "staircase": Image(
        "docs/img/staircase.png",
        "attnflow run staircase",
        "staircase_beta500.png",
        ("experiments/studies/staircase/staircase.py", "experiments/plots/clusters.py", "experiments/plots/style.py"),
    ),
    "attention_walk": Image(
        "docs/img/attention_walk.png",
        """attnflow run fig4-circle --quick --set 'statistics=["pairs","attention"]'""",
        "attention.png",
        ("experiments/analysis.py", "experiments/plots/attention.py", "experiments/plots/style.py"),
    ),
}


def source_digest(image: Image, root: Path = ROOT) -> str:
    """SHA-256 over the path and bytes of each source file that draws ``image``, in the order listed."""
    h = hashlib.sha256()
    for name in image.sources:
        h.update(name.encode() + b"\0")
        h.update((root / name).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def recorded(path: Path) -> dict:
    """The PNG text chunks of an image (empty when it has none or is no PNG)."""
    from PIL import Image as PILImage

    try:
        with PILImage.open(path) as im:
            im.load()
            return dict(getattr(im, "text", {}) or {})
    except (OSError, ValueError):
        return {}


def stale(name: str, root: Path = ROOT) -> str | None:
    """Why the image ``name`` is not its command's output by the current sources, or None when it is."""
    image = IMAGES[name]
    path = root / image.path
    if not path.is_file():
        return f"{image.path} is missing"
    text = recorded(path)
    if text.get(COMMAND_KEY) != image.command:
        return f"{image.path} records the command {text.get(COMMAND_KEY)!r}, not {image.command!r}"
    if text.get(DIGEST_KEY) != source_digest(image, root):
        return f"{image.path} was drawn by other sources than {', '.join(image.sources)} as they are now"
    return None


def _attnflow() -> str:
    """The attnflow command of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("attnflow")
    return os.fspath(beside) if beside.exists() else "attnflow"


def _run(image: Image, run_dir: Path, reuse: bool) -> None:
    """The run of ``image.command`` in ``run_dir``: redrawn when ``reuse`` and it was made by that command."""
    words = shlex.split(image.command)
    if words[:2] != ["attnflow", "run"]:
        raise ValueError(f"{image.command!r}: an image's command is an attnflow run")
    record = run_dir / RECORD
    if reuse and record.is_file() and record.read_text(encoding="utf-8").strip() == image.command:
        subprocess.run([_attnflow(), "plot", os.fspath(run_dir)], check=True, cwd=ROOT)
        return
    subprocess.run(
        [_attnflow(), *words[1:], "--out", os.fspath(run_dir), "--overwrite", "--quiet"], check=True, cwd=ROOT
    )
    record.write_text(image.command + "\n", encoding="utf-8")


def write_image(name: str, figure: Path, root: Path = ROOT) -> Path:
    """Copy ``figure`` to the image ``name``'s path with its command and source digest as PNG text chunks."""
    from PIL import Image as PILImage
    from PIL.PngImagePlugin import PngInfo

    image = IMAGES[name]
    info = PngInfo()
    with PILImage.open(figure) as im:
        for key, value in (getattr(im, "text", {}) or {}).items():
            if key not in (COMMAND_KEY, DIGEST_KEY, SOURCES_KEY):
                info.add_text(key, value)
        info.add_text(COMMAND_KEY, image.command)
        info.add_text(DIGEST_KEY, source_digest(image, root))
        info.add_text(SOURCES_KEY, " ".join(image.sources))
        target = root / image.path
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".png", delete=False) as tmp:
            im.save(tmp, format="PNG", pnginfo=info, optimize=True)
    os.replace(tmp.name, target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"images to write (default: all): {', '.join(IMAGES)}")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "images", help="where the runs are kept")
    parser.add_argument("--reuse", action="store_true", help="redraw from a kept run made by the same command")
    parser.add_argument("--check", action="store_true", help="list the stale images, run nothing")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in IMAGES]
    if unknown:
        parser.error(f"no image {', '.join(unknown)}; the images are {', '.join(IMAGES)}")
    names = args.names or list(IMAGES)
    if args.check:
        reasons = {n: stale(n) for n in names}
        for n, why in reasons.items():
            if why:
                print(f"{n}: stale: {why}; regenerate with python docs/scripts/images.py {n}")
        return 1 if any(reasons.values()) else 0
    failed = []
    for name in names:
        image = IMAGES[name]
        run_dir = args.runs / name
        print(f"{name}: {image.command}", flush=True)
        try:
            _run(image, run_dir, args.reuse)
            print(f"  → {write_image(name, run_dir / image.figure).relative_to(ROOT)}", flush=True)
        except (subprocess.CalledProcessError, OSError, ValueError) as e:
            print(f"  failed: {e}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"not written: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
