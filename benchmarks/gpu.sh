#!/usr/bin/env bash
# attnflow on a GPU machine with JAX (CUDA), PyTorch, diffrax, equinox, xarray and matplotlib installed but not
# attnflow: run from the repository root. Missing pure-Python dependencies travel as wheels in .whl/
# (tomli-w; fetch with `pip download --no-deps -d .whl tomli-w`). The package is imported from this checkout.
# Everything the run writes goes to $OUT (default ./gpu-out): gpu.log, gpu_table.md, gpu.json, the figures.
set -u
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnflow-site .whl/*.whl || exit 1
fi
mkdir -p /tmp/attnflow-pkg && ln -sfn "$PWD" /tmp/attnflow-pkg/attnflow
export PYTHONPATH=/tmp/attnflow-pkg:/tmp/attnflow-site:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
$PY -c "import attnflow, jax; print('attnflow', attnflow.__version__, 'from', attnflow.__file__, '| jax', jax.__version__, jax.devices())" || exit 1
$PY benchmarks/gpu.py --out "$OUT" "$@"
