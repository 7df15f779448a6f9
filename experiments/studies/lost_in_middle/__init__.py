"""Lost in the middle: retrieval by position under causal masks and decay (arXiv 2605.09213).

The study's folder: its experiment (``lost_in_middle.py``), its theory and figures
(``lost_in_middle_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("lost_in_middle",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the soft-accuracy profile S_t(s), t_crit, the finite-n linear response"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
