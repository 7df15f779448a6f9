"""Rotary positions (RoPE): twisted states, their spectra, hemispheres and contraction (arXiv 2607.24502).

The study's folder: its experiment (``twisted_states.py``), its theory and figures (``rope_*.py``). Listed in
``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("twisted_states",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
