"""A configuration of one's own (``experiment = "simulate"``): its trajectories and cluster counts.

Not in the registry of built-in experiments: ``builtin.resolve`` returns it for the name "simulate"
(``attnflow run simulate --set KEY=VALUE``, ``attnflow list`` shows it last), and its run computes its
``statistics`` and nothing more.
"""

from __future__ import annotations

from ..analysis import plots
from ..registry import Experiment, Figures
from ..run.runner import RunResult


def figures(result: RunResult) -> dict:
    """The first member's trajectories for each d (when the states were kept: ``trajectories``, or
    ``trajectories_d{d}`` for several d) and the cluster counts (when computed)."""
    c = result.config
    out: Figures = {}
    # a run of one's own computes only its ``statistics``: draw what it has
    clustered = "n_clusters" in result.stats
    if result.has_states:
        for k, d in enumerate(c.d):
            out["trajectories" if len(c.d) == 1 else f"trajectories_d{d}"] = lambda p, k=k, d=d: plots.trajectories(
                result.ts,
                result.states(d)[0, 0],
                n_clusters=result.stats["n_clusters"][k, 0, 0] if clustered else None,
                beta=c.beta[0],
                path=p,
            )
    if clustered:
        counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
        out["cluster_counts"] = lambda p: plots.cluster_count_vs_time(result.ts, counts, n=c.n, d=c.d[0], path=p)
    return out


GENERIC = Experiment(
    "simulate",
    "a configuration of your own: every key at its default (attnflow list --keys), "
    "changed with --set KEY=VALUE; no theory checks",
    "",
    dict(experiment="simulate"),
    {},
    figures,
    needs=lambda config: (),
    negative_beta=True,
)
