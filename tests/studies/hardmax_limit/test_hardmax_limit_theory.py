"""Attention in the tokens' convex hull and its hardmax limit as Frank–Wolfe (experiments/studies/hardmax_limit/hardmax_limit_theory.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.experiments.studies.hardmax_limit.hardmax_limit_theory import (
    SELF_WEIGHT,
    HullAttention,
    HullHardmax,
    concentration_offset,
    dominance_cells,
    frank_wolfe_gap,
    frank_wolfe_steps,
    hardmax_paths,
    hull_tokens,
    limit_rate,
    trapping_exponent,
)


def test_hull_tokens_are_unit_vertices_and_points_inside_them():
    x = hull_tokens(7, 200, seed=3)
    v = x[:7]
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-15)
    turns = np.mod(np.diff(np.arctan2(v[:, 1], v[:, 0]), append=np.arctan2(v[0, 1], v[0, 0])), 2 * np.pi)
    assert np.all(turns > 0) and turns.sum() == pytest.approx(2 * np.pi)  # counter-clockwise, once around
    # inside the polygon: on the left of every edge (counter-clockwise)
    edges = np.roll(v, -1, axis=0) - v
    rel = x[7:, None, :] - v[None]
    cross = edges[None, :, 0] * rel[..., 1] - edges[None, :, 1] * rel[..., 0]
    assert np.all(cross > 0)
    with pytest.raises(ValueError, match="at least 3 vertices"):
        hull_tokens(2, 5)


def test_attention_tends_to_the_hardmax_field_and_stays_in_the_hull():
    x = hull_tokens(5, 20, seed=1)
    hard = np.asarray(HullHardmax()(0.0, x))
    # the logit gap of every token to its runner-up is at least g, so the softmax error is ≤ n e^{−βg}
    logits = x @ x.T
    top2 = np.sort(logits, axis=1)[:, -2:]
    g = float(np.min(top2[:, 1] - top2[:, 0]))
    beta = 40.0 / g
    soft = np.asarray(HullAttention(beta)(0.0, x))
    assert np.max(np.abs(soft - hard)) <= 2 * x.shape[0] * np.exp(-beta * g)
    # x + ẋ = Σ_j w_ij x_j: a convex combination, rows of A sum to one
    A = np.asarray(HullAttention(3.0).attention_matrix(0.0, x))
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(x + np.asarray(HullAttention(3.0)(0.0, x)), A @ x, atol=1e-14)


def test_hardmax_paths_solve_the_hardmax_field_with_vertices_fixed():
    x0 = hull_tokens(6, 40, seed=2)
    ts = np.linspace(0.0, 8.0, 41)
    paths = hardmax_paths(x0, 6, ts)
    np.testing.assert_array_equal(paths[:, :6], np.broadcast_to(x0[:6], (41, 6, 2)))
    target = x0[:6][dominance_cells(x0, x0[:6])]
    for x in paths:
        np.testing.assert_allclose(np.asarray(HullHardmax()(0.0, x)), target - x, atol=1e-15)
        # every token stays in its initial cell
        np.testing.assert_array_equal(dominance_cells(x, x0[:6]), dominance_cells(x0, x0[:6]))


def test_trapping_exponent_of_a_regular_polygon_and_the_weight_it_predicts():
    k = 5
    theta = 2 * np.pi * np.arange(k) / k
    v = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    c, i, j = trapping_exponent(v)
    assert c == pytest.approx(1 - np.cos(2 * np.pi / k), rel=1e-14)
    assert abs(i - j) in (1, k - 1)  # neighbours
    # at β, each vertex moves with velocity Σ_{v'} e^{−βΔ(v,v')}(v' − v)/Z: two neighbours dominate
    beta = 30.0
    vel = np.asarray(HullAttention(beta)(0.0, v))
    expected = sum(np.exp(-beta * c) * (np.roll(v, s, axis=0) - v) for s in (1, -1))
    # the next vertices are e^{−β(Δ₂ − Δ)} weaker, and Z = 1 + O(e^{−βΔ})
    scale = np.exp(-beta * c) * np.linalg.norm(v[1] - v[0])
    bound = 4 * (np.exp(-beta * ((1 - np.cos(4 * np.pi / k)) - c)) + 2 * np.exp(-beta * c)) * scale
    np.testing.assert_allclose(vel, expected, rtol=0, atol=bound + 1e-15)  # A x − x: rounding of order 1e-16


def test_concentration_offset_of_one_token_per_cell_in_closed_form():
    # one interior token per cell at distance a = ⟨v, v − x⟩ from its vertex: Σ e^{−u a} = 1/2 at u = log 2 / a
    v = np.array([[1.0, 0.0], [-0.5, np.sqrt(3) / 2], [-0.5, -np.sqrt(3) / 2]])
    inner = np.array([[0.7, 0.0], [-0.2, 0.1 * np.sqrt(3)], [-0.3, -0.3 * np.sqrt(3)]])
    a = np.sum(v * (v - inner), axis=1)
    u = concentration_offset(np.concatenate([v, inner]), 3)
    weight_sum = (1 - SELF_WEIGHT) / SELF_WEIGHT
    assert u == pytest.approx(np.max(np.log(1 / weight_sum) / a), rel=1e-12)
    with pytest.raises(ValueError, match="no interior token"):
        concentration_offset(v, 3)


def test_frank_wolfe_steps_of_two_opposite_tokens_in_closed_form():
    # B = −I, x = ±a e: each token targets the other, a_{k+1} = a_k |1 − 2 h_k|, and G = 2 a²
    x0 = np.array([[0.8, 0.0], [-0.8, 0.0]])
    gaps = frank_wolfe_steps(x0, -np.eye(2), 30)
    a = 0.8
    for k, g in enumerate(gaps):
        assert g == pytest.approx(2 * a * a, rel=1e-12)
        a *= abs(1 - 4.0 / (k + 2.0))
    assert frank_wolfe_gap(x0, -np.eye(2)) == pytest.approx(2 * 0.64)


def test_frank_wolfe_gap_bounds_the_energy_above_its_minimum_over_the_hull():
    # B ⪯ 0: f(x) = ½|x|² is convex, so G ≥ f(x_i) − min_K f, with min_K f = 0 when 0 ∈ K
    x = hull_tokens(6, 30, seed=4)
    assert frank_wolfe_gap(x, -np.eye(2)) >= 0.5 * np.max(np.sum(x * x, axis=1)) - 1e-15
    gaps = frank_wolfe_steps(x, -np.eye(2), 400)
    k = np.arange(gaps.size)
    # O(1/k) at least: G_k (k + 2) decreases from k = 10 on
    assert np.max(gaps[10:] * (k[10:] + 2)) <= gaps[10] * 12 * (1 + 1e-12)


def test_limit_rate_and_bad_matrices():
    assert limit_rate(np.e - 1) == pytest.approx(np.sqrt(1 / (np.e - 1)))
    with pytest.raises(ValueError, match=r"B must be a \(d, d\)"):
        HullAttention(2.0, B=np.eye(3)).check(4, 2, np.float64)
    with pytest.raises(ValueError, match=r"B must be a \(d, d\)"):
        HullHardmax(B=np.eye(3)).check(4, 2, np.float64)


def test_rate_changes_the_time_scale_only():
    x = hull_tokens(5, 8, seed=5)
    base = np.asarray(HullAttention(7.0)(0.0, x))
    np.testing.assert_allclose(np.asarray(HullAttention(7.0, rate=250.0)(0.0, x)), 250.0 * base, rtol=1e-14)
    with pytest.raises(ValueError, match="rate must be ≥ 0"):
        HullAttention(7.0, rate=-1.0)
