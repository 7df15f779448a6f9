"""The hardmax limit β → ∞ and its Frank–Wolfe dynamics (arXiv 2605.10931, 2508.09628).

The study's folder: its experiment (``hardmax_limit.py``), its theory and figures
(``hardmax_limit_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("hardmax_limit",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """attention in the tokens' convex hull and its hardmax limit as Frank–Wolfe steps: cells, straight paths, trapping"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
