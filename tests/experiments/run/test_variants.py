"""Every variant: reachable from configuration keys, batched in one compiled call, exact at layer switches."""

import jax
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import field_config as models
from attnflow.experiments.run import runner
from attnflow.particles.models import MODELS

N, D = 6, 4
X0 = af.init.uniform(3, N, D)
BETAS = np.array([0.5, 2.0, 5.0])

# each entry: --set overrides that select a variant (all with fixed-step rk4 so noise fits too)
VARIANTS = {
    **{name: [f"model={name}"] for name in MODELS},  # every attention model of the table
    "multi-head": ["heads=2"],
    "causal": ["mask=causal"],
    "feed-forward": ["ff_width=5", "ff_activation=tanh"],
    "pre-ln": ["norm=pre"],
    "peri-ln": ["norm=peri"],
    "ngpt": ["norm=ngpt", "ngpt_alpha=0.5"],
    "no-ln": ["norm=none"],
    "ginibre": ["weights=ginibre"],
    "wigner-psd": ["weights=wigner-psd"],
    "layer-wise": ["weights=ginibre-v-qk", "layer_tau=0.4"],
    "repulsive": ["value=-identity"],
    "noise": ["noise=0.4"],
}


def config(extra):
    return load_config(
        None, [f"n={N}", f"d={D}", "solver=rk4", "dt=0.05", "t1=1.0", "seeds=1", "progress=false", *extra]
    )


def run(field, x0, key=None):
    return af.simulate(field, x0, 1.0, ts=np.linspace(0, 1, 5), solver="rk4", dt=0.05, key=key)


@pytest.mark.slow
@pytest.mark.parametrize("name", [v for v in VARIANTS if v != "noise"])
def test_every_variant_runs_batched_in_one_call_and_equals_its_members(name):
    c = config(VARIANTS[name])
    seeds = np.array([0, 1, 2])
    sol = run(runner.build_field(c, BETAS, seeds, D), np.stack([X0] * 3))  # as the runner calls it
    assert sol.xs.shape == (3, 5, N, D)
    for m in range(3):
        one = run(runner.build_field(c, BETAS[m : m + 1], seeds[m : m + 1], D), X0[None])
        # vmapped members and single runs execute the same arithmetic up to reassociation
        np.testing.assert_allclose(sol.xs[m], one.xs[0], atol=1e-11, err_msg=name)
    if c.norm in ("post", "ngpt"):
        assert float(af.particles.norm_error(sol.xs)) < 1e-12  # stays on the sphere


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_noisy_ensembles_are_reproducible_and_members_independent():
    c = config(VARIANTS["noise"])
    field = runner.build_field(c, BETAS, np.array([0, 1, 2]), D)
    a, b, other = run(field, X0, key=7), run(field, X0, key=7), run(field, X0, key=8)
    np.testing.assert_array_equal(a.xs, b.xs)
    assert not np.allclose(a.xs[:, -1], other.xs[:, -1])
    # members draw their own Brownian paths: same β, same start, different endpoints
    same = runner.build_field(c, np.full(3, 2.0), np.zeros(3, int), D)
    ends = run(same, X0, key=7).xs[:, -1]
    assert not np.allclose(ends[0], ends[1])
    assert float(af.particles.norm_error(a.xs)) < 1e-12


def test_variant_keys_build_the_fields_they_name():
    def field(*extra):
        return runner.build_field(config(list(extra)), np.array([1.0]), np.array([0]), D)

    assert isinstance(field("heads=2"), af.MultiHead)
    assert isinstance(field("model=sinkhorn"), af.Sinkhorn)
    assert isinstance(field("model=hardmax"), af.Hardmax)
    assert isinstance(field("norm=pre"), af.PreLN) and field("norm=pre").geometry == "euclidean"
    assert isinstance(field("norm=ngpt"), af.NGPT)
    assert isinstance(field("noise=0.5"), af.Noisy)
    assert isinstance(field("weights=ginibre", "layer_tau=0.5"), af.LayerWise)
    s = field("ff_width=3")
    assert isinstance(s, af.Sum) and isinstance(s.terms[1], af.FeedForward)
    v = field("value=-identity")
    np.testing.assert_array_equal(np.asarray(v.V), -np.eye(D))
    assert field("mask=causal").mask == "causal"


def test_members_with_the_same_seed_share_random_weights():
    c = config(["weights=ginibre"])
    f = runner.build_field(c, np.array([1.0, 3.0, 1.0]), np.array([4, 4, 5]), D)
    # square Ginibre Q, K enter as K = QᵀK (test_square_query_and_key_enter_as_their_product)
    np.testing.assert_array_equal(f.K[0], f.K[1])
    np.testing.assert_array_equal(f.V[0], f.V[1])
    assert not np.allclose(f.K[0], f.K[2])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["model=sinkhorn", "mask=causal"], "model 'sinkhorn' takes no mask"),
        (["heads=3"], "heads must divide d: heads = 3 does not divide d = 4"),
        (["model=hardmax", "heads=2"], "model 'hardmax' takes no heads"),
        (["weights=ginibre", "value=-identity"], "use weights = 'repulsive'"),
        (["noise=0.5", "solver=tsit5"], "noise > 0 integrates an SDE with fixed steps"),
        (["norm=pre", "solver=cg3"], "only rotates on the sphere"),
        (["weights_file=w.npz"], "weights_file needs layer_tau > 0"),
        (["norm=layer"], "norm must be one of"),
    ],
)
def test_meaningless_combinations_are_refused(extra, message):
    with pytest.raises(ConfigError, match=message):
        config(extra)


def test_every_variant_key_is_listed():
    from attnflow.experiments.config import describe_keys

    text = describe_keys()
    for key in (
        "heads",
        "mask",
        "norm",
        "ngpt_alpha",
        "weights",
        "value",
        "layer_tau",
        "weights_file",
        "ff_width",
        "ff_activation",
        "noise",
        "sinkhorn_tol",
    ):
        assert key in text
    assert all(f"{name}, " in text for name in models.MODELS)


def _layerwise(tau=0.25):
    inner = af.SA(2.0)
    return af.LayerWise.redrawn(inner, jax.random.key(1), "ginibre", D, 3, tau), tau


def test_fixed_steps_switch_layers_exactly():
    # two layers of different weights: stepping across τ must equal running layer 0 to τ, then layer 1
    field, tau = _layerwise()
    whole = af.simulate(field, X0, 2 * tau, solver="rk4", dt=0.03)
    first = af.simulate(field.layer(0), X0, tau, solver="rk4", dt=0.03)
    second = af.simulate(field.layer(1), first.x_final, 2 * tau, t0=tau, solver="rk4", dt=0.03)
    np.testing.assert_allclose(whole.x_final, second.x_final, atol=1e-12)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_adaptive_steps_stop_at_layer_switches():
    field, tau = _layerwise()
    tight = dict(solver="tsit5", rtol=1e-11, atol=1e-12)
    whole = af.simulate(field, X0, 2 * tau, **tight)
    first = af.simulate(field.layer(0), X0, tau, **tight)
    second = af.simulate(field.layer(1), first.x_final, 2 * tau, t0=tau, **tight)
    # both runs restart at τ; the remaining difference is the tolerance
    np.testing.assert_allclose(whole.x_final, second.x_final, atol=1e-9)


def test_saves_at_layer_switches_are_not_duplicated():
    field, tau = _layerwise()
    ts = np.linspace(0, 3 * tau, 7)  # includes both switches
    sol = af.simulate(field, X0, 3 * tau, ts=ts, solver="rk4", dt=0.05)
    assert sol.xs.shape == (7, N, D)


@pytest.mark.slow
def test_circle_key_runs_the_angle_form_and_matches_the_plane():
    # the same run in angles (circle = true) and in the plane: same states to the tolerance
    base = [
        "n=8",
        "d=2",
        "beta=[1.0, 6.0]",
        "seeds=2",
        "t1=5.0",
        "n_save=11",
        "rtol=1e-10",
        "atol=1e-12",
        "progress=false",
        "save_states=yes",
    ]
    plane = runner.run(load_config(None, base))
    angles = runner.run(load_config(None, base + ["circle=true"]))
    np.testing.assert_allclose(angles.states(2), plane.states(2), atol=1e-8)
    np.testing.assert_array_equal(angles.stats["n_clusters"], plane.stats["n_clusters"])
    with pytest.raises(ConfigError, match="circle = 'yes' is the angle form"):
        load_config(None, base + ["circle=true", "heads=2"])


@pytest.mark.slow
def test_circle_auto_runs_d_2_in_angles_where_the_run_allows_it():
    # fig3's circle = 'auto': d = 2 members of plain SA/USA move in angles, every other part of the
    # run in the plane or on the sphere, and a variant key turns it off instead of being refused
    base = [
        "n=8",
        "d=[2, 3]",
        "beta=[1.0, 6.0]",
        "seeds=3",
        "t1=6.0",
        "n_save=13",
        "solver=rk4",
        "dt=0.05",
        "dense=true",
        "statistics=clustered",
        "delta=0.05",
        "progress=false",
    ]
    auto = load_config(None, base + ["circle=auto"])
    assert [models.in_angles(auto, d) for d in auto.d] == [True, False]
    assert isinstance(runner.build_field(auto, np.ones(2), np.arange(2), 2), af.Circle)
    assert isinstance(runner.build_field(auto, np.ones(2), np.arange(2), 3), af.SA)
    for extra in (["mask=causal"], ["heads=2", "d=2"], ["solver=cg3", "dense=false"], ["model=sinkhorn"]):
        assert not models.in_angles(load_config(None, base + ["circle=auto", *extra]), 2), extra
    with pytest.raises(ConfigError, match="circle = 'yes' is the angle form.*'auto'"):
        load_config(None, base + ["circle=yes"])
    assert load_config(None, base[:-1] + ["d=2", "circle=true"]).circle == "yes"
    assert load_config(None, base + ["circle=false"]).circle == "no"
    with pytest.raises(ConfigError, match="circle must be one of 'auto', 'yes', 'no'"):
        load_config(None, base + ["circle=sometimes"])
    # the angle form at RK4 dt = 0.05 and the planar run give the same clustered fraction at every save:
    # their states differ by ~1e-9 and no pair sits that close to the threshold
    angles, plane = (runner.run(load_config(None, base + [f"circle={c}"])) for c in ("auto", "no"))
    frac = angles.stats["clustered_fraction"]
    np.testing.assert_array_equal(frac, plane.stats["clustered_fraction"])
    # not a vacuous comparison: the members start apart and some, not all, gather into one cluster by t = 6
    assert np.all(frac[:, :, :, 0] < 1.0) and 0.0 < np.mean(frac[:, :, :, -1] == 1.0) < 1.0


@pytest.mark.parametrize("ensemble", ["ginibre", "ginibre-v-qk"])
def test_square_query_and_key_enter_as_their_product(ensemble):
    # ⟨Q x_i, K x_j⟩ = ⟨x_i, QᵀK x_j⟩: the run forms QᵀK once per member, from the same draws
    from attnflow.particles.fields import ensemble_axes
    from attnflow.particles.weights import sample_weights

    field = runner.build_field(config([f"weights={ensemble}"]), BETAS, np.array([0, 1, 2]), D)
    drawn = jax.vmap(lambda s: sample_weights(jax.random.key(s), D, ensemble))(np.array([0, 1, 2]))
    assert field.Q is None
    np.testing.assert_allclose(field.K, np.swapaxes(drawn["Q"], -1, -2) @ drawn["K"], rtol=1e-14, atol=1e-15)
    separate = af.SA(BETAS, drawn["Q"], drawn["K"], drawn["V"])
    x = np.stack([X0] * 3)
    velocity = jax.vmap(lambda f, y: f(0.0, y), in_axes=(ensemble_axes(field)[0], 0))
    np.testing.assert_allclose(
        velocity(field, x),
        jax.vmap(lambda f, y: f(0.0, y), in_axes=(ensemble_axes(separate)[0], 0))(separate, x),
        atol=1e-13,
    )
