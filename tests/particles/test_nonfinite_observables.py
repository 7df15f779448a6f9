"""Observables and energies of configurations holding NaN or inf, and the messages for bad β.

The rule under test: a configuration (the trailing (n, d) block) with a non-finite entry gets NaN
for every floating statistic and −1 for every count, while the other members of a batch keep
exactly the values they have alone; eagerly one RuntimeWarning says so, under jit and vmap none.
"""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af  # also enables float64
from attnflow.particles import models
from attnflow.particles.energy import energy, log_energy, normalized_energy
from attnflow.particles.models import MODELS
from attnflow.particles.observables import (
    cluster_labels,
    cluster_sizes,
    clustered_fraction,
    clustered_fraction_of_angles,
    clusters,
    inner_product_histogram,
    n_clusters,
    n_clusters_multi,
    order_parameter,
    pair_statistics,
    pair_summary,
)

DELTA = 1e-2
BAD = 1  # the member of the batch of three that holds the non-finite entry

# each observable: its name in the warning, and a function of one configuration or a batch of them
OBSERVABLES = {
    "clusters": lambda x: clusters(x, DELTA),
    "cluster_labels": lambda x: cluster_labels(x, DELTA),
    "n_clusters": lambda x: n_clusters(x, DELTA),
    "cluster_sizes": lambda x: cluster_sizes(x, DELTA),
    "n_clusters_multi": lambda x: n_clusters_multi(x, jnp.array([1e-6, DELTA, 3.0])),
    "clustered_fraction": lambda x: clustered_fraction(x, DELTA),
    "clustered_fraction_of_angles": lambda x: clustered_fraction_of_angles(x[..., :1] * 7.0, DELTA),
    "pair_statistics": pair_statistics,
    "pair_summary": lambda x: pair_summary(x, DELTA),
    "inner_product_histogram": lambda x: inner_product_histogram(x, 5),
    "order_parameter": order_parameter,
    "energy": lambda x: energy(x, 2.0),
    "normalized_energy": lambda x: normalized_energy(x, 2.0),
    "log_energy": lambda x: log_energy(x, 2.0),
}


def configurations(n=6, d=3, seed=0):
    """Three configurations of n points on S^{d-1}: two tight clusters each, so counts are not trivial."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 2, d))
    x = centres[:, np.arange(n) % 2] + 1e-3 * rng.normal(size=(3, n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def spoiled(value=np.nan, member=BAD, where=(2, 0)):
    x = configurations()
    x[(member,) + where] = value
    return x


def leaves(result) -> dict:
    """The arrays of a result (one array, a dict of them, or a ``Clusters``), by name."""
    if isinstance(result, tuple) and hasattr(result, "_asdict"):
        result = result._asdict()
    if not isinstance(result, dict):
        result = {"value": result}
    return {k: np.asarray(v) for k, v in result.items()}


def quietly(fn, *args):
    """``fn(*args)``, failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


def check_members(out: dict, x, transform=lambda fn: fn):
    """The bad member is NaN / −1 throughout; the others are exactly their values alone: those of
    the batch of the finite members through the same ``transform`` (jit, vmap: XLA may round a
    fused reduction differently from the eager one)."""
    for name, a in out.items():
        if np.issubdtype(a.dtype, np.floating):
            assert np.all(np.isnan(a[BAD])), (name, a[BAD])
        else:
            assert np.all(a[BAD] == -1), (name, a[BAD])
    good = np.array([i for i in range(x.shape[0]) if i != BAD])
    alone = leaves(quietly(transform(FN), x[good]))
    for name, a in out.items():
        np.testing.assert_array_equal(a[good], alone[name], err_msg=name)


FN = None  # the observable under test, for ``check_members``


@pytest.fixture(params=sorted(OBSERVABLES))
def observable(request):
    global FN
    FN = OBSERVABLES[request.param]
    yield request.param, FN
    FN = None


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_eager_marks_the_bad_member_and_warns_once(observable, value):
    name, fn = observable
    x = spoiled(value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = leaves(fn(x))
    messages = [str(w.message) for w in caught]
    assert len(caught) == 1 and caught[0].category is RuntimeWarning, messages
    assert re.search(rf"^{name}: 1 of 3 configurations holds non-finite entries \(NaN or inf\); its ", messages[0])
    # pointing at the caller's line, here
    assert caught[0].filename == __file__
    check_members(out, x)
    for i in (0, 2):  # and each one on its own, unbatched
        alone = leaves(quietly(FN, x[i]))
        for k, a in out.items():
            np.testing.assert_array_equal(a[i], alone[k], err_msg=k)


def test_pytest_warns(observable):
    name, fn = observable
    with pytest.warns(RuntimeWarning, match=rf"{name}: 1 of 3 configurations holds non-finite entries"):
        fn(spoiled())


def test_two_bad_members_are_counted(observable):
    name, fn = observable
    x = spoiled()
    x[2, 0, 0] = np.inf  # column 0: the angle of ``clustered_fraction_of_angles``
    with pytest.warns(RuntimeWarning, match=rf"{name}: 2 of 3 configurations hold non-finite entries .*their "):
        out = leaves(fn(x))
    for name_, a in out.items():
        bad = np.isnan(a[1:]) if np.issubdtype(a.dtype, np.floating) else a[1:] == -1
        assert np.all(bad), name_


def test_one_configuration(observable):
    name, fn = observable
    x = spoiled()[BAD]
    with pytest.warns(RuntimeWarning, match=rf"^{name}: the configuration holds non-finite entries .*; its "):
        out = leaves(fn(x))
    for name_, a in out.items():
        assert np.all(np.isnan(a)) if np.issubdtype(a.dtype, np.floating) else np.all(a == -1), name_


@pytest.mark.slow
def test_jit_gives_the_same_and_does_not_warn(observable):
    _, fn = observable
    x = spoiled(np.inf)
    out = leaves(quietly(jax.jit(fn), x))
    check_members(out, x, jax.jit)


@pytest.mark.slow
def test_vmap_gives_the_same_and_does_not_warn(observable):
    _, fn = observable
    x = spoiled()
    out = leaves(quietly(jax.vmap(fn), x))
    check_members(out, x, jax.vmap)
    out = leaves(quietly(jax.jit(jax.vmap(fn)), jnp.asarray(x)))
    check_members(out, x, lambda f: jax.jit(jax.vmap(f)))


def test_finite_input_does_not_warn(observable):
    _, fn = observable
    x = configurations()
    out = leaves(quietly(fn, x))
    for name_, a in out.items():
        assert np.all(np.isfinite(a)) and (np.issubdtype(a.dtype, np.floating) or np.all(a >= 0)), name_


def test_a_bad_member_is_bad_for_every_statistic_at_once():
    x = spoiled()

    def everything(x):
        return clusters(x, DELTA), clustered_fraction(x, DELTA), energy(x, 2.0), pair_summary(x, DELTA)

    for fn in (everything, jax.jit(everything)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            c, frac, e, summary = fn(x)
        assert int(c.count[BAD]) == -1 and np.all(np.asarray(c.labels[BAD]) == -1)
        assert np.isnan(frac[BAD]) and np.isnan(e[BAD])
        assert int(summary["n_clusters"][BAD]) == -1 and np.isnan(summary["clustered_fraction"][BAD])
        good = np.array([0, 2])
        # the good members agree with each other's statistics: one cluster pair count, fraction, energy
        assert np.all(np.asarray(c.count)[good] == 2)
        np.testing.assert_array_equal(np.asarray(summary["n_clusters"])[good], np.asarray(c.count)[good])
        np.testing.assert_array_equal(np.asarray(summary["clustered_fraction"])[good], np.asarray(frac)[good])
        assert np.all(np.isfinite(np.asarray(e)[good]))


def test_energy_of_one_configuration_over_several_temperatures():
    x = spoiled()[BAD]
    with pytest.warns(RuntimeWarning, match=r"^energy: the configuration holds non-finite .*its energy is NaN"):
        e = energy(x, jnp.array([1.0, 2.0, 4.0]))
    assert e.shape == (3,) and np.all(np.isnan(e))
    # a batch of configurations against a batch of temperatures: member by member
    x = spoiled()
    with pytest.warns(RuntimeWarning, match=r"normalized_energy: 1 of 3"):
        e = np.asarray(normalized_energy(x, jnp.array([1.0, 2.0, 4.0])))
    assert np.isnan(e[BAD]) and np.all(np.isfinite(e[[0, 2]]))
    assert e[2] == quietly(normalized_energy, x[2], 4.0)


def test_single_particle_conventions_still_hold_unless_non_finite():
    x = configurations()[:, :1]
    assert np.all(np.asarray(quietly(clustered_fraction, x, DELTA)) == 1.0)
    x[BAD, 0, 0] = np.nan
    with pytest.warns(RuntimeWarning):
        frac = np.asarray(clustered_fraction(x, DELTA))
    assert np.isnan(frac[BAD]) and np.all(frac[[0, 2]] == 1.0)
    with pytest.warns(RuntimeWarning):
        stats = pair_statistics(x)
    assert np.isnan(stats["std"][BAD]) and np.all(np.asarray(stats["std"])[[0, 2]] == 0.0)


# ---------------------------------------------------------------------------------------------
# beta messages

ALLOWED = r"beta must be a finite number( ≥ 0)? or a 1-D array of them, got "
FIELDS = {
    **{name: MODELS[name].build for name in models.names(temperature=True)},  # the models with a β
    "Circle": lambda beta: af.Circle(beta=beta),
    "MultiHead": lambda beta: af.MultiHead(beta, np.ones((2, 3, 3)), np.ones((2, 3, 3)), np.ones((2, 3, 3))),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize(
    "beta,pattern",
    [
        ("hot", ALLOWED + r"'hot' \(a string\)$"),
        (None, ALLOWED + r"None$"),
        ({"low": 1}, ALLOWED + r"\{'low': 1\} \(a dict\)$"),
        (["a", "b"], ALLOWED + r"\['a', 'b'\] \(a list of strings\)$"),
        ([1.0, None], ALLOWED + r"\[1.0, None\] \(a list\)$"),
        ([[1.0], [1.0, 2.0]], ALLOWED + r"\[\[1.0\], \[1.0, 2.0\]\] \(a list\)$"),
        (True, ALLOWED + r"True \(a bool\)$"),
        (1 + 2j, ALLOWED + r"\(1\+2j\) \(a complex\)$"),
        (np.array(["x"]), ALLOWED + r"an array of dtype <U1 and shape \(1,\)$"),
        ([], r"^beta must not be empty: give at least one temperature$"),
        (np.array([]), r"^beta must not be empty: give at least one temperature$"),
        (jnp.zeros((0,)), r"^beta must not be empty: give at least one temperature$"),
        (float("nan"), r"beta must be finite, got nan"),
        (np.ones((2, 2)), r"beta must be a real number or a 1-D array .*shape \(2, 2\)"),
    ],
)
def test_beta_messages(field, beta, pattern):
    with pytest.raises(ValueError) as err:
        FIELDS[field](beta)
    assert re.search(pattern, str(err.value)), str(err.value)


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_good_beta_still_accepted(field):
    for beta in (0, 2.5, np.float32(1.0), [1.0, 2.0], jnp.array([0.5, 3.0])):
        assert np.all(np.asarray(FIELDS[field](beta).beta) == np.asarray(beta, dtype=float))


def test_traced_beta_passes_unchecked():
    assert float(jax.jit(lambda b: af.SA(beta=b).beta)(2.0)) == 2.0


def test_long_bad_beta_is_shortened():
    with pytest.raises(ValueError) as err:
        af.SA(beta=["hot"] * 100)
    message = str(err.value)
    assert len(message) < 160 and re.search(r"\.\.\. \(a list of strings\)$", message)
