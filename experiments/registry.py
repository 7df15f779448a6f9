"""The registry of experiments: what an experiment declares, how it runs, and the table of them.

An experiment is a set of default keys (full size, as in the paper), a ``quick`` set of overrides
that shrinks it to seconds (used by the tests and ``attnflow validate --quick``), the figures it
draws from a finished run, the checks that compare the run with a number the theory predicts, the
groups of statistics those read and, when it is not a particle ensemble, its own runner. Each
built-in experiment is one module of ``builtin/`` that calls :func:`register`; importing
``builtin`` fills :data:`EXPERIMENTS`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..solvers import compilations
from .config import Config, ConfigError
from .run import plan, preflight, runner
from .run.runner import RunResult

__all__ = ["Check", "Experiment", "EXPERIMENTS", "register", "get", "changed_model_keys"]

Figures = dict[str, Callable[..., object]]
"""An experiment's figures: name → a function that draws it into the path it is given (its other parameters,
bound in loops as ``lambda p, j=j: ...``, keep their defaults)."""


@dataclass(frozen=True)
class Check:
    """One comparison of a run with the theory: what, the expected and measured values, pass or fail.

    ``passed`` None: the check does not apply to this run (a theory of d → ∞ at small d, say); ``measured``
    then says why. It is reported as not applicable, never as a failure (:meth:`not_applicable`).
    """

    name: str
    expected: str
    measured: str
    passed: bool | None

    @classmethod
    def not_applicable(cls, name: str, expected: str, why: str) -> Check:
        """A check that does not apply to this run, and why."""
        return cls(name, expected, why, None)

    @property
    def mark(self) -> str:
        """ "ok", "FAIL" or "n/a", padded to four characters (the reports' ``[ok  ]``)."""
        return {True: "ok  ", False: "FAIL", None: "n/a "}[self.passed]

    @property
    def failed(self) -> bool:
        """Whether the check applies and fails."""
        return self.passed is False


@dataclass(frozen=True)
class Experiment:
    """A named configuration with its figures and theory checks (see the module docstring)."""

    name: str
    description: str
    reference: str
    defaults: dict
    quick: dict
    figures: Callable[[RunResult], Figures]
    checks: Callable[[RunResult], list[Check]] = field(default=lambda result: [])
    # experiments made of several runs: the grid they sweep, and the figures and checks of the whole
    grid: dict | None = None
    grid_figures: Callable[[dict], dict] | None = None
    grid_checks: Callable[[dict], list[Check]] | None = None
    # the statistics groups (plan.GROUPS) its figures and checks read, given the configuration;
    # a run computes these whatever its ``statistics`` key says
    needs: Callable[[Config], tuple[str, ...]] = field(default=lambda config: ("pairs", "clusters", "energy"))
    # experiments that are not a particle ensemble: their own runner, config -> RunResult
    run: Callable | None = None
    # whether its figures and checks hold for β < 0 (most compare with a theory of β > 0)
    negative_beta: bool = False
    # what a run computes, in the report's first line, for experiments that are not a particle ensemble
    headline: Callable[[Config], str] | None = None
    # experiments with their own runner declare the keys it reads (any other key set is refused, never
    # ignored: preflight.check_keys_read) and the memory a run holds, {"what [keys that size it]": bytes}
    keys: tuple[str, ...] | None = None
    memory: Callable[[Config], dict] | None = None
    # its own refusals (ConfigError), before anything runs: sizes and values its runner or theory cannot take
    requires: Callable[[Config], None] | None = None
    # the full-size run's time as measured, for the gallery and the docs (None: not measured)
    runtime: str | None = None
    # what a run adds to summary.json beyond docs/design.md §5 (fitted exponents, say): result -> {key: value}
    summary: Callable[[RunResult], dict] | None = None
    # whether its figures read each member's statistics, not only their means over the seeds: a run writes the
    # members' (``save_members = "auto"``; ``plan.keep_members``) so that ``attnflow plot`` draws them again
    figures_read_members: Callable[[Config], bool] = field(default=lambda config: True)

    def __post_init__(self) -> None:
        if self.run is not None and (self.keys is None or self.memory is None):
            raise ValueError(
                f"experiment {self.name!r} has a runner of its own: it declares the keys it reads "
                "(keys=...) and the memory a run holds (memory=...), which preflight checks"
            )
        if self.keys is not None:
            object.__setattr__(self, "keys", tuple(self.keys))

    def own_values(self) -> dict[str, set]:
        """Per key, the values this experiment sets itself (its defaults and its quick overrides)."""
        from .config import KEYS

        out: dict[str, set] = {}
        for layer in (self.defaults, self.quick):
            for name, value in layer.items():
                out.setdefault(name, set()).add(KEYS[name].coerce(value))
        return out

    def describe(self, config, members: int) -> str:
        """The report's account of what a run of ``config`` computed (before its wall time)."""
        if self.headline is not None:
            return self.headline(config)
        return (
            f"{members} member(s), n = {config.n}, d = {list(config.d)}, {len(config.beta)} β value(s), "
            f"t1 = {config.t1:g}, {config.solver}"
        )

    def check(self, config) -> None:
        """Refuse (ConfigError) a configuration this experiment does not run as given: a key its run does
        not read (``preflight.check_keys_read``), β < 0 where its theory is of β ≥ 0, and its own refusals
        (``requires``)."""
        preflight.check_keys_read(config, self)
        negative = [b for b in config.beta if b < 0]
        if negative and not self.negative_beta:
            able = ", ".join(name for name, e in EXPERIMENTS.items() if e.negative_beta)
            raise ConfigError(
                f"experiment {self.name!r} compares with a theory of beta ≥ 0 (got beta = "
                f"{negative[0]:g}); beta < 0 runs in: simulate{', ' + able if able else ''}"
            )
        if self.requires is not None:
            self.requires(config)
        if self.run is None and config.save_members == "no" and self.figures_read_members(config):
            raise ConfigError(
                f"experiment {self.name!r} draws its figures from each member's statistics, which save_members = "
                '"no" would not write (attnflow plot could not draw them again): leave it at "auto" or set "yes"'
            )

    def theory_checks(self, result: RunResult) -> list[Check]:
        """The run's theory checks (``checks``), each reported as not applicable (``Check.not_applicable``) where the
        run sets a model key away from this experiment's own model (``changed_model_keys``): they hold for it only.
        A configuration of one's own (``simulate``, a TOML file of a model of one's own) has none to judge."""
        checks = self.checks(result)
        changed = changed_model_keys(result.config, self) if self.name in EXPERIMENTS else []
        if not changed:
            return checks
        why = f"not applicable: the theory is of {self.name}'s own model, and this run sets {', '.join(changed)}"
        return [Check.not_applicable(c.name, c.expected, why) for c in checks]

    def statistics_groups(self, config) -> tuple[str, ...]:
        """The groups of statistics a run of ``config`` computes: its ``statistics`` key and what this
        experiment's figures and checks read."""
        return plan.statistics_groups(config, self.needs(config))

    def execute(self, config, *, progress: bool | None = None) -> RunResult:
        """Run ``config``: the experiment's own runner, or the particle ensemble computing, besides its
        ``statistics``, what the experiment reads."""
        preflight.check(config, experiment=self)
        with compilations.record() as compiled:  # every program the run compiles, for summary.json
            if self.run is not None:
                result = self.run(config, progress=progress)
            else:
                result = runner.run(config, progress=progress, needs=self.needs(config), checked=True)
        result.compilations = compiled.summary()
        return result


EXPERIMENTS: dict[str, Experiment] = {}
"""The built-in experiments by name, in the order ``attnflow list`` shows them."""


def register(experiment: Experiment) -> Experiment:
    """Add ``experiment`` to :data:`EXPERIMENTS` (under its name) and return it."""
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def get(name: str) -> Experiment:
    """The built-in experiment ``name``; ValueError naming the closest one otherwise."""
    if name not in EXPERIMENTS:
        close = difflib.get_close_matches(name, EXPERIMENTS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown experiment {name!r}{hint} (built-in: {', '.join(EXPERIMENTS)})")
    return EXPERIMENTS[name]


def changed_model_keys(config, experiment: Experiment) -> list[str]:
    """The model keys (``config.keys.model_keys``: every key declared to change the model) whose values differ
    from the experiment's, so that its theory checks, which hold for its own model, do not apply."""
    from .config import KEYS
    from .config.keys import model_keys

    out = []
    for key in model_keys():
        expected = KEYS[key].coerce(experiment.defaults[key]) if key in experiment.defaults else KEYS[key].default
        if config[key] != expected:
            out.append(f"{key} = {config[key]!r}")
    return out
