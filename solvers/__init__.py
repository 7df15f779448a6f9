"""How it moves: one ``simulate`` entry point over sphere-preserving integrators."""

from .adaptive import OnSphere
from .circle_meanfield import MeanFieldError, MeanFieldSolution, meanfield_circle
from .compilation_cache import enable_compilation_cache
from .fixed import CG3, RK4, Euler, FixedStep, LieEuler, LieTrotter, RenormalizedEuler
from .simulation import SOLVERS, MaxStepsError, NonFiniteError, Solution, Status, simulate
from .sphere_meanfield import SphereMeanField, SphereMeanFieldError
from .stochastic import Strang, brownian_step
