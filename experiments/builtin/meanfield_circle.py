"""The ``meanfield-circle`` experiment: the density of infinitely many tokens on the circle.

One run solves the continuity equation ∂_t ρ + ∂_θ(ρ X[ρ]) = 0 of SA or USA (docs/model.md §1.4, §1.6;
``solvers/circle_meanfield.py``) for every β of the configuration and ``seeds`` initial densities
ρ0 = (1 + ε Σ_{k=1}^{16} cos(kθ + φ_k))/2π (ε = ``perturbation``, phases φ_k drawn from seed + s),
on a grid of 2·``modes`` points up to t1. Around it:

* growth rates: the same starts with ε = 1e-8, over one e-folding time of the fastest mode; the
  slopes of log|c_k(t)| for k = 1…5 against k² I_k(β)/(β I_0(β)) (SA) or k² I_k(β)/β (USA),
  docs/model.md §3;
* particles: ``particle_counts`` tokens sampled i.i.d. from the density at the onset of clustering
  (the first save time at which every member's density deviates from uniform by 50 %) and moved by
  ``simulate`` with ``Circle`` (``solver``, ``dt``) up to t1; the W1 distance between their empirical
  measure and the density at t1 should fall like n^{−1/2}. From the nearly uniform start itself the
  sampling noise would be amplified by the instability as much as the perturbation ε is, so the
  comparison would need n ≫ ε^{−2}.

Statistics, with dimensions (d, beta, seed, time[, theta]): ``density`` on the grid, ``mass``,
``min_density`` (relative to the maximum), ``energy`` and ``normalized_energy`` (the n → ∞ limits of the
particle ones), ``mean_inner_product`` = |∫ e^{iθ} ρ|² and ``n_clusters`` (arcs where ρ > 2/2π);
``growth_rate`` (d, beta, seed, mode) and ``w1`` (d, beta, seed, particles).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...particles import Circle
from ...particles.models import MODELS
from ...particles.modes import fastest_rate
from ...solvers import circle_meanfield as mf
from ...solvers import simulate
from ...solvers.spectral_steps import check_horizon
from ..analysis import particle_convergence_check
from ..config import ConfigError
from ..registry import Check, Experiment, Figures, register
from ..run.field_config import simulate_arguments
from ..run.runner import STAT_DIMENSIONS, RunResult, save_times

GROWTH_MODES = 5  # the modes k = 1 … 5 whose growth rates are measured
GROWTH_AMPLITUDE = 1e-8
ONSET = 0.5  # particles start where max |2πρ − 1| first reaches this
_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(density=_DIMS + ["time", "theta"], growth_rate=_DIMS + ["mode"], w1=_DIMS + ["particles"])


def run(config, *, progress=None) -> RunResult:
    """The mean-field run of ``config`` (see the module docstring) as a RunResult."""
    import time

    start = time.perf_counter()
    ts = save_times(config)
    betas = np.asarray(config.beta, dtype=float)
    nb, seeds, T = len(betas), config.seeds, len(ts)
    beta_m = np.repeat(betas, seeds)
    seed_m = np.tile(config.seed + np.arange(seeds), nb)
    rho0 = np.stack([mf.perturbed_uniform(s, config.modes, config.perturbation) for s in seed_m])
    sol = mf.meanfield_circle(rho0, beta_m, config.t1, ts=ts, model=config.model, rtol=config.rtol, atol=config.atol)
    rho = sol.rho  # (B, T, N)

    # linear regime: tiny perturbations over one e-folding time of each member's fastest mode
    fastest = mf.growth_rates(np.arange(1, config.modes), beta_m[:, None], config.model).max(axis=1)
    window = np.linspace(0.0, 1.0, T)[None] / fastest[:, None]
    tiny = np.stack([mf.perturbed_uniform(s, config.modes, GROWTH_AMPLITUDE) for s in seed_m])
    lin = mf.meanfield_circle(tiny, beta_m, float(window.max()), ts=window, model=config.model, rtol=1e-12, atol=1e-16)
    logs = np.log(np.abs(lin.coefficients[..., 1 : GROWTH_MODES + 1]))  # (B, T, K)
    # least-squares slope of log|ĉ_k| on t, every member and mode at once
    dt_ = window - window.mean(axis=1, keepdims=True)
    rates = np.einsum("bt,btk->bk", dt_, logs - logs.mean(axis=1, keepdims=True)) / np.sum(dt_**2, axis=1)[:, None]

    c = sol.coefficients
    stats = {
        "density": rho,
        "mass": sol.mass,
        "min_density": rho.min(axis=-1) / rho.max(axis=-1),
        "energy": sol.energy(),
        "normalized_energy": sol.energy(normalized=True),
        "mean_inner_product": np.abs(c[..., 1]) ** 2,
        "n_clusters": sol.clusters(),
        "growth_rate": rates,
    }
    if config.particle_counts:
        stats["w1"] = _particle_w1(config, sol, beta_m, seed_m)

    def shaped(a):
        return a.reshape((1, nb, seeds) + a.shape[1:])

    stats = {k: shaped(np.asarray(v)) for k, v in stats.items()}
    steps = shaped(np.asarray(sol.steps))
    return RunResult(
        config=config,
        ts=ts,
        stats=stats,
        xs=None,
        steps=steps,
        t_event=np.full(steps.shape, np.inf),
        wall_time_s=time.perf_counter() - start,
    )


def requires(config) -> None:
    """SA or USA, β > 0, more modes than the 16 perturbed, ρ0 > 0, and a horizon the adaptive steps resolve."""
    if not MODELS[config.model].circle:
        raise ConfigError(
            f"meanfield-circle solves SA or USA on the circle: model must be 'sa', 'usa' or "
            f"'usa-rescaled', got {config.model!r}"
        )
    if 16 >= config.modes:
        raise ConfigError(f"meanfield-circle perturbs the modes k ≤ 16: modes must be > 16, got {config.modes}")
    if not 0 < config.perturbation * 16 < 1:
        raise ConfigError(f"perturbation ε must lie in (0, 1/16) so that ρ0 > 0, got {config.perturbation:g}")
    if any(b <= 0 for b in config.beta):
        raise ConfigError("meanfield-circle needs β > 0")
    try:
        check_horizon(config.t1, fastest_rate(config.beta, 2, model=config.model), "meanfield-circle")
    except ValueError as err:
        raise ConfigError(str(err)) from None


def memory(config) -> dict:
    """The densities at every save time (grid, coefficients, statistics), the initial perturbations, and the
    particles' n × n pairwise terms in angles."""
    members, grid = len(config.beta) * config.seeds, 2 * config.modes
    times = len(config.save_times) or config.n_save
    largest = max(config.particle_counts, default=0)
    return {
        "the densities at every save time [modes, n_save, seeds, beta]": 8 * 6 * members * times * grid,
        "the initial perturbations [modes]": 8 * 16 * grid * 3,
        "the particles' pairwise attention [particle_counts, seeds, beta]": 8 * 3 * members * largest**2,
    }


def onset_index(ts: np.ndarray, density: np.ndarray) -> int | None:
    """First save index at which every member's density (…, T, N) deviates from uniform by ONSET."""
    reached = np.abs(2 * np.pi * density - 1).max(axis=-1).reshape(-1, len(ts)) >= ONSET
    if not reached.any(axis=1).all():
        return None
    first = int(np.max(np.argmax(reached, axis=1)))
    return first if first < len(ts) - 1 else None


def _particle_w1(config, sol, beta_m, seed_m) -> np.ndarray:
    """(members, len(particle_counts)): W1(μ_n(t1), ρ(t1)) for particles sampled at the onset of clustering."""
    i0 = onset_index(sol.ts, sol.rho)
    if i0 is None:
        return np.full((len(beta_m), len(config.particle_counts)), np.nan)
    t0 = float(sol.ts[i0])
    # the sampled particles keep their float64 angles and are compared at t1 only: the method alone
    arguments = simulate_arguments(config, jnp.asarray([0.0, config.t1 - t0]), method_only=True)
    field = Circle(jnp.asarray(beta_m), config.model)
    out = np.empty((len(beta_m), len(config.particle_counts)))
    for j, n in enumerate(config.particle_counts):
        theta0 = np.stack([mf.sample_density(1_000_003 * int(s) + n, sol.rho[m, i0], n) for m, s in enumerate(seed_m)])
        particles = simulate(field, jnp.asarray(theta0[..., None]), config.t1 - t0, **arguments)
        final = np.asarray(particles.xs)[:, -1, :, 0]
        out[:, j] = [mf.w1_circle(final[m], sol.rho[m, -1]) for m in range(len(beta_m))]
    return out


# -- figures and checks ----------------------------------------------------------------------------


def figures(result: RunResult) -> dict:
    """The density over time per β, the growth rates against the theory, and W1 against the number of particles."""
    c = result.config
    out: Figures = {}
    for j, beta in enumerate(c.beta):
        tag = f"{beta:g}".replace(".", "p")
        out[f"density_beta{tag}"] = lambda p, j=j, beta=beta: density_heatmap(
            result.ts, result.stats["density"][0, j, 0], beta=beta, model=c.model, path=p
        )
    measured = result.stats["growth_rate"][0]  # (β, seeds, K)
    out["growth_rates"] = lambda p: growth_rates_plot(np.asarray(c.beta), measured, model=c.model, path=p)
    if "w1" in result.stats and c.particle_counts:
        i0 = onset_index(result.ts, result.stats["density"])
        out["w1_convergence"] = lambda p: w1_plot(
            np.asarray(c.particle_counts),
            result.stats["w1"][0],
            t=result.ts[-1],
            t_start=None if i0 is None else result.ts[i0],
            model=c.model,
            path=p,
        )
    return out


def checks(result: RunResult) -> list[Check]:
    """Growth rates against the linear theory, mass, positivity, the energy, the clusters and W1 against n."""
    c, s = result.config, result.stats
    out = []
    theory = mf.growth_rates(np.arange(1, GROWTH_MODES + 1), np.asarray(c.beta)[:, None], c.model)  # (β, K)
    err = float(np.max(np.abs(s["growth_rate"][0] / theory[:, None, :] - 1)))
    formula = {"sa": "k² I_k(β)/(β I_0(β))", "usa": "k² I_k(β)/β"}.get(c.model, "k² e^{−β} I_k(β)/β")
    out.append(
        Check(
            f"growth rates of modes k = 1…{GROWTH_MODES} vs {formula}", "relative error ≤ 1%", f"{err:.1e}", err <= 0.01
        )
    )
    drift = float(np.max(np.abs(s["mass"] - 1)))
    out.append(Check("mass ∫ρ dθ conserved", "|mass − 1| ≤ 1e-12", f"{drift:.1e}", drift <= 1e-12))
    low = float(np.min(s["min_density"]))
    out.append(Check("density non-negative", "min ρ / max ρ ≥ −1e-6", f"{low:.1e}", low >= -1e-6))
    worst = float(np.min(np.diff(s["normalized_energy"], axis=-1)))
    out.append(
        Check("energy E[ρ] non-decreasing (gradient flow)", "min increment ≥ −1e-12", f"{worst:.1e}", worst >= -1e-12)
    )
    for j, beta in enumerate(c.beta):
        k_fast = int(np.argmax(mf.growth_rates(np.arange(1, c.modes), beta, c.model))) + 1
        final = float(np.median(s["n_clusters"][0, j, :, -1]))
        out.append(
            Check(
                f"clusters at t = {result.ts[-1]:g}, β = {beta:g} (median over seeds)",
                f"the fastest mode k = {k_fast}",
                f"{final:g}",
                final == k_fast,
            )
        )
    if "w1" in s and len(c.particle_counts) >= 2:
        out.append(particle_convergence_check(c.particle_counts, s["w1"][0], metric="W1", t=result.ts[-1]))
    return out


# -- plots --------------------------------------------------------------------------------------------


_MODEL_NAMES = {"sa": "SA", "usa": "USA", "usa-rescaled": "USA (rescaled time)"}


def density_heatmap(ts, density, *, beta=None, model="sa", title=None, path=None):
    """ρ(θ, t) of one member as a heat map: time horizontal, angle θ vertical, density in colour on a
    logarithmic scale (the gaps between clusters empty out exponentially). The angle axis spans one
    turn starting at the emptiest angle of the last finite density, so no cluster is cut in two."""
    from matplotlib import colors as mcolors

    from .. import plots
    from ..plots import style

    ts = style.axis_values("ts", ts)
    density = style.as_array("density", density, "(T, N)", 2)
    if density.shape[0] != ts.shape[0]:
        raise ValueError(f"density must have shape (T, N) with T = len(ts) = {ts.shape[0]}; got {density.shape}")
    N = density.shape[1]
    rows = np.flatnonzero(np.all(np.isfinite(density), axis=1))
    shift = int(np.argmin(density[rows[-1]])) if rows.size else 0
    density = np.roll(density, -shift, axis=1)
    edges = 2 * np.pi * (np.arange(N + 1) + shift - 0.5) / N
    finite = density[np.isfinite(density)]
    vmax = float(finite.max()) if finite.size else 1.0
    vmin = max(float(finite[finite > 0].min()) if np.any(finite > 0) else vmax * 1e-3, vmax * 1e-3)
    shown = np.ma.masked_invalid(np.clip(density, vmin, None))

    fig = style.new_figure(7.2, 4.2)
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(
        style.centers_to_edges(ts),
        edges,
        shown.T,
        cmap=plots.SEQUENTIAL_CMAP,
        norm=mcolors.LogNorm(vmin=vmin, vmax=vmax),
        shading="flat",
        rasterized=True,
    )
    ax.set_xlim(ts[0], ts[-1])
    ax.set_ylim(edges[0], edges[-1])
    style.angle_ticks(ax, edges[0], edges[-1])
    ax.set_xlabel(plots.TIME_LABEL)
    # one period, cut at the emptiest angle of the last time so that no cluster is split
    ax.set_ylabel(r"angle $\theta$ (rad, mod $2\pi$)")
    head = f"Mean-field density on the circle, {_MODEL_NAMES.get(model, model)}"
    ax.set_title(style.title_text(head, title, beta=beta))
    clipped = bool(np.any(finite < vmin))
    cbar = fig.colorbar(mesh, ax=ax, aspect=30, pad=0.02, extend="min" if clipped else "neither")
    if vmin < vmax:
        style.plain_log_colorbar(cbar, vmin, vmax)
    cbar.set_label(r"density $\rho(\theta, t)$", fontsize=plots.LABEL_SIZE)
    uniform = 1 / (2 * np.pi)
    if vmin < uniform < vmax:
        cbar.ax.axhline(uniform, color="white", linewidth=1.0)
        cbar.ax.annotate(
            r"$1/2\pi$",
            (0, uniform),
            xycoords=("axes fraction", "data"),
            xytext=(-3, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=plots.TICK_SIZE,
        )
    return style.finish(fig, path)


def growth_rates_plot(betas, measured, *, model="sa", title=None, path=None):
    """Measured growth rates (markers; mean over seeds) of the modes k = 1…K at the uniform density
    against the linear theory (lines), one colour per β. measured (len(betas), seeds, K)."""
    import matplotlib as mpl
    from matplotlib.lines import Line2D

    from .. import plots
    from ..plots import style

    betas = np.asarray(betas, dtype=float)
    measured = np.asarray(measured, dtype=float)
    K = measured.shape[-1]
    k = np.arange(1, K + 1)
    fig = style.new_figure(6.2, 4.0)
    ax = fig.add_subplot()
    cmap = mpl.colormaps[plots.SEQUENTIAL_CMAP]
    for j, beta in enumerate(betas):
        color = cmap(0.15 + 0.7 * j / max(len(betas) - 1, 1)) if len(betas) > 1 else plots.DATA_COLOR
        theory = mf.growth_rates(k, beta, model)
        ax.plot(k, theory, color=color, linewidth=1.4, zorder=2)
        ax.plot(
            k,
            np.nanmean(measured[j], axis=0),
            linestyle="none",
            marker="o",
            markersize=6,
            markerfacecolor="none",
            markeredgewidth=1.4,
            color=color,
            zorder=3,
            label=rf"$\beta = {beta:g}$",
        )
    formula = (
        r"$k^2 I_k(\beta)/(\beta I_0(\beta))$"
        if model == "sa"
        else r"$k^2 I_k(\beta)/\beta$"
        if model == "usa"
        else r"$k^2 e^{-\beta} I_k(\beta)/\beta$"
    )
    handles = [
        Line2D([], [], color="0.3", linewidth=1.4, label=f"theory {formula}"),
        Line2D(
            [],
            [],
            color="0.3",
            linestyle="none",
            marker="o",
            markerfacecolor="none",
            markeredgewidth=1.4,
            label="measured (PDE, slope of $\\log|\\hat\\rho_k|$)",
        ),
    ]
    handles += ax.get_legend_handles_labels()[0] if len(betas) > 1 else []
    if np.nanmax(measured) / max(np.nanmin(np.abs(measured)), 1e-300) > 100:
        ax.set_yscale("log")
    ax.set_xticks(k)
    ax.set_xlabel(r"Fourier mode $k$")
    ax.set_ylabel(r"growth rate $\lambda_k$ (1/time)")
    ax.set_title(
        style.title_text(
            f"Linear growth at the uniform density, {_MODEL_NAMES.get(model, model)}",
            title,
            beta=betas[0] if len(betas) == 1 else None,
        )
    )
    ax.legend(handles=handles, frameon=False, loc="best")
    style.despine(ax)
    return style.finish(fig, path)


def w1_plot(counts, w1, *, t=None, t_start=None, model="sa", title=None, path=None):
    """W1 between n particles and the density against n (log-log): every member (dots), their mean
    (markers) and the fitted power law. w1 (…, len(counts)); t_start: when the particles were sampled."""
    from matplotlib import ticker

    from .. import plots
    from ..plots import style

    counts = np.asarray(counts, dtype=float)
    w1 = np.asarray(w1, dtype=float).reshape(-1, len(counts))
    order = np.argsort(counts)
    counts, w1 = counts[order], w1[:, order]
    mean = np.nanmean(w1, axis=0)
    fig = style.new_figure(5.6, 4.0)
    ax = fig.add_subplot()
    for row in w1:
        ax.plot(counts, row, linestyle="none", marker=".", color=plots.BAND_COLOR, markersize=6, zorder=2)
    ax.plot(
        counts,
        mean,
        linestyle="none",
        marker="o",
        color=plots.DATA_COLOR,
        markersize=7,
        zorder=3,
        label="mean over members",
    )
    if np.all(np.isfinite(mean)) and len(counts) >= 2:
        alpha, logc = np.polyfit(np.log(counts), np.log(mean), 1)
        grid = np.geomspace(counts[0], counts[-1], 50)
        ax.plot(
            grid,
            np.exp(logc) * grid**alpha,
            color=plots.THEORY_COLOR,
            linewidth=1.4,
            zorder=2,
            label=rf"fit $\propto n^{{{alpha:.2f}}}$",
        )
        ax.plot(
            grid,
            mean[0] * (grid / counts[0]) ** -0.5,
            color="0.5",
            linewidth=1.0,
            linestyle=(0, (4, 3)),
            zorder=1,
            label=r"$\propto n^{-1/2}$",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(counts, [f"{n:g}" for n in counts])
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.2g"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel(r"particles $n$")
    ax.set_ylabel(r"$W_1(\mu_n(t), \rho(t))$ (rad)")
    head = title if title is not None else f"Particles converge to the density, {_MODEL_NAMES.get(model, model)}"
    when = [f"sampled from $\\rho$ at $t = {t_start:.3g}$"] if t_start is not None else []
    when += [f"compared at $t = {t:.3g}$"] if t is not None else []
    ax.set_title(head + ("\n" + ", ".join(when) if when else ""))
    ax.legend(frameon=False)
    style.despine(ax)
    return style.finish(fig, path)


EXPERIMENT = register(
    Experiment(
        "meanfield-circle",
        "the n → ∞ density on the circle (spectral PDE solver): growth rates, clusters, particles converging in W1",
        "[GLPR] (3.1)–(3.4), docs/model.md §3",
        # t1: the clusters concentrate like e^{-t}; 2·modes grid points resolve them until about then
        dict(
            experiment="meanfield-circle",
            model="sa",
            d=2,
            beta=[5.0],
            seeds=4,
            t1=12.5,
            n_save=126,
            modes=1024,
            perturbation=1e-3,
            rtol=1e-8,
            atol=1e-10,
            solver="rk4",
            dt=0.05,
            particle_counts=[64, 256, 1024, 4096],
            save_states="no",
        ),
        dict(modes=256, t1=11.5, n_save=47, particle_counts=[64, 256, 1024]),
        figures,
        checks,
        run=run,
        keys=(
            "model",
            "beta",
            "seeds",
            "seed",
            "t1",
            "n_save",
            "save_times",
            "save_spacing",
            "log_decades",
            "modes",
            "perturbation",
            "rtol",
            "atol",
            "particle_counts",
            "solver",
            "dt",
            "max_steps",
        ),
        memory=memory,
        requires=requires,
    )
)
