"""attnflow's exceptions: one base, with the user's bad input apart from numerical failures.

    AttnflowError                 every error attnflow raises on purpose
    ├── InputError (ValueError)   an argument, a configuration or a file that cannot be used, refused
    │                             before anything runs (``ConfigError`` of the configurations)
    └── ConvergenceError (RuntimeError)
                                  a computation that ran and did not get there: a member that became
                                  non-finite or reached ``max_steps``, a Newton iteration, a
                                  continuation, a fit, a closure or a mean-field density that stopped
                                  short; the message names what failed and the time, steps or
                                  residual it reached

Each derives from the built-in exception it has always been, so ``except ValueError`` and ``except
RuntimeError`` still catch them. The command line exits with status 2 on an ``InputError`` (the input
is to change) and 1 on a ``ConvergenceError`` (the run failed: docs/design.md §4.3). The module sits
in the lowest layer so that every layer can raise them.
"""

from __future__ import annotations

__all__ = ["AttnflowError", "InputError", "ConvergenceError"]


class AttnflowError(Exception):
    """The base of the errors attnflow raises on purpose: ``InputError`` and ``ConvergenceError``."""


class InputError(AttnflowError, ValueError):
    """Input that cannot be used (an argument, a configuration key, a file), refused before anything runs.

    A ``ValueError``; the command line reports it in one line with exit status 2."""


class ConvergenceError(AttnflowError, RuntimeError):
    """A numerical computation that ran and did not converge or reach its end (steps, time or residual named).

    A ``RuntimeError``; the command line reports it in one line with exit status 1. Its subclasses
    carry what was computed before the failure (``NonFiniteError.solution``, ``MaxStepsError.solution``,
    ``MeanFieldError.solution``)."""
