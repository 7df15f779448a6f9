"""The noise-driven phase transition of noisy USA and its bifurcation diagram (arXiv 2606.05140, 2604.16288).

The study's folder: its experiments (``noisy_transition.py``, ``bifurcation.py``), its theory and figures
(``noisy_transition_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = (
    "noisy_transition",
    "bifurcation",
)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """the uniform state's threshold K_#^{(d)}(β), β*^{(d)}, the map to the noise σ; the bifurcation diagram of the
stationary densities (continued by the core's `solvers/stationary.py`), β_*^{(d)} located from the zonal ones on
S² and S³ (`solvers/stationary_sphere.py`)"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
