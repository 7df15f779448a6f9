"""Results store: atomic run directories, manifests, run names, and loading runs and sweeps."""

from __future__ import annotations

import errno
import json
import os
import re
import zipfile

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.experiments.config import expand_grid, load_config, to_toml
from attnflow.experiments.results import figures as output
from attnflow.experiments.results import store
from attnflow.experiments.results.store import (
    DIMS_KEY,
    OWNED_FILE,
    StoreError,
    foreign_files,
    is_complete,
    is_run,
    load,
    owned_files,
    read_manifest,
    remove_run,
    run_name,
    write_manifest,
    write_run,
)

T, M, N, D = 4, 3, 5, 2


def make_run(cfg, scale: float = 1.0, *, dims_entry: bool = True):
    """A summary and arrays shaped as a real run of ``cfg`` would produce them."""
    times = np.linspace(0.0, cfg.t1, T).tolist()
    rng = np.random.default_rng(int(scale * 1000))
    xs = rng.normal(size=(M, T, N, D)) * scale
    summary = {
        "config": cfg.to_dict(),
        "times": times,
        "mean_inner_product": (np.linspace(0, 1, T) * scale).tolist(),
        "min_inner_product": [-1.0, -0.5, float("nan"), 0.9],
        "clustered_fraction": [0.0, 0.25, 0.5, 1.0],
        "n_clusters": [[5, 5, 5], [3, 4, 3], [2, 2, 1], [1, 1, 1]],
        "energy": np.float64(2.0) * np.arange(T),
        "t_clustered": [1.5 * scale, None, float("inf")],
        "steps": 120,
        "wall_time_s": 0.25 * scale,
        "versions": {"attnflow": "0.1", "jax": "0.4.30"},
    }
    arrays = {"xs": xs, "energy_per_member": rng.normal(size=(M, T)), "converged": np.array([True, False, True])}
    dims = {
        "xs": ["member", "time", "particle", "coord"],
        "energy_per_member": ["member", "time"],
        "converged": ["member"],
    }
    if dims_entry:
        arrays[DIMS_KEY] = np.array(json.dumps(dims))
    return summary, arrays


def tree(root) -> list[str]:
    """Every path under ``root``, relative, sorted (to prove nothing else was written)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out += [os.path.normpath(os.path.join(rel, n)) for n in dirnames + filenames]
    return sorted(out)


@pytest.fixture
def cfg():
    return load_config({"n": N, "d": D, "seeds": M, "t1": 3.0, "n_save": T})


# ---------------------------------------------------------------------------------------------
# Writing and reading one run


def test_write_run_files_and_exact_round_trip(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    assert out == tmp_path / "run"
    assert tree(tmp_path) == ["run", "run/.attnflow.json", "run/config.toml", "run/results.npz", "run/summary.json"]
    assert owned_files(out) == {".attnflow.json", "config.toml", "results.npz", "summary.json"}
    assert is_complete(out)
    assert (out / "config.toml").read_text() == to_toml(cfg)
    assert load_config(out / "config.toml") == cfg
    saved = json.loads((out / "summary.json").read_text())
    assert saved["min_inner_product"] == [-1.0, -0.5, None, 0.9]  # NaN → null
    assert saved["t_clustered"] == [1.5, None, None]  # inf → null
    assert saved["energy"] == [0.0, 2.0, 4.0, 6.0] and saved["config"]["beta"] == [1.0]
    assert "NaN" not in (out / "summary.json").read_text()
    with np.load(out / "results.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(arrays)
        np.testing.assert_array_equal(npz["xs"], arrays["xs"])


def test_load_run_dims_coords_attrs(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    ds = load(write_run(tmp_path / "run", to_toml(cfg), summary, arrays))
    assert isinstance(ds, xr.Dataset)
    assert ds["xs"].dims == ("member", "time", "particle", "coord")
    assert ds["energy_per_member"].dims == ("member", "time")
    assert ds["converged"].dims == ("member",) and ds["converged"].dtype == bool
    np.testing.assert_array_equal(ds["xs"].values, arrays["xs"])  # bit for bit
    np.testing.assert_array_equal(ds["time"].values, summary["times"])
    assert dict(ds.sizes) == {"member": M, "time": T, "particle": N, "coord": D}
    # the summary's series, absent from the archive, come along with the contract's dimensions
    assert ds["mean_inner_product"].dims == ("time",)
    np.testing.assert_array_equal(ds["mean_inner_product"].values, summary["mean_inner_product"])
    assert np.isnan(ds["min_inner_product"].values[2])
    assert ds["n_clusters"].dims == ("time", "member") and ds["n_clusters"].dtype.kind == "i"
    np.testing.assert_array_equal(ds["n_clusters"].values, summary["n_clusters"])
    assert ds["t_clustered"].dims == ("member",)
    np.testing.assert_array_equal(ds["t_clustered"].values, [1.5, np.nan, np.nan])
    # attrs: the configuration and the summary's scalars
    for key, value in cfg.to_dict().items():
        assert ds.attrs[key] == value
    assert ds.attrs["steps"] == 120 and ds.attrs["wall_time_s"] == 0.25
    assert ds.attrs["versions.jax"] == "0.4.30"


def test_dims_keyword_and_unnamed_dims(tmp_path, cfg):
    summary, arrays = make_run(cfg, dims_entry=False)
    arrays["file"] = np.arange(7)  # names np.savez would choke on
    arrays["allow_pickle"] = np.zeros((2, 7))
    arrays["other"] = np.zeros(3)
    out = write_run(
        tmp_path / "run", to_toml(cfg), summary, arrays, dims={"xs": ["member", "time", "particle", "coord"]}
    )
    ds = load(out)
    assert ds["xs"].dims == ("member", "time", "particle", "coord")
    # unnamed dimensions are dim_0, dim_1... (shared while sizes agree); an array whose sizes
    # clash with those gets names of its own
    assert ds["energy_per_member"].dims == ("dim_0", "dim_1")  # (M, T) = (3, 4)
    assert ds["converged"].dims == ("dim_0",)  # (3,)
    assert ds["file"].dims == ("file_dim_0",)  # (7,)
    assert ds["allow_pickle"].dims == ("allow_pickle_dim_0", "allow_pickle_dim_1")
    assert ds["other"].dims == ("dim_0",)
    np.testing.assert_array_equal(ds["file"].values, np.arange(7))


def test_complex_and_int_arrays_round_trip(tmp_path, cfg):
    summary, _ = make_run(cfg)
    arrays = {
        "z": np.array([1 + 2j, 3 - 1j]),
        "k": np.arange(6, dtype=np.int8).reshape(2, 3),
        "u": np.uint64([2**64 - 1]),
    }
    ds = load(write_run(tmp_path / "r", to_toml(cfg), summary, arrays))
    for name, arr in arrays.items():
        assert ds[name].dtype == arr.dtype
        np.testing.assert_array_equal(ds[name].values, arr)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda s, a: a.update(bad=np.array([object()], dtype=object)), "array 'bad' has dtype object"),
        (lambda s, a: a.update(words=np.array(["a", "b"])), "array 'words' has dtype <U1"),
        (lambda s, a: a.update(ragged=np.array([[1], [1, 2]], dtype=object)), "dtype object"),
        (lambda s, a: a.update({"a/b": np.zeros(1)}), "must not contain path separators"),
        (lambda s, a: a.update({"__x": np.zeros(1)}), "reserved"),
        (lambda s, a: a.update({DIMS_KEY: np.array(json.dumps({"xs": ["a", "b"]}))}), "4 dimensions"),
        (
            lambda s, a: a.update({DIMS_KEY: np.array(json.dumps({"nope": ["a"]}))}),
            "'nope', which is not among the arrays",
        ),
        (lambda s, a: a.update({DIMS_KEY: np.array("{not json")}), "not valid JSON"),
        (lambda s, a: a.update({DIMS_KEY: np.array(json.dumps({"xs": ["a", "a", "b", "c"]}))}), "repeats a dimension"),
        (
            lambda s, a: a.update(
                {
                    "ts": np.zeros(7),
                    DIMS_KEY: np.array(json.dumps({"xs": ["member", "time", "p", "c"], "ts": ["time"]})),
                }
            ),
            "dimension 'time' has size 7",
        ),
        (
            lambda s, a: s.update(times=[0.0, 1.0]),
            "dimension 'time' has size 4 in array 'xs' but 2 in summary['times']",
        ),
        (lambda s, a: s.update(when=object()), "summary['when'] holds object"),
        (lambda s, a: s.update({1: 2}), "non-string key 1"),
    ],
)
def test_bad_inputs_write_nothing(tmp_path, cfg, change, fragment):
    summary, arrays = make_run(cfg)
    change(summary, arrays)
    with pytest.raises(StoreError) as excinfo:
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    assert fragment in str(excinfo.value)
    assert tree(tmp_path) == []


def test_bad_config_and_figure_arguments_write_nothing(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    with pytest.raises(StoreError, match="config_toml is not valid TOML"):
        write_run(tmp_path / "run", "n = = 1", summary, arrays)
    with pytest.raises(StoreError, match="config_toml must be TOML text"):
        write_run(tmp_path / "run", cfg, summary, arrays)
    with pytest.raises(StoreError, match="must be a callable"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"fig": "not callable"})
    with pytest.raises(StoreError, match="figure name must be a non-empty string"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {".hidden": lambda p: None})
    with pytest.raises(StoreError, match="reserved"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"summary": lambda p: None})
    with pytest.raises(StoreError, match="give a directory name"):
        write_run("/", to_toml(cfg), summary, arrays)
    assert tree(tmp_path) == []


def write_png(path):
    path.write_bytes(b"\x89PNG\r\n\x1a\nfake")


def test_figures_are_written(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    seen = []

    def fig(path):
        seen.append(path.name)
        write_png(path)

    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"clusters": fig, "energy.png": write_png})
    assert seen == ["clusters.png"]
    assert (out / "clusters.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "energy.png").is_file()


@pytest.mark.parametrize("exc", [RuntimeError("plot failed"), KeyboardInterrupt()])
def test_crash_in_a_figure_leaves_nothing(tmp_path, cfg, exc):
    summary, arrays = make_run(cfg)

    def crash(path):
        write_png(path)  # half the work done, then the crash
        raise exc

    with pytest.raises(type(exc)):
        write_run(tmp_path / "new" / "deeper" / "run", to_toml(cfg), summary, arrays, {"a": write_png, "b": crash})
    assert tree(tmp_path) == []  # no run, no temporary directory, no parents made for it


def test_figure_that_writes_nothing_is_an_error(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    with pytest.raises(StoreError, match="figure 'empty' wrote nothing at empty.png"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"empty": lambda p: None})
    assert tree(tmp_path) == []


def test_crash_while_replacing_keeps_the_old_run(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    before = {p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file()}
    cfg2 = cfg.replace(n=7)

    def crash(path):
        raise RuntimeError("boom")

    (out / "notes.txt").write_text("mine")  # the in-place replacement too
    for _ in range(2):
        with pytest.raises(RuntimeError, match="boom"):
            write_run(out, to_toml(cfg2), summary, arrays, {"fig": crash}, overwrite=True)
        assert {
            p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file() and p != "run/notes.txt"
        } == before
        assert tree(tmp_path) == [
            "run",
            "run/.attnflow.json",
            "run/config.toml",
            "run/notes.txt",
            "run/results.npz",
            "run/summary.json",
        ]


def test_existing_run_is_refused_unless_overwrite(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"old": write_png})
    before = {p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file()}
    cfg2 = cfg.replace(seed=5)
    summary2, arrays2 = make_run(cfg2, scale=2.0)
    with pytest.raises(StoreError, match=r"already holds an attnflow run; pass overwrite=True to replace it"):
        write_run(out, to_toml(cfg2), summary2, arrays2)
    assert {p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file()} == before


def test_overwrite_replaces_attnflow_files_only(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"old": write_png})
    cfg2 = cfg.replace(seed=5)
    summary2, arrays2 = make_run(cfg2, scale=2.0)
    write_run(out, to_toml(cfg2), summary2, arrays2, overwrite=True)  # no user file: one atomic rename
    assert tree(tmp_path) == ["run", "run/.attnflow.json", "run/config.toml", "run/results.npz", "run/summary.json"]
    assert load_config(out / "config.toml").seed == 5
    np.testing.assert_array_equal(load(out)["xs"].values, arrays2["xs"])

    write_run(out, to_toml(cfg), summary, arrays, {"old": write_png}, overwrite=True)
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "plot.png").write_bytes(b"user's")
    write_run(out, to_toml(cfg2), summary2, arrays2, {"new": write_png}, overwrite=True)  # in place, around them
    assert tree(tmp_path) == [
        "run",
        "run/.attnflow.json",
        "run/config.toml",
        "run/mine",
        "run/mine/plot.png",
        "run/new.png",
        "run/notes.txt",
        "run/results.npz",
        "run/summary.json",
    ]
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "plot.png").read_bytes() == b"user's"
    assert load_config(out / "config.toml").seed == 5 and is_complete(out)
    assert foreign_files(out) == ["mine", "notes.txt"]
    np.testing.assert_array_equal(load(out)["xs"].values, arrays2["xs"])

    # a user's file that the new run would write over is an error, and nothing changes
    (out / "old.png").write_bytes(b"user's own old.png")
    before = {p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file()}
    with pytest.raises(StoreError, match=r"holds 'old.png', which attnflow did not write"):
        write_run(out, to_toml(cfg), summary, arrays, {"old": write_png}, overwrite=True)
    assert {p: (tmp_path / p).read_bytes() for p in tree(tmp_path) if (tmp_path / p).is_file()} == before


def test_files_attnflow_did_not_record_are_the_users(tmp_path, cfg):
    """The three run files with no .attnflow.json (the user's own, or a run older than the list): readable,
    never replaced or removed; writing into the directory adds only files attnflow then owns."""
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    (out / OWNED_FILE).unlink()
    files = {p: (out / p).read_bytes() for p in ("config.toml", "results.npz", "summary.json")}
    assert owned_files(out) == {OWNED_FILE} and foreign_files(out) == sorted(files)
    assert store.unowned_run_files(out) == ["config.toml", "summary.json", "results.npz"]
    assert is_run(out) and load(out)["xs"].shape == (M, T, N, D)  # reading still works
    for overwrite in (False, True):
        with pytest.raises(StoreError, match=r"holds 'config.toml', which attnflow did not write .* move it away"):
            write_run(out, to_toml(cfg), summary, arrays, overwrite=overwrite)
    assert sorted(remove_run(out)) == sorted(files)  # nothing of theirs removed
    output.write(out, {"extra": write_png})
    assert owned_files(out) == {OWNED_FILE, "extra.png"}
    assert {p: (out / p).read_bytes() for p in files} == files
    (out / OWNED_FILE).write_text("{not json")  # a list that cannot be read proves nothing either
    assert owned_files(out) == {OWNED_FILE}


def test_figures_are_drawn_all_or_none_and_a_full_disk_names_the_file(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"a": write_png, "b": write_png})
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}

    def disk_full(path):
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(StoreError, match=rf"cannot write {re.escape(str(out))}/b.png: No space left on device") as info:
        output.write(out, {"a": write_png, "b": disk_full})
    assert info.value.__cause__.errno == errno.ENOSPC  # the command line's exit status 1 reads it there
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before  # a.png not replaced
    written = output.write(out, {"a": write_png, "b": write_png})
    assert [p.name for p in written] == ["a.png", "b.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no temporaries


def test_remove_run_keeps_the_users_files(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    plain = write_run(tmp_path / "plain", to_toml(cfg), summary, arrays, {"fig": write_png})
    assert remove_run(plain) == [] and not plain.exists()
    out = write_run(tmp_path / "run", to_toml(cfg), summary, arrays, {"fig": write_png})
    (out / "notes.txt").write_text("mine")
    assert remove_run(out) == ["notes.txt"]
    assert tree(tmp_path) == ["run", "run/.attnflow.json", "run/notes.txt"]
    assert is_run(out) and not is_complete(out)  # attnflow's still, so a later overwrite may write there
    write_run(out, to_toml(cfg), summary, arrays, overwrite=True)
    assert is_complete(out) and (out / "notes.txt").read_text() == "mine"
    with pytest.raises(StoreError, match="not an attnflow run"):
        remove_run(tmp_path / "run" / "notes.txt")


def test_a_symbolic_link_is_never_written_through(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(StoreError, match=r"link: it is a symbolic link .*writes only into real directories"):
        write_run(tmp_path / "link", to_toml(cfg), summary, arrays, overwrite=True)
    assert tree(tmp_path) == ["link", "real"]


def test_existing_empty_dir_is_used_and_other_things_are_refused(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    (tmp_path / "empty").mkdir()
    assert is_complete(write_run(tmp_path / "empty", to_toml(cfg), summary, arrays))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(StoreError, match="non-empty directory that is not an attnflow run; refusing to replace it"):
        write_run(tmp_path / "mine", to_toml(cfg), summary, arrays)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match="it is a file, not a directory"):
        write_run(tmp_path / "afile", to_toml(cfg), summary, arrays)
    assert sorted(os.listdir(tmp_path)) == ["afile", "empty", "mine"]


def test_parent_is_a_file(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError) as excinfo:
        write_run(tmp_path / "f" / "sub" / "run", to_toml(cfg), summary, arrays)
    assert "is a file, not a directory" in str(excinfo.value) and str(tmp_path / "f") in str(excinfo.value)
    assert isinstance(excinfo.value, OSError) and isinstance(excinfo.value, ValueError)
    assert tree(tmp_path) == ["f"]


def test_missing_parents_are_created(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    assert is_complete(write_run(tmp_path / "a" / "b" / "run", to_toml(cfg), summary, arrays))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores permissions")
def test_unwritable_parent(tmp_path, cfg):
    summary, arrays = make_run(cfg)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="cannot write run"):
            write_run(locked / "run", to_toml(cfg), summary, arrays)
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


def test_permission_denied_is_a_store_error(tmp_path, cfg, monkeypatch):
    summary, arrays = make_run(cfg)

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(store.os, "mkdir", denied)
    with pytest.raises(StoreError, match=r"cannot write run .*run: Permission denied"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    monkeypatch.undo()
    assert tree(tmp_path) == []


def test_disk_errors_become_store_errors_and_clean_up(tmp_path, cfg, monkeypatch):
    summary, arrays = make_run(cfg)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "_write_npz", no_space)
    with pytest.raises(StoreError, match="cannot write run .*No space left on device"):
        write_run(tmp_path / "run", to_toml(cfg), summary, arrays)
    assert tree(tmp_path) == []


def test_is_complete(tmp_path, cfg):
    assert not is_complete(tmp_path / "missing")
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "config.toml").write_text("")
    (tmp_path / "part" / "summary.json").write_text("{}")
    assert not is_complete(tmp_path / "part")
    (tmp_path / "part" / "results.npz").mkdir()  # a directory is not the archive
    assert not is_complete(tmp_path / "part")
    summary, arrays = make_run(cfg)
    assert is_complete(write_run(tmp_path / "run", to_toml(cfg), summary, arrays))


# ---------------------------------------------------------------------------------------------
# Loading errors


def test_load_errors_name_the_file(tmp_path, cfg):
    with pytest.raises(StoreError, match="does not exist"):
        load(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match=r"not a complete run \(missing config.toml, summary.json, results.npz\)"):
        load(tmp_path / "empty")
    summary, arrays = make_run(cfg)

    def fresh(name):
        return write_run(tmp_path / name, to_toml(cfg), summary, arrays, overwrite=True)

    run = fresh("garbage")
    (run / "results.npz").write_bytes(b"not a zip at all")
    with pytest.raises(StoreError, match=re.escape(str(run / "results.npz"))):
        load(run)
    run = fresh("truncated")
    data = (run / "results.npz").read_bytes()
    (run / "results.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=re.escape(str(run / "results.npz"))):
        load(run)
    run = fresh("pickled")
    (run / "results.npz").unlink()
    np.savez(run / "results.npz", obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(StoreError, match="need pickling|pickled"):
        load(run)
    run = fresh("npy")
    (run / "results.npz").unlink()
    with open(run / "results.npz", "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(StoreError, match="not a .npz archive"):
        load(run)
    run = fresh("badjson")
    (run / "summary.json").write_text("{")
    with pytest.raises(StoreError, match=re.escape(str(run / "summary.json")) + " is unreadable or not valid JSON"):
        load(run)
    run = fresh("badtoml")
    (run / "config.toml").write_text("n = = 1")
    with pytest.raises(StoreError, match=re.escape(str(run / "config.toml")) + " is unreadable or not valid TOML"):
        load(run)
    for bad_dims, fragment in [("[1, 2]", "must map array names"), ('{"xs": ["a"]}', "names 1 dimensions for 'xs'")]:
        run = fresh("baddims")
        (run / "results.npz").unlink()
        with zipfile.ZipFile(run / "results.npz", "w") as zf:
            for name, arr in [("xs", np.zeros((2, 3))), (DIMS_KEY, np.array(bad_dims))]:
                with zf.open(name + ".npy", "w") as member:
                    np.lib.format.write_array(member, arr)
        with pytest.raises(StoreError, match=re.escape(str(run / "results.npz")) + ".*" + re.escape(fragment)):
            load(run)


# ---------------------------------------------------------------------------------------------
# Manifests and run names


def test_manifest_round_trip_and_atomic_write(tmp_path):
    axes = {"beta": [0.5, 1.0], "d": [2, 8]}
    runs = [{"name": run_name(p), "point": p, "status": "pending"} for p, _ in expand_grid(load_config(), axes)]
    runs[0]["status"] = "done"
    runs[1]["error"] = "kept as is"
    path = write_manifest(tmp_path / "sweep", axes, runs)
    assert path == tmp_path / "sweep" / "manifest.json"
    assert os.listdir(tmp_path / "sweep") == ["manifest.json"]
    m = read_manifest(tmp_path / "sweep")
    assert m == {"axes": axes, "runs": runs}
    assert read_manifest(path) == m
    assert [r["name"] for r in m["runs"]] == ["beta=0.5_d=2", "beta=0.5_d=8", "beta=1.0_d=2", "beta=1.0_d=8"]
    assert json.loads(path.read_text())["format"] == "attnflow-sweep"


def test_manifest_replace_failure_keeps_the_old_one(tmp_path, monkeypatch):
    axes = {"seed": [0]}
    runs = [{"name": "seed=0", "point": {"seed": 0}, "status": "pending"}]
    write_manifest(tmp_path, axes, runs)

    def fail(src, dst):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(store.os, "replace", fail)
    with pytest.raises(StoreError, match="cannot write .*manifest.json: I/O error"):
        write_manifest(tmp_path, axes, [dict(runs[0], status="done")])
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["manifest.json"]
    assert read_manifest(tmp_path)["runs"][0]["status"] == "pending"


@pytest.mark.parametrize(
    "axes, runs, fragment",
    [
        (
            {"d": [2]},
            [{"name": "x", "point": {"d": 2}, "status": "running"}],
            "status must be one of pending, done, failed",
        ),
        ({"d": [2]}, [{"name": "x", "point": {"d": 2}, "status": "done"}] * 2, "run name 'x' appears twice"),
        (
            {"d": [2]},
            [{"name": "x", "point": {"beta": 2}, "status": "done"}],
            "point must give a value for each axis ['d']",
        ),
        ({"d": [2]}, [{"name": "../x", "point": {"d": 2}, "status": "done"}], "not starting with '.'"),
        ({"d": [2]}, [{"name": "a/b", "point": {"d": 2}, "status": "done"}], "path separators"),
        ({"d": [2]}, [{"name": "x", "point": {"d": 2}}], "must be a dict with name, point and status"),
        ({"d": 2}, [], "axis 'd' must be a list of values"),
        ([2], [], "axes must map grid keys"),
    ],
)
def test_manifest_validation(tmp_path, axes, runs, fragment):
    with pytest.raises(StoreError) as excinfo:
        write_manifest(tmp_path / "s", axes, runs)
    assert fragment in str(excinfo.value)
    assert not (tmp_path / "s").exists()


def test_read_manifest_errors(tmp_path):
    with pytest.raises(StoreError, match="manifest.json does not exist"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2")
    with pytest.raises(
        StoreError, match=re.escape(str(tmp_path / "manifest.json")) + " is unreadable or not valid JSON"
    ):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(StoreError, match="not an attnflow sweep manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(
        '{"axes": {"d": [2]}, "runs": [{"name": "x", "point": {}, "status": "done"}]}'
    )
    with pytest.raises(StoreError, match=re.escape(str(tmp_path / "manifest.json")) + ": runs\\[0\\] point"):
        read_manifest(tmp_path)


def test_run_name_examples():
    assert run_name({"beta": 0.1, "d": 8}) == "beta=0.1_d=8"
    assert run_name({"d": 8, "beta": 0.1}) == "beta=0.1_d=8"  # independent of axis order
    assert run_name({"solver": "rk4"}) == "solver=rk4"
    assert run_name({"beta": 1e-06, "progress": False}) == "beta=1e-06_progress=false"
    assert run_name({"n_save": 11, "t1": 2.0}) == "n_save=11_t1=2.0"
    assert run_name({}) == "run"
    assert run_name({"d": [2, 8]}) == "d=2,8"
    assert run_name({"d": [2]}) == "d=2,"


def test_run_name_disambiguates_with_a_hash():
    ambiguous = [{"d": 2}, {"d": 2.0}, {"d": "2"}, {"d": [2]}, {"d": True}, {"d": "true"}, {"d": 1}]
    names = [run_name(p) for p in ambiguous]
    assert len(set(names)) == len(names)
    slash = run_name({"init_file": "data/x0.npy"})
    assert re.fullmatch(r"init_file=data-x0\.npy__[0-9a-f]{10}", slash)
    assert run_name({"init_file": "data/x0.npy"}) == slash  # deterministic
    assert run_name({"init_file": "data_x0.npy"}) != run_name({"init_file": "data-x0.npy"})
    long = run_name({"beta": list(np.linspace(0.1, 9, 30))})
    assert len(long) <= 100 and re.search(r"__[0-9a-f]{10}$", long)
    assert run_name({"beta": list(np.linspace(0.1, 9, 30))}) != run_name({"beta": list(np.linspace(0.1, 9, 31))})
    assert run_name({"x": float("nan")}) != run_name({"x": float("inf")})


def test_run_names_unique_over_a_grid():
    grid = expand_grid(
        load_config(), {"beta": np.linspace(0.1, 9, 40).tolist(), "d": [2, 3, 8], "solver": ["tsit5", "dopri5"]}
    )
    names = [run_name(p) for p, _ in grid]
    assert len(set(names)) == len(names) == 240
    assert all(re.fullmatch(r"[A-Za-z0-9.+=,_-]+", n) and len(n) <= 100 for n in names)


_values = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=12),
    st.lists(st.integers(-5, 5), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["beta", "d", "n_save", "a_b", "x"]), _values, max_size=3),
    st.dictionaries(st.sampled_from(["beta", "d", "n_save", "a_b", "x"]), _values, max_size=3),
)
def test_run_name_property(p, q):
    a, b = run_name(p), run_name(q)
    for name in (a, b):
        assert len(name) <= 100 and not name.startswith(".")
        assert re.fullmatch(r"[A-Za-z0-9.+=,_-]+", name), name
    same = json.dumps(p, sort_keys=True) == json.dumps(q, sort_keys=True)
    assert (a == b) == same


# ---------------------------------------------------------------------------------------------
# Loading sweeps


def write_sweep(root, axes, skip=()):
    """A sweep directory as the sweep runner writes it; runs in ``skip`` stay pending."""
    base = load_config({"n": N, "d": D, "seeds": M, "t1": 3.0, "n_save": T})
    grid = expand_grid(base, axes)
    runs = [{"name": run_name(p), "point": p, "status": "pending"} for p, _ in grid]
    write_manifest(root, axes, runs)
    expected = {}
    for i, ((point, c), run) in enumerate(zip(grid, runs)):
        if i in skip:
            continue
        summary, arrays = make_run(c, scale=1.0 + i)
        summary["steps"] = 100 + i
        write_run(root / run["name"], to_toml(c), summary, arrays)
        run["status"] = "done"
        expected[tuple(point.values())] = (arrays, summary)
    write_manifest(root, axes, runs)
    return expected


def test_load_one_axis_sweep(tmp_path):
    axes = {"beta": [0.5, 1.0, 4.0]}
    expected = write_sweep(tmp_path / "sweep", axes)
    ds = load(tmp_path / "sweep")
    assert ds["xs"].dims == ("beta", "member", "time", "particle", "coord")
    assert ds["beta"].values.tolist() == [0.5, 1.0, 4.0]
    for (beta,), (arrays, summary) in expected.items():
        np.testing.assert_array_equal(ds["xs"].sel(beta=beta).values, arrays["xs"])
        assert ds["steps"].sel(beta=beta).item() == summary["steps"]
    assert ds["steps"].dims == ("beta",)
    assert ds.attrs["n"] == N and ds.attrs["d"] == [D] and ds.attrs["save_times"] == []
    assert "beta" not in ds.attrs and "steps" not in ds.attrs
    assert ds.attrs["sweep_axes"] == ["beta"]
    assert load(tmp_path / "sweep" / "manifest.json").equals(ds)


def test_load_two_axis_sweep_is_a_product(tmp_path):
    axes = {"beta": [4.0, 0.5, 1.0], "seed": [0, 7]}  # manifest order, not sorted order, is kept
    expected = write_sweep(tmp_path / "sweep", axes)
    ds = load(tmp_path / "sweep")
    assert ds["xs"].dims == ("beta", "seed", "member", "time", "particle", "coord")
    assert ds["beta"].values.tolist() == [4.0, 0.5, 1.0] and ds["seed"].values.tolist() == [0, 7]
    assert ds["n_clusters"].dims == ("beta", "seed", "time", "member")
    np.testing.assert_array_equal(ds["time"].values, np.linspace(0, 3.0, T))
    for (beta, seed), (arrays, summary) in expected.items():
        cell = ds.sel(beta=beta, seed=seed)
        np.testing.assert_array_equal(cell["xs"].values, arrays["xs"])
        np.testing.assert_array_equal(cell["mean_inner_product"].values, summary["mean_inner_product"])
        assert cell["steps"].item() == summary["steps"]
    assert "run" not in ds.dims and "seed" not in ds.attrs


def test_load_partial_two_axis_sweep(tmp_path):
    axes = {"beta": [0.5, 1.0], "d": [2, 3]}
    expected = write_sweep(tmp_path / "sweep", axes, skip={3})
    os.makedirs(tmp_path / "sweep" / ".beta=1.0_d=3.tmp-1-abcd")  # a killed writer's leftovers are ignored
    ds = load(tmp_path / "sweep")
    assert dict(ds.sizes)["beta"] == 2 and dict(ds.sizes)["d"] == 2
    assert np.isnan(ds["xs"].sel(beta=1.0, d=3).values).all()
    np.testing.assert_array_equal(ds["xs"].sel(beta=0.5, d=3).values, expected[(0.5, 3)][0]["xs"])


def test_load_non_product_sweep_keeps_a_run_dimension(tmp_path):
    axes = {"beta": [0.5, 1.0], "seed": [0, 1]}
    write_sweep(tmp_path / "sweep", axes)
    m = read_manifest(tmp_path / "sweep")
    write_manifest(tmp_path / "sweep", m["axes"], m["runs"][:3])  # a hand-edited, non-product grid
    ds = load(tmp_path / "sweep")
    assert ds["xs"].dims[0] == "run" and ds.sizes["run"] == 3
    assert ds["beta"].dims == ("run",) and ds["beta"].values.tolist() == [0.5, 0.5, 1.0]
    assert ds["seed"].values.tolist() == [0, 1, 0]
    assert ds["run_name"].values.tolist() == [r["name"] for r in m["runs"][:3]]


def test_load_sweep_without_complete_runs(tmp_path):
    write_manifest(tmp_path, {"d": [2]}, [{"name": "d=2", "point": {"d": 2}, "status": "pending"}])
    with pytest.raises(StoreError, match="no complete runs yet"):
        load(tmp_path)


def test_store_writes_only_inside_the_given_directories(tmp_path):
    write_sweep(tmp_path / "sweep", {"beta": [1.0, 2.0]})
    entries = tree(tmp_path)
    assert all(e == "sweep" or e.startswith("sweep/") for e in entries)
    assert not [e for e in entries if os.path.basename(e).startswith(".") and os.path.basename(e) != OWNED_FILE]
