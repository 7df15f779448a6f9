"""The Gaussian closure of the mean field and its collapse (arXiv 2501.18322).

The study's folder: its experiment (``gaussian_closure.py``), its theory and figures
(``gaussian_closure_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("gaussian_closure",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
