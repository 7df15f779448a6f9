"""Rest points, their Morse indices, continuation in β, and the energy's extremizers (arXiv 2507.22857, 2410.06833, 2501.03096).

The study's folder: its experiment (``equilibria.py``), its theory and figures
(``equilibria_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("equilibria",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
