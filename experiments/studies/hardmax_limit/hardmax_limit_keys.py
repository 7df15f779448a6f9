"""The configuration keys that only hardmax-limit reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import TIME_UNITS, Label

_T = TIME_UNITS

KEYS = (
    Key(
        "limit_beta",
        "float_list",
        (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0),
        "hardmax-limit: the β grid on which the attention flow is compared with its hardmax limit",
        minimum=0.0,
        strict_min=True,
        maximum=1e6,
        experiment_key=True,
    ),
    Key(
        "hull_vertices",
        "int",
        6,
        "hardmax-limit: tokens at the vertices of the convex hull (unit vectors of the plane, jittered polygon)",
        minimum=3,
        maximum=64,
        experiment_key=True,
    ),
    Key(
        "hull_interior",
        "int",
        30,
        "hardmax-limit: tokens drawn uniformly inside the hull",
        minimum=1,
        maximum=2000,
        experiment_key=True,
    ),
    Key(
        "hardmax_time",
        "float",
        1.0,
        "hardmax-limit: the time t at which the SA flow is compared with the hardmax flow over β",
        minimum=0.0,
        strict_min=True,
        maximum=10.0,
        experiment_key=True,
    ),
    Key(
        "trap_beta",
        "float_list",
        (15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0),
        "hardmax-limit: the β at which the hull's vertex tokens are followed until one leaves its vertex",
        minimum=1.0,
        maximum=80.0,
        experiment_key=True,
    ),
    Key(
        "frank_wolfe_steps",
        "int",
        1000,
        "hardmax-limit: hardmax (Frank–Wolfe) steps h_k = 2/(k + 2) with QᵀK = −I",
        minimum=20,
        maximum=100_000,
        experiment_key=True,
    ),
)

LABELS = {
    "limit_beta": Label("inverse temperature β of the attention flow"),
    "flow_time": Label("time t of the flow", _T),
    "fw_step": Label("Frank–Wolfe step k"),
    "trap_beta": Label("inverse temperature β of the trapping run"),
    "xy": Label("coordinate of the plane"),
    "limit_distance": Label("rms distance D(β) between the attention and hardmax flows at t"),
    "limit_distance_max": Label("largest token distance between the attention and hardmax flows at t"),
    "self_weight": Label("a vertex token's attention on itself"),
    "concentration_time": Label("concentration time t_c: self-weight below 2/3", _T),
    "concentration_predicted": Label("concentration time log β − log u*", _T),
    "path_residual": Label("residual of the hardmax flow along the closed-form straight paths"),
    "tokens": Label("initial tokens (vertices first)"),
    "cells": Label("dominance cell of each token (index of its vertex)"),
    "fw_gap": Label("Frank–Wolfe gap G_k"),
    "trap_time": Label("time a vertex token stays within δ of its vertex", _T),
    "trap_speed": Label("initial speed of the fastest vertex token", "1 / model time unit"),
}
