"""attnflow: transformers as interacting particle systems on the sphere.

Tokens are particles on S^{d-1}; a transformer layer is a time step of the self-attention
vector field ([GLPR] arXiv 2312.10794). ``import attnflow as af`` exposes the public API.

attnflow turns on JAX's float64 support when imported (``jax_enable_x64``): validation needs
it, and arrays default to float64. Pass ``dtype="float32"`` where speed matters more.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._version import __version__  # noqa: E402
from .particles import (  # noqa: E402
    SA,
    USA,
    Attention,
    energy,
    init,
    log_energy,
    normalized_energy,
)
from .solvers import SOLVERS, Solution, simulate  # noqa: E402
