"""The authors' published scheme, written faithfully and efficiently in NumPy: the baseline of every benchmark.

It follows the phase-diagram script of the paper's authors (PEERS.md): float64, explicit Euler with
dt = 0.1 with the unprojected velocity followed by renormalization of every row,
x_i ← (x_i + dt v_i) / ‖·‖, v_i = Σ_j A_ij V x_j (attnflow's ``renormalized_euler``; its ``euler``
projects v_i first, and this step is that one with dt / (1 + dt⟨x_i, v_i⟩) in place of dt), the
ensemble of initial conditions batched as one (B, n, d) array, β looped one value at a time, and
the statistic "fraction of pairs i ≠ j with ⟨x_i, x_j⟩ > 1 − δ" recorded at 200 checkpoints. Like
theirs, the exponentials are taken without max subtraction (fine for the β ≤ 9 of the phase diagram).
"""

from __future__ import annotations

import numpy as np

DT = 0.1  # the authors' Euler step


def usa_dt(beta: float, dt: float = DT) -> float:
    """The authors' USA step: dt shrunk to dt / max(√β e^{β − 1/2}, 1) so Euler stays stable."""
    return dt / max(np.sqrt(beta) * np.exp(beta - 0.5), 1.0)


def sa_euler(
    x: np.ndarray,
    beta: float,
    t1: float,
    dt: float = DT,
    *,
    checkpoints: int = 200,
    delta: float = 1e-3,
    model: str = "sa",
    max_steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Integrate SA (or, with model="usa", USA) with Q = K = V = I for an ensemble x of shape (B, n, d);
    return the final states and the clustered fraction (checkpoints, B) sampled evenly over the run.
    ``max_steps`` stops early (to time a prefix of a very long run)."""
    x = np.array(x, dtype=np.float64)
    b, n, _ = x.shape
    steps = int(round(t1 / dt))
    if max_steps is not None:
        steps = min(steps, max_steps)
    record = set(np.linspace(0, steps, checkpoints, dtype=int).tolist())
    off = ~np.eye(n, dtype=bool)
    fractions = []
    for k in range(steps + 1):
        gram = x @ np.swapaxes(x, 1, 2)
        if k in record:
            fractions.append(np.mean(gram[:, off] > 1.0 - delta, axis=1))
        if k == steps:
            break
        w = np.exp(beta * gram)
        if model == "sa":
            w /= w.sum(axis=2, keepdims=True)
        else:
            w /= n
        x = x + dt * (w @ x)  # the velocity unprojected, as in the authors' script
        x /= np.linalg.norm(x, axis=2, keepdims=True)
    return x, np.asarray(fractions)


def phase_diagram(x0: np.ndarray, betas, t1: float = 30.0, dt: float = DT, **kw) -> np.ndarray:
    """The authors' loop: one β at a time over the whole ensemble; returns fractions (β, checkpoints)."""
    return np.stack([sa_euler(x0, float(beta), t1, dt, **kw)[1].mean(axis=1) for beta in betas])


def weighted_euler(
    x: np.ndarray,
    beta: float,
    t1: float,
    Q=None,
    K=None,
    V=None,
    dt: float = DT,
    *,
    checkpoints: int = 200,
    delta: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray]:
    """SA with per-member random weights ([GLPR] Fig. 5), the authors' way: Euler dt = 0.1, rows renormalized.

    x (B, n, d); Q, K (B, k, d) and V (B, d, d), or None for the identity. Like the authors' script
    (it draws the bilinear form QᵀK itself), QᵀK is formed once per member, so the logits
    β⟨Q x_i, K x_j⟩ = β x_iᵀ(QᵀK)x_j cost one d×d product per step; the values are V x_j, applied
    after the attention (A X)Vᵀ = A(X Vᵀ). The step adds the velocity unprojected and renormalizes, as
    their script and ``sa_euler`` do (attnflow's "renormalized_euler"). Returns the final states and the
    clustered fraction (checkpoints, B).
    """
    x = np.array(x, dtype=np.float64)
    b, n, d = x.shape

    def stack(m):
        return np.broadcast_to(np.eye(d), (b, d, d)) if m is None else np.asarray(m, dtype=np.float64)

    # x_i M x_jᵀ with M = QᵀK: (x M) xᵀ
    M = np.ascontiguousarray(np.swapaxes(stack(Q), 1, 2) @ stack(K)) if Q is not None or K is not None else None
    Vt = None if V is None else np.ascontiguousarray(np.swapaxes(stack(V), 1, 2))
    steps = int(round(t1 / dt))
    record = set(np.linspace(0, steps, checkpoints, dtype=int).tolist())
    off = ~np.eye(n, dtype=bool)
    fractions = []
    for k in range(steps + 1):
        xt = np.swapaxes(x, 1, 2)
        if k in record:
            fractions.append(np.mean((x @ xt)[:, off] > 1.0 - delta, axis=1))
        if k == steps:
            break
        w = (x if M is None else x @ M) @ xt
        w *= beta
        np.exp(w, out=w)
        w /= w.sum(axis=2, keepdims=True)
        y = w @ x
        if Vt is not None:
            y = y @ Vt
        x = x + dt * y
        x /= np.linalg.norm(x, axis=2, keepdims=True)
    return x, np.asarray(fractions)
