"""Rest points, their Morse indices, continuation in β, and the energy's extremizers (arXiv 2507.22857, 2410.06833, 2501.03096).

The study's folder: its experiment (``equilibria.py``), its theory and figures
(``equilibria_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("equilibria",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """energy extremizers of a few tokens for an anisotropic kernel; rest points by polytope, their Morse indices,
continuation paths"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
