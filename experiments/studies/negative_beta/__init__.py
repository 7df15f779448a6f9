"""Synchronization at β of either sign (arXiv 2507.22857).

The study's folder: its experiment (``negative_beta.py``), its theory and figures
(``negative_beta_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("negative_beta",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
