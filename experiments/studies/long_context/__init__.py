"""One attention layer over a long context at β = γ log n (arXiv 2510.05554).

The study's folder: its experiment (``long_context.py``), its theory and figures
(``long_context_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("long_context",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """one attention layer over a long context at β = γ log n, its equiangular closed form"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
