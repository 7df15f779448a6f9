"""The selectivity of one attention layer over context lengths (arXiv 2605.08505).

The study's folder: its experiment (``selectivity.py``), its theory and figures
(``selectivity_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("selectivity",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """one query among n keys: the selectivity threshold, nearest keys and the layer's output in blocked passes, the
threshold's n → ∞ law"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
