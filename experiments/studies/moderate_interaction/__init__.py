"""The moderate-interaction limit of attention (arXiv 2509.25040).

The study's folder: its experiment (``moderate_interaction.py``), its theory and figures
(``moderate_interaction_*.py``). Listed in ``experiments/studies/__init__.py``.
"""

EXPERIMENTS = ("moderate_interaction",)
"""The modules that register this study's experiments, in the order of ``attnflow list``."""
