"""Random layer weights and common noise: the stochastic depth limit of transformers (arXiv 2601.21942).

The study's folder: its experiments (``common_noise.py``; ``antipodal_persistence.py``, two antipodal groups of n = 8 … 32 tokens;
``quadratic_form.py``, the random quadratic form of
arXiv 2603.06187, 2608.16664; ``homogenized_flow.py``, the homogenized flow of arXiv 2604.01978;
``coercive_noise.py``, synchronization by a common Brownian motion, arXiv 2604.26898), its theory, figures and keys (``common_noise_*.py``),
on the core's random-depth model (``particles/random_depth.py``) and its paths
(``solvers/common_noise_paths.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("common_noise", "antipodal_persistence", "quadratic_form", "homogenized_flow", "coercive_noise")
"""The modules that register this study's experiments, in the order of ``attnflow list``."""

THEORY = """two tokens under random layer weights: the two-point diffusion, its Lyapunov exponents, the antipodal threshold cosh
2β = d − 2; two clusters' diffusion, the invariance and persistence of balanced antipodal groups; the random
quadratic form's two-point diffusion, its aligned probability and the antipodal stage's occupation time; the Gram
diffusion, the homogenized scalar ODE and its O(1/d) bias by the linear noise approximation; a common Brownian
forcing's pair diffusion, its contraction rate γ²(d − 3) and the energy's generator"""
"""What its theory holds, in a phrase: the shelf's table in docs/architecture.md (docs/scripts/tables.py)."""
