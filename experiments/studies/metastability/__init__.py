"""Dynamic metastability: the clusters' plateaus and their count (arXiv 2410.23228, 2410.06833).

The study's folder: its experiments (``metastability.py``, ``metastable_count.py``), its theory and figures
(``metastability_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = (
    "metastability",
    "metastable_count",
)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the plateaus of the cluster count, the first metastable state against the fastest unstable mode k*(β), its
lifetime"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
