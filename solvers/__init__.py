"""How it moves: one ``simulate`` entry point over sphere-preserving integrators."""

from .adaptive import OnSphere
from .compilation_cache import enable_compilation_cache
from .fixed import CG3, RK4, Euler, FixedStep, LieEuler, LieTrotter, RenormalizedEuler
from .meanfield import MeanFieldError, MeanFieldSolution, meanfield_circle
from .meanfield_sphere import SphereMeanField, SphereMeanFieldError
from .simulation import SOLVERS, MaxStepsError, NonFiniteError, Solution, Status, simulate
from .stochastic import Strang, brownian_step
