"""Spectral selection for a symmetric value matrix (arXiv 2604.26085, 2511.11553): pure-mode and mixed rest points,
their stability, the basins of the eigendirections.

The study's folder: its experiment (``spectral_selection.py``), its theory, figures and keys
(``spectral_selection_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("spectral_selection",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """symmetric V: the pure-mode states ±e_p and their spectra in closed form (homogeneous, balanced bipolar, split
σ(c, r)), the mixed three-group states' scalar equation, basin fractions and maps"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
