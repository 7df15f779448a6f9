"""Clusters around Rényi centres, the quantitative clustering of arXiv 2411.04990.

The study's folder: its experiment (``renyi_centres.py``), its theory and figures
(``renyi_centres_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("renyi_centres",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """Rényi centres of a causal configuration, the parking count"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
