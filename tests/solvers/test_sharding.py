"""Sharding over devices: ensembles split along members, one large run along particles, same numbers as one device.

The device count is fixed when JAX starts, so the four-device runs happen in a child process
started with XLA_FLAGS=--xla_force_host_platform_device_count=4; it also runs every case with
shard=False (the one-device program) to compare with.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attnflow as af

CASES = r'''
import jax, jax.numpy as jnp, numpy as np
import attnflow as af

def cases(shard):
    """name -> Solution of each case."""
    out = {}
    # an SA ensemble over β, fixed step: 8 members on 4 devices
    x0 = af.init.uniform(0, 16, 3)
    out["rk4"] = af.simulate(af.SA(jnp.linspace(0.5, 4.0, 8)), x0, 1.0, ts=np.linspace(0, 1, 3), solver="rk4",
                             dt=0.05, shard=shard)
    # adaptive with the clustering event, 6 members: padded to 8, then cut
    keys = jax.random.split(jax.random.key(1), 6)
    x0s = jax.vmap(lambda k: af.init.uniform(k, 12, 2))(keys)
    out["tsit5"] = af.simulate(af.SA(jnp.linspace(1.0, 6.0, 6)), x0s, 20.0, ts=np.linspace(0, 20, 5),
                               solver="tsit5", stop_when_clustered=1e-3, shard=shard)
    # the same in groups of 3 (4 when split over 4 devices), hardest first
    out["grouped"] = af.simulate(af.SA(jnp.linspace(1.0, 6.0, 6)), x0s, 20.0, ts=np.linspace(0, 20, 5),
                                 solver="tsit5", stop_when_clustered=1e-3, group_size=3, shard=shard)
    # dense output, 5 members (not a multiple of 4)
    out["dense"] = af.simulate(af.USA(jnp.linspace(0.5, 2.0, 5), time="rescaled"), x0, 1.0,
                               ts=np.linspace(0, 1, 7), solver="rk4", dt=0.1, dense=True, shard=shard)
    # one run whose attention is blocked (forced here, automatic for n > 1448 in float64 on CPU):
    # its particles are split, each device taking the attention of its query rows
    big = af.init.uniform(3, 200, 3)
    out["particles"] = af.simulate(af.SA(3.0, mask="causal", block=48), big, 0.2, solver="rk4", dt=0.05,
                                   shard=shard)
    out["particles_tsit5"] = af.simulate(af.USA(2.0, time="rescaled", block=64), big, 0.2, solver="tsit5",
                                         shard=shard)
    return out

def arrays(out):
    return {f"{name}.{key}": np.asarray(getattr(sol, key)) for name, sol in out.items()
            for key in ("xs", "x_final", "steps", "t_event")}
'''

CHILD = (
    CASES
    + r'''
import json, sys
assert jax.local_device_count() == 4, jax.local_devices()
sharded, single = cases(None), cases(False)

def spread(a):
    """How many distinct pieces of the array the devices hold."""
    return len({str(s.index) for s in a.addressable_shards})

info = {"rk4": spread(sharded["rk4"].xs), "particles": spread(sharded["particles"].x_final),
        "particles_tsit5": spread(sharded["particles_tsit5"].x_final),
        "rk4_devices": len(sharded["rk4"].xs.sharding.device_set),
        "single_devices": len(single["rk4"].xs.sharding.device_set)}
np.savez(sys.argv[1], **{"sharded." + k: v for k, v in arrays(sharded).items()},
         **{"single." + k: v for k, v in arrays(single).items()})
print(json.dumps(info))
'''
)


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    path = tmp_path_factory.mktemp("sharding") / "out.npz"
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), dict(np.load(path))


def _close(a, b, tol):
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
    finite = np.isfinite(a)
    np.testing.assert_allclose(a[finite], b[finite], rtol=0, atol=tol)


@pytest.mark.slow
def test_outputs_are_spread_over_the_four_devices(child):
    info, _ = child
    assert info["rk4"] == 4 and info["rk4_devices"] == 4  # members split 2 + 2 + 2 + 2
    assert info["particles"] == 4 and info["particles_tsit5"] == 4  # 200 particles split 50 × 4
    assert info["single_devices"] == 1


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "name,tol",
    [
        ("rk4", 1e-12),
        ("dense", 1e-12),
        ("tsit5", 1e-10),
        ("grouped", 1e-10),
        ("particles", 1e-12),
        ("particles_tsit5", 1e-10),
    ],
)
def test_sharded_results_equal_one_device(child, name, tol):
    # against shard=False in the same four-device process: the one-device program (its outputs
    # live on one device, test_outputs_are_spread_over_the_four_devices)
    _, out = child
    for key in ("xs", "x_final", "t_event"):
        sharded, single = out[f"sharded.{name}.{key}"], out[f"single.{name}.{key}"]
        assert sharded.shape == single.shape
        _close(sharded, single, tol)
    np.testing.assert_array_equal(out[f"sharded.{name}.steps"], out[f"single.{name}.steps"])


def test_one_device_is_untouched():
    from attnflow.solvers import sharding

    field = af.SA(np.linspace(1.0, 2.0, 8))
    assert sharding.plan(None, field, 16, 8, np.float64) is None
    assert sharding.plan(True, field, 16, 8, np.float64) is None
    with pytest.raises(ValueError, match="shard must be None"):
        sharding.plan("yes", field, 16, 8, np.float64)


def test_blocked_detection():
    from attnflow.particles.blocked import dense_limit_bytes
    from attnflow.solvers.sharding import uses_blocked

    large = int(np.sqrt(dense_limit_bytes() / 8)) + 1  # "auto": n² float64 logits over the limit
    assert uses_blocked(af.SA(1.0, block=64), 200, np.float64)
    assert not uses_blocked(af.SA(1.0), 200, np.float64)
    assert uses_blocked(af.SA(1.0), large, np.float64) and not uses_blocked(af.SA(1.0), large - 1, np.float64)
    assert uses_blocked(af.SA(1.0, block=None) + af.USA(1.0, block=32), 100, np.float64)
    assert not uses_blocked(af.SA(1.0, block=None), 2 * large, np.float64)
