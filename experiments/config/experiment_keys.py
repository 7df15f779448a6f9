"""The configuration keys that only the core's experiments read, or several studies share (``experiment_key=True``),
each documented with the experiments' names first. ``keys.py`` registers them after the core and variant keys,
and then each study's own (``experiments/studies/NAME/NAME_keys.py``)."""

from __future__ import annotations

from .types import Key

EXPERIMENT_KEYS = (
    Key(
        "degree",
        "int",
        32,
        "meanfield-sphere: the largest spherical-harmonic degree L of the density",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "modes",
        "int",
        256,
        "meanfield-circle: Fourier modes |k| < modes of the density (a grid of 2·modes angles)",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "perturbation",
        "float",
        1e-3,
        "meanfield-circle: amplitude ε of each mode k ≤ 16 of the initial density",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "particle_counts",
        "int_list",
        (),
        "meanfield-circle, meanfield-sphere, gaussian-closure: particle counts n "
        "compared with the density (or the closure)",
        minimum=1,
        allow_empty=True,
        experiment_key=True,
    ),
    Key(
        "context_lengths",
        "int_list",
        (),
        "long-context, selectivity: the context lengths n of one attention layer (selectivity: n keys per query)",
        minimum=2,
        allow_empty=True,
        experiment_key=True,
    ),
)
