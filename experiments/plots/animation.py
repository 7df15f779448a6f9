"""Animated GIFs of particles moving on the sphere (d = 3) or the circle (d = 2)."""

from __future__ import annotations

import os

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from .style import (
    SPHERE_COLOR,
    TITLE_SIZE,
    apply_style,
    as_states,
    auto_view,
    axis_values,
    cyclic_colors,
    depth_faded,
    draw_sphere,
    new_figure,
    params_text,
    particle_colors,
    subsample,
    title_text,
    view_vector,
)


def _gif_palette(frames, key_colors, backgrounds):
    """One 256-colour palette for all frames, with room for the particles' colours.

    Pillow's default per-frame adaptive palette spends its entries on the sphere's shading, so
    a small cluster of coloured markers comes out grey. Here the palette is cut from sampled
    frames plus a swatch of the key colours (pure and blended into the backgrounds, as faded
    markers and trails are), weighted to a third of the sample.
    """
    from PIL import Image

    sample = [np.asarray(frames[k]) for k in subsample(len(frames), 6)]
    stack = np.concatenate(sample, axis=0)
    key = np.asarray(key_colors, dtype=float)[:, :3]
    tones = [key]
    for bg in backgrounds:
        bg = np.asarray(mcolors.to_rgb(bg))
        tones += [a * key + (1 - a) * bg for a in (0.25, 0.5, 0.75)]
    tones = np.unique(np.round(np.concatenate(tones) * 255).astype(np.uint8), axis=0)
    width = stack.shape[1]
    rows = max(1, stack.shape[0] // 2)
    reps = max(1, rows * width // (len(tones) * 16))
    swatch = np.repeat(tones, reps * 16, axis=0)
    swatch = np.resize(swatch, (rows * width, 3)).reshape(rows, width, 3)
    composite = Image.fromarray(np.concatenate([stack, swatch], axis=0), "RGB")
    # Exact entries for paper, text and the greys of the chrome, so none of them shifts hue.
    fixed = [(255, 255, 255), (0, 0, 0)] + [(g, g, g) for g in (38, 115, 128, 140, 153)]
    cut = composite.quantize(colors=256 - len(fixed), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    learned = np.array(cut.getpalette()[: 3 * (256 - len(fixed))]).reshape(-1, 3)
    # Drop learned near-duplicates of the fixed entries: Pillow's palette lookup is
    # approximate and could otherwise turn white paper into 252-grey.
    near = np.abs(learned[:, None, :] - np.array(fixed)[None]).max(axis=2).min(axis=1) <= 8
    entries = [v for rgb in fixed for v in rgb] + learned[~near].ravel().tolist()
    palette = Image.new("P", (1, 1))
    palette.putpalette(entries + [0] * (768 - len(entries)))
    return palette


def _gif_writer_class():
    from matplotlib.animation import AbstractMovieWriter

    class GifWriter(AbstractMovieWriter):
        """PillowWriter with one shared palette (see _gif_palette) and no dithering."""

        def __init__(self, fps, key_colors, backgrounds):
            super().__init__(fps=fps)
            self._key_colors, self._backgrounds = key_colors, backgrounds

        def setup(self, fig, outfile, dpi=None):
            super().setup(fig, outfile, dpi=dpi)
            self._frames = []

        def grab_frame(self, **savefig_kwargs):
            from io import BytesIO

            from PIL import Image

            buf = BytesIO()
            self.fig.savefig(buf, **{**savefig_kwargs, "format": "rgba", "dpi": self.dpi})
            rgba = Image.frombuffer("RGBA", self.frame_size, buf.getbuffer(), "raw", "RGBA", 0, 1)
            white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            self._frames.append(Image.alpha_composite(white, rgba).convert("RGB"))

        def finish(self):
            from PIL import Image

            if not self._frames:  # drawing failed; let that error surface, not this one
                return
            palette = _gif_palette(self._frames, self._key_colors, self._backgrounds)
            frames = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in self._frames]
            frames[0].save(
                self.outfile,
                save_all=True,
                append_images=frames[1:],
                duration=max(int(round(1000 / self.fps)), 20),
                loop=0,
            )

    return GifWriter


def animate_sphere(
    ts,
    xs,
    *,
    path,
    fps=15,
    beta=None,
    max_frames=150,
    dpi=100,
    trail=8,
    elev=None,
    azim=None,
) -> Figure:
    """Animated GIF of particles moving on the shaded sphere (d = 3) or on the circle (d = 2).

    xs (T, n, d). At most max_frames frames (evenly subsampled), the time in the title, short
    fading trails of the last ``trail`` frames. Returns the figure showing the last frame.
    """
    from matplotlib.animation import FuncAnimation

    ts = axis_values("ts", ts)
    xs = as_states("xs", xs, ts, d=(2, 3))
    if path is None:
        raise ValueError("path is required: animate_sphere writes a GIF")
    if int(max_frames) < 1 or float(fps) <= 0:
        raise ValueError("max_frames must be >= 1 and fps > 0")
    frames = subsample(ts.size, int(max_frames))
    d = xs.shape[2]
    three_d = d == 3
    n = xs.shape[1]
    if three_d:
        colors = particle_colors(xs[0, :, 2])
    else:
        colors = cyclic_colors(np.arctan2(xs[-1, :, 1], xs[-1, :, 0]))

    fig = new_figure(4.6, 4.6, layout=None)  # fixed layout: no jitter between frames
    if three_d:
        from mpl_toolkits.mplot3d import Axes3D
        from mpl_toolkits.mplot3d.art3d import Line3DCollection

        elev, azim = auto_view(xs[-1], elev, azim)
        view = view_vector(elev, azim)
        ax = fig.add_axes((0.0, 0.0, 1.0, 0.9), projection="3d")
        assert isinstance(ax, Axes3D), "projection='3d' makes an Axes3D"
        ax.view_init(elev=elev, azim=azim)
        draw_sphere(ax, elev, azim, resolution=36)
        trail_lines = Line3DCollection(np.zeros((1, 2, 3)), linewidths=1.2, zorder=3)
        ax.add_collection3d(trail_lines, autolim=False)
    else:
        ax = fig.add_axes((0.08, 0.06, 0.84, 0.82))
        s = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(s), np.sin(s), color="0.6", linewidth=1.0, zorder=1)
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
        ax.set_aspect("equal")
        ax.set_axis_off()
        trail_lines = LineCollection([np.zeros((2, 2))], linewidths=2.0, zorder=2)
        ax.add_collection(trail_lines, autolim=False)
    head = title_text("Particles on the sphere" if three_d else "Particles on the circle", None, n=n, beta=beta)
    title = fig.text(0.5, 0.97, "", ha="center", va="top", fontsize=TITLE_SIZE)
    state = {"points": None}

    def draw(frame_number):
        k = int(frames[frame_number])
        history = frames[max(0, frame_number - int(trail)) : frame_number + 1]
        if history.size > 1:
            segs = np.stack([xs[history[:-1]], xs[history[1:]]], axis=2).reshape(-1, 2, d)
            rgba = np.tile(colors, (history.size - 1, 1))
            rgba[:, 3] = np.repeat(np.linspace(0.1, 0.8, history.size - 1), n)
            if three_d:
                rgba[:, 3] *= depth_faded(rgba, segs[:, 1], view)[:, 3]
        else:
            segs, rgba = np.zeros((1, 2, d)), np.zeros((1, 4))
        trail_lines.set_segments(segs)
        trail_lines.set_color(rgba)
        if state["points"] is not None:
            state["points"].remove()
        pts = xs[k]
        if three_d:
            state["points"] = ax.scatter(
                pts[:, 0],
                pts[:, 1],
                pts[:, 2],
                s=26,
                c=depth_faded(colors, pts, view),
                edgecolors=depth_faded(np.tile(mcolors.to_rgba("0.15"), (n, 1)), pts, view),
                linewidths=0.4,
                depthshade=False,
                zorder=6,
                gid="particles",
            )
        else:
            state["points"] = ax.scatter(
                pts[:, 0], pts[:, 1], s=34, c=colors, edgecolors="0.15", linewidths=0.5, zorder=3, gid="particles"
            )
        title.set_text(f"{head.splitlines()[0]}\n{params_text(n=n, beta=beta)}   $t = {ts[k]:.2f}$")
        return [state["points"], trail_lines, title]

    anim = FuncAnimation(fig, draw, frames=len(frames), interval=1000 / fps, blit=False, repeat=False)
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    apply_style(fig)
    writer = _gif_writer_class()(fps, colors, ["white", SPHERE_COLOR, "0.6"])
    anim.save(path, writer=writer, dpi=dpi)
    draw(len(frames) - 1)
    return fig
