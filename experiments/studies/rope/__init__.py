"""Rotary positions (RoPE): twisted states, their spectra, hemispheres and contraction (arXiv 2607.24502).

The study's folder: its experiment (``twisted_states.py``), its theory and figures (``rope_*.py``). Listed in
``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("twisted_states",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """SA with rotary positions: resonant twisted rings and their Bessel-aliasing spectra, their continuation in β,
closed hemispheres, the contraction bound of non-obtuse data, the frequencies' order changing with β"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
