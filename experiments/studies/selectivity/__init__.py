"""The selectivity of one attention layer over context lengths (arXiv 2605.08505).

The study's folder: its experiment (``selectivity.py``), its theory and figures
(``selectivity_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("selectivity",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
