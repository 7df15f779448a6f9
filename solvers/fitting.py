"""Fitting the particle model to token states per layer: ``fit`` (``attnflow fit`` on the command line).

Given a transformer's hidden states x_ℓ (layers ℓ = 0 … L−1, normalized to the sphere), each layer is
taken as the flow of attention on the sphere for a time τ_ℓ:

    x_{ℓ+1} ≈ Φ_{τ_ℓ}(x_ℓ),   ẋ_i = P_{x_i}( Σ_h Σ_j A^h_ij V_h x_j ),   A^h from β⟨x_i, M_h x_j⟩

(SA: softmax over j; USA: e^{β⟨·⟩}/n; ``causal``: j ≤ i). The parameters are β, the layer times τ (one per
layer or shared), M_h = Q_hᵀK_h ("full", of rank r, or the identity) and V_h ("full" or the identity).
Only β·M_h and τ·V_h enter the flow (the field is linear in V, the logits in β M), so M and V are
reported normalized, ‖M_h‖_F = √d and Σ_h ‖V_h‖²_F = d (those of the identity), β and τ carrying the
scales: that is the convention under which they are recovered.

The loss is the mean squared distance between the simulated and the observed tokens ``horizon`` layers
ahead, each prediction started from the observed states (teacher forcing: errors do not compound), the
flows integrated by ``simulate`` (RK4, ``substeps`` per layer) under ``jax.grad``. Adam, then L-BFGS
(optax). Two baselines fitted on the same data: the identity map x_{ℓ+1} = x_ℓ and the best linear map
per layer, x_{ℓ+1} ≈ normalize(x_ℓ W_ℓ) (least squares). With enough prompts some are held out, and every
error is reported on them.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from dataclasses import field as dc_field

import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_choice, check_int, check_real
from ..particles.fields import SA, USA
from ..particles.multihead import MultiHead
from . import machine
from .progress import Counter
from .simulation import simulate

__all__ = ["FitResult", "fit", "fit_field", "identity_errors", "linear_errors", "memory_parts", "check_fit_memory"]

FIT_MODELS = ("sa", "usa")
WEIGHT_FORMS = ("full", "identity")


@dataclass
class FitResult:
    """What ``fit`` found: parameters (β, τ per transition, M = QᵀK and V per head, normalized), the errors
    per layer transition of the fitted model and of the two baselines, and the optimization's history."""

    model: str
    heads: int
    qk: str  # "full", "identity" or "rank-r"
    v: str  # "full" or "identity"
    causal: bool
    beta: float
    tau: np.ndarray  # (L − 1,) time of each layer (equal when shared)
    M: np.ndarray  # (H, d, d) QᵀK per head, ‖M_h‖_F = √d
    V: np.ndarray  # (H, d, d) values per head, Σ_h ‖V_h‖²_F = d
    layer_error: np.ndarray  # (L − 1,) mean squared one-layer-ahead error of the fitted model
    identity_error: np.ndarray  # (L − 1,) of x_{ℓ+1} = x_ℓ
    linear_error: np.ndarray  # (L − 1,) of the best linear map per layer
    rollout_error: np.ndarray  # (L − 1,) the fitted model run freely from layer 0
    held_out: int  # prompts the errors are measured on (0: in sample)
    loss: np.ndarray = dc_field(default_factory=lambda: np.zeros(0))  # per optimizer step
    wall_time_s: float = 0.0

    def field(self, tau: float = 1.0):
        """The fitted attention field, its V scaled by ``tau`` (one layer is then a unit of time)."""
        return fit_field(self.model, self.beta, self.M, tau * self.V, self.causal)


def fit_field(model: str, beta, M, V, causal: bool):
    """SA/USA (one head) or MultiHead with logits β⟨x_i, M_h x_j⟩ and values V_h; M, V of shape (H, d, d) or
    (members, H, d, d)."""
    mask = "causal" if causal else "none"
    M, V = jnp.asarray(M), jnp.asarray(V)
    if M.shape[-3] == 1:
        make = SA if model == "sa" else USA
        return make(beta, K=M[..., 0, :, :], V=V[..., 0, :, :], mask=mask)
    eye = jnp.broadcast_to(jnp.eye(M.shape[-1], dtype=M.dtype), M.shape)
    return MultiHead(beta, eye, M, V, mask=mask, model=model)


LBFGS_COPIES = 23
"""Parameter-sized arrays L-BFGS holds: optax's memory of 10 steps and gradient differences, its search state."""

ADAM_COPIES = 7
"""Parameter-sized arrays of Adam and their initialization: the parameters, the gradient, the two moments, the
update, the drawn perturbation and the identity it perturbs."""


def memory_parts(
    layers: int,
    prompts: int,
    n: int,
    d: int,
    *,
    heads: int = 1,
    qk: str | int = "full",
    v: str = "full",
    horizon: int = 1,
    substeps: int = 8,
    lbfgs_steps: int = 150,
) -> dict[str, int]:
    """The bytes ``fit`` holds by what holds them, from the shape (layers, prompts, n, d) of the states and its
    options: the weights (M_h and V_h, both d×d per head in the flow even for the identity forms, and the
    optimizer's copies of the parameters) and the flows (each member's attention, h·n² numbers, and its states
    at each RK4 stage of each substep, kept for the gradient)."""
    full = (qk == "full") + (v == "full")
    params = full * heads * d * d + (2 * heads * d * int(qk) if not isinstance(qk, str) else 0)
    copies = ADAM_COPIES + (LBFGS_COPIES if lbfgs_steps else 0)
    members = prompts * sum(s * max(layers - s, 1) for s in range(1, horizon + 1))
    return {
        f"the weights M_h and V_h and the optimizer's copies [{heads} head{'s' if heads != 1 else ''}, d = {d}]": 8
        * (4 * heads * d * d + copies * params),
        f"the attention of the flows kept for the gradient [{n} tokens, {heads} head{'s' if heads != 1 else ''}]": 8
        * members
        * substeps
        * 4
        * heads
        * (n * n + 3 * n * d),
        f"the states [{layers} layers, {prompts} prompts, {n} tokens, d = {d}]": 8 * 4 * layers * prompts * n * d,
    }


def check_fit_memory(parts: dict[str, int], who: str = "fit") -> None:
    """Refuse (one InputError line, ``machine.check_parts``) a fit whose ``memory_parts`` exceed the memory,
    naming the remedy of its largest part."""
    weights, flows, states = parts
    machine.check_parts(
        parts,
        who,
        {
            weights: "fewer heads or dimensions, or a low-rank or identity QᵀK and the identity V "
            "(qk = r or 'identity', v = 'identity'; --rank, --qk-identity, --v-identity)",
            flows: "fewer tokens per prompt, heads or prompts, or fewer substeps",
            states: "fewer layers or prompts",
        },
        on_device=(weights, flows),
    )


def _normalize_rows(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def identity_errors(states: np.ndarray) -> np.ndarray:
    """Mean squared distance ‖x_{ℓ+1} − x_ℓ‖² per layer transition (states (L, P, n, d) on the sphere)."""
    return np.mean(np.sum((states[1:] - states[:-1]) ** 2, axis=-1), axis=(1, 2))


def linear_errors(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """The best linear map per layer, W_ℓ = argmin ‖X_ℓ W − X_{ℓ+1}‖ on ``train`` (tokens pooled), its
    predictions normalized to the sphere; the mean squared error on ``test`` per transition."""
    out = []
    for layer in range(train.shape[0] - 1):
        a = train[layer].reshape(-1, train.shape[-1])
        b = train[layer + 1].reshape(-1, train.shape[-1])
        W, *_ = np.linalg.lstsq(a, b, rcond=None)
        pred = _normalize_rows(test[layer] @ W)
        out.append(np.mean(np.sum((pred - test[layer + 1]) ** 2, axis=-1)))
    return np.array(out)


def _unpack(theta, d: int, heads: int, qk: str, v: str, transitions: int):
    beta = jnp.exp(theta["log_beta"])
    tau = jnp.broadcast_to(jnp.exp(theta["log_tau"]), (transitions,))
    if qk == "identity":
        M = jnp.broadcast_to(jnp.eye(d), (heads, d, d))
    elif qk == "full":
        M = theta["M"]
    else:
        M = jnp.einsum("hdr,her->hde", theta["U"], theta["W"])
    M = M * (math.sqrt(d) / jnp.linalg.norm(M, axis=(-2, -1), keepdims=True))
    V = jnp.broadcast_to(jnp.eye(d), (heads, d, d)) if v == "identity" else theta["V"]
    V = V * (math.sqrt(d) / jnp.sqrt(jnp.sum(V**2)))
    return beta, tau, M, V


def _flow(model, causal, beta, tau, M, V, x, substeps: int):
    """Φ_{τ_m}(x_m) for every member m (x (members, n, d), tau (members,)): one unit of time with V scaled by τ."""
    field = fit_field(model, beta, M, tau[:, None, None, None] * V[None], causal)
    xs = simulate(field, x, 1.0, solver="rk4", dt=1.0 / substeps, ts=np.array([1.0])).xs
    assert xs is not None, "simulate saves the states when no save function is given"
    return xs[:, -1]


def _optimize(theta, loss, value_and_grad, adam_steps, lbfgs_steps, learning_rate, history, meter):
    """Adam, then L-BFGS (optax) from ``theta``; the loss of every step appended to ``history``."""
    import optax

    adam = optax.adam(learning_rate)
    state = adam.init(theta)
    for k in range(adam_steps):
        value, grad = value_and_grad(theta)
        updates, state = adam.update(grad, state, theta)
        theta = optax.apply_updates(theta, updates)
        history.append(float(value))
        if meter is not None and (k % 10 == 9 or k == adam_steps - 1):
            meter.advance(10 if k % 10 == 9 else adam_steps % 10, label=f"fit (Adam, loss {value:.3e})")
    if lbfgs_steps:
        solver = optax.lbfgs()
        state = solver.init(theta)
        cached = optax.value_and_grad_from_state(loss)

        @jax.jit
        def lbfgs_step(theta, state):
            value, grad = cached(theta, state=state)
            updates, state = solver.update(grad, state, theta, value=value, grad=grad, value_fn=loss)
            return optax.apply_updates(theta, updates), state, value

        for k in range(lbfgs_steps):
            theta, state, value = lbfgs_step(theta, state)
            history.append(float(value))
            if meter is not None and (k % 10 == 9 or k == lbfgs_steps - 1):
                meter.advance(10 if k % 10 == 9 else lbfgs_steps % 10, label=f"fit (L-BFGS, loss {float(value):.3e})")
    return theta


def fit(
    states,
    *,
    model: str = "sa",
    heads: int = 1,
    qk: str | int = "full",
    v: str = "full",
    causal: bool = False,
    shared_tau: bool = False,
    horizon: int = 1,
    substeps: int = 8,
    adam_steps: int = 300,
    lbfgs_steps: int = 150,
    learning_rate: float = 0.03,
    holdout: float = 0.2,
    seed: int = 0,
    progress: bool = False,
) -> FitResult:
    """Fit the particle model to ``states`` (layers, tokens, d) or (layers, prompts, tokens, d).

    model      "sa" or "usa";  heads: H attention heads;  causal: token i attends to j ≤ i.
    qk         M_h = Q_hᵀK_h: "full" (d × d), an int r (rank r, M = U Wᵀ) or "identity".
    v          V_h: "full" or "identity".
    shared_tau one layer time for every layer (else one per layer).
    horizon    the loss averages the errors 1 … horizon layers ahead, each from observed states.
    substeps   RK4 steps per layer.
    adam_steps, lbfgs_steps, learning_rate: the optimizer (optax Adam, then L-BFGS): step counts ≥ 0, a
               learning rate > 0.
    holdout    the fraction of prompts (when there are at least 5) the errors are measured on, in [0, 1).
    progress   show the optimizer's steps and loss on stderr.
    """
    start = time.perf_counter()
    model = check_choice("model", model, FIT_MODELS)
    heads = check_int("heads", heads, 1)
    v = check_choice("v", v, WEIGHT_FORMS)
    rank = None
    if isinstance(qk, (int, np.integer)) and not isinstance(qk, bool):
        rank = check_int("rank", qk, 1)
        qk_form = f"rank-{rank}"
    else:
        qk_form = check_choice("qk", qk, WEIGHT_FORMS)
    horizon = check_int("horizon", horizon, 1)
    substeps = check_int("substeps", substeps, 1)
    adam_steps = check_int("adam_steps", adam_steps, 0)
    lbfgs_steps = check_int("lbfgs_steps", lbfgs_steps, 0)
    learning_rate = check_real("learning_rate", learning_rate, 0.0, strict_min=True)
    holdout = check_real("holdout", holdout, 0.0, 1.0)
    if holdout == 1.0:
        raise ValueError("holdout must be a finite number ≥ 0 and < 1 (the fraction of prompts held out), got 1")
    seed = check_int("seed", seed, 0)
    raw = np.asarray(states)
    if raw.dtype.kind not in "biuf":  # complex values would lose their imaginary part, silently
        raise ValueError(f"states must be a real array of token states, got dtype {raw.dtype}")
    x = raw.astype(float)
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.shape[0] < 2 or x.shape[2] < 2 or x.shape[3] < 2:
        raise ValueError(
            f"states must have shape (layers ≥ 2, tokens, d) or (layers, prompts, tokens, d), got {np.shape(states)}"
        )
    if not np.all(np.isfinite(x)) or np.any(np.linalg.norm(x, axis=-1) == 0):
        raise ValueError("states must be finite, every token a nonzero vector")
    L, P, n, d = x.shape
    if horizon > L - 1:
        raise ValueError(f"horizon {horizon} exceeds the {L - 1} layer transitions of the states")
    if rank is not None and rank > d:
        raise ValueError(f"rank {rank} exceeds d = {d}")
    check_fit_memory(
        memory_parts(
            L,
            P,
            n,
            d,
            heads=heads,
            qk=qk if rank is None else rank,
            v=v,
            horizon=horizon,
            substeps=substeps,
            lbfgs_steps=lbfgs_steps,
        )
    )
    x = _normalize_rows(x)
    test_count = int(round(holdout * P)) if P >= 5 else 0
    train, test = (x[:, : P - test_count], x[:, P - test_count :]) if test_count else (x, x)
    transitions = L - 1
    rng = np.random.default_rng(seed)

    theta = {"log_beta": jnp.asarray(0.0), "log_tau": jnp.zeros(() if shared_tau else (transitions,))}
    if qk_form == "full":
        theta["M"] = jnp.asarray(np.eye(d)[None].repeat(heads, 0) + 0.01 * rng.normal(size=(heads, d, d)))
    elif rank is not None:
        theta["U"] = jnp.asarray(np.eye(d, rank)[None].repeat(heads, 0) + 0.1 * rng.normal(size=(heads, d, rank)))
        theta["W"] = jnp.asarray(np.eye(d, rank)[None].repeat(heads, 0) + 0.1 * rng.normal(size=(heads, d, rank)))
    if v == "full":
        theta["V"] = jnp.asarray(
            np.eye(d)[None].repeat(heads, 0) / math.sqrt(heads) + 0.01 * rng.normal(size=(heads, d, d))
        )

    def predict(theta, data, steps_ahead: int):
        """Predictions of layers s … L−1 from layers 0 … L−1−s, s = steps_ahead, (L − s, P, n, d)."""
        beta, tau, M, V = _unpack(theta, d, heads, qk_form, v, transitions)
        current = data[:-steps_ahead] if steps_ahead < L else data[:1]
        count = current.shape[0]
        y = current.reshape((-1, n, d))
        for k in range(steps_ahead):
            taus = jnp.repeat(tau[k : k + count], data.shape[1])
            y = _flow(model, causal, beta, taus, M, V, y, substeps)
        return y.reshape(current.shape)

    data_train = jnp.asarray(train)

    def loss(theta):
        total = 0.0
        for s in range(1, horizon + 1):
            total = total + jnp.mean(jnp.sum((predict(theta, data_train, s) - data_train[s:]) ** 2, axis=-1))
        return total / horizon

    # a first estimate of the layer times: the least-squares scale of the initial field against the motion
    beta0, _, M0, V0 = _unpack(theta, d, heads, qk_form, v, transitions)
    field0 = fit_field(model, beta0, M0, V0, causal)
    velocity = jax.vmap(jax.vmap(lambda y: field0(0.0, y)))(jnp.asarray(train[:-1]))
    motion = train[1:] - train[:-1]
    scale = np.sum(np.asarray(velocity) * motion, axis=(1, 2, 3)) / np.sum(np.asarray(velocity) ** 2, axis=(1, 2, 3))
    scale = np.clip(scale, 1e-3, None)
    theta["log_tau"] = jnp.asarray(np.log(np.mean(scale)) if shared_tau else np.log(scale))

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    history: list[float] = []
    meter = Counter(adam_steps + lbfgs_steps, label="fit", unit="steps") if progress else contextlib.nullcontext()
    with meter:
        theta = _optimize(
            theta, loss, value_and_grad, adam_steps, lbfgs_steps, learning_rate, history, meter if progress else None
        )
    beta, tau, M, V = _unpack(theta, d, heads, qk_form, v, transitions)
    data_test = jnp.asarray(test)
    one_ahead = np.asarray(predict(theta, data_test, 1))
    layer_error = np.mean(np.sum((one_ahead - test[1:]) ** 2, axis=-1), axis=(1, 2))
    rollout = []
    y = data_test[0]
    for k in range(transitions):
        y = _flow(model, causal, beta, jnp.repeat(tau[k : k + 1], test.shape[1]), M, V, y, substeps)
        rollout.append(float(np.mean(np.sum((np.asarray(y) - test[k + 1]) ** 2, axis=-1))))
    return FitResult(
        model=model,
        heads=heads,
        qk=qk_form,
        v=v,
        causal=bool(causal),
        beta=float(beta),
        tau=np.asarray(tau, dtype=float),
        M=np.asarray(M),
        V=np.asarray(V),
        layer_error=layer_error,
        identity_error=identity_errors(test),
        linear_error=linear_errors(train, test),
        rollout_error=np.array(rollout),
        held_out=test_count,
        loss=np.array(history),
        wall_time_s=time.perf_counter() - start,
    )
