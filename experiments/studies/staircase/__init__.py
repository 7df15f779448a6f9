"""The energy staircase of metastable clustering (arXiv 2410.06833).

The study's folder: its experiment (``staircase.py``), its theory and figures
(``staircase_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("staircase",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the energy staircase's saddles and plateaus (figures drawn by the core's energy-and-clusters plot)"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
