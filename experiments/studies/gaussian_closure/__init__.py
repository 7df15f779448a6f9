"""The Gaussian closure of the mean field and its collapse (arXiv 2501.18322).

The study's folder: its experiment (``gaussian_closure.py``), its theory and figures
(``gaussian_closure_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("gaussian_closure",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the Gaussian covariance closure without layer norm (SA, multi-head, L2, Sinkhorn), limit ranks; its solver with
error control, Σ kept positive semi-definite"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
