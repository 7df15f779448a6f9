"""The noise-driven phase transition of noisy USA and its bifurcation diagram (arXiv 2606.05140, 2604.16288).

The study's folder: its experiments (``noisy_transition.py``, ``bifurcation.py``), its theory and figures
(``noisy_transition_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = (
    "noisy_transition",
    "bifurcation",
)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
