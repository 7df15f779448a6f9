"""The moderate-interaction limit of attention (arXiv 2509.25040).

The study's folder: its experiment (``moderate_interaction.py``), its theory and figures
(``moderate_interaction_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("moderate_interaction",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the regime β = c·n: the second moment's spectrum, angles in its top plane, the unstable band's power, cluster
counts, the Laplace limit's collapse onto a great circle"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
