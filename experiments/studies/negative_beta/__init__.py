"""Synchronization at β of either sign (arXiv 2507.22857).

The study's folder: its experiment (``negative_beta.py``), its theory and figures
(``negative_beta_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("negative_beta",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """synchronization for either sign of β against its thresholds and the triangle's linear rate (theory in the core's
`particles/synchronization.py`, which `equilibria` shares)"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
