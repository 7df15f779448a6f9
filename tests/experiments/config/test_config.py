"""Configuration: defaults, layering, --set parsing, type and range errors, grids, TOML round trip."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import tomllib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from attnflow.experiments import config as cfgmod
from attnflow.experiments.config import (
    CHECKS,
    KEYS,
    MAX_GRID_POINTS,
    Config,
    ConfigError,
    Key,
    describe_keys,
    expand_grid,
    load_config,
    parse_grid,
    parse_override,
    register,
    register_check,
    to_toml,
    validate,
)
from attnflow.experiments.config.types import linspace_values


@pytest.fixture
def registry():
    """The key registry and check list, restored after the test, so tests can register freely."""
    keys, checks = dict(KEYS), list(CHECKS)
    yield KEYS
    KEYS.clear()
    KEYS.update(keys)
    CHECKS[:] = checks


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------
# Defaults and layering


def test_defaults_match_the_design():
    c = load_config()
    assert c.experiment == "simulate" and c.model == "sa" and c.n == 32
    assert c.d == (3,) and c.beta == (1.0,) and c.seeds == 16 and c.seed == 0
    assert c.init == "uniform" and c.rho == 0.0 and c.cap_angle == 0.7853981633974483
    assert c.n_init_clusters == 3 and c.spread == 0.05 and c.init_file == ""
    assert c.t1 == 15.0 and c.n_save == 151 and c.save_times == ()
    assert c.solver == "tsit5" and c.dt == 0.0 and c.rtol == 1e-6 and c.atol == 1e-9
    assert c.dtype == "float64" and c.delta == 1e-3 and c.progress is True
    assert c.stop_when_clustered is False
    assert list(c) == list(KEYS)
    assert Config() == c


def test_layers_defaults_base_file_set(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('n = 64\nsolver = "rk4"\ndt = 0.05\n')
    base = {"n": 8, "t1": 30.0, "beta": [1, 2]}
    c = load_config(path, ["t1=5", "beta=4"], base=base)
    assert c.n == 64  # file beats base
    assert c.t1 == 5.0  # --set beats base
    assert c.beta == (4.0,)  # --set beats base, scalar becomes a list
    assert c.solver == "rk4" and c.dt == 0.05
    assert load_config(base=base).n == 8  # base beats the registry default
    assert load_config(str(path)).n == 64  # str paths work too


def test_dict_source_and_toml_text_source():
    assert load_config({"n": 5}).n == 5
    assert load_config("n = 6\nd = [2, 4]\n").d == (2, 4)


def test_single_override_string_is_not_split_into_characters():
    assert load_config(None, "n=9").n == 9


# ---------------------------------------------------------------------------------------------
# --set parsing


@pytest.mark.parametrize(
    "overrides, key, expected",
    [
        (["solver=rk4", "dt=0.1"], "solver", "rk4"),
        (["beta=4"], "beta", (4.0,)),
        (["d=[2,8]"], "d", (2, 8)),
        (["d=2,8"], "d", (2, 8)),
        (["beta=0.5,1,2"], "beta", (0.5, 1.0, 2.0)),
        (["beta=[0.5, 1e-3]"], "beta", (0.5, 1e-3)),
        (["n=7.0"], "n", 7),
        (["progress=false"], "progress", False),
        (["init_file=2024"], "init_file", "2024"),  # str keys keep the raw text
        (["init_file=data/x0.npy"], "init_file", "data/x0.npy"),
        (['init_file="a b.npy"'], "init_file", "a b.npy"),
        (["init_file="], "init_file", ""),
        (["rtol = 1e-3"], "rtol", 1e-3),
        (["t1=3"], "t1", 3.0),
        (["save_times=[0, 1.5, 3]", "t1=3"], "save_times", (0.0, 1.5, 3.0)),
    ],
)
def test_set_examples(overrides, key, expected):
    value = load_config(None, overrides)[key]
    assert value == expected and type(value) is type(expected)
    if isinstance(expected, tuple):
        assert all(type(a) is type(b) for a, b in zip(value, expected))


def test_set_linspace_is_written_as_a_user_would():
    c = load_config(None, ["beta=0.1:9:90"])
    # step 0.1: the values 0.1, 0.2, … 9.0 (numpy's third is 0.30000000000000004), each within 1e-15 of numpy's
    assert c.beta == tuple(round(0.1 * k, 1) for k in range(1, 91))
    assert c.beta[2] == 0.3 and repr(c.beta[2]) == "0.3"
    assert np.max(np.abs(np.array(c.beta) - np.linspace(0.1, 9, 90))) < 1e-14
    assert load_config(None, ["beta=2:5:1"]).beta == (2.0,)
    text = to_toml(c)
    assert "0.30000000000000004" not in text and "    0.3,\n" in text
    assert load_config(text) == c  # config.toml reads back to the same values


@pytest.mark.parametrize(
    "a, b, n", [(0, 1, 7), (0.1, 9, 90), (-0.3, 0.3, 7), (1e-20, 1e-19, 4), (1, 2, 3001), (0, 2 / 3, 5), (-5, 5, 11)]
)
def test_linspace_values_are_the_shortest_decimals_within_1e_12(a, b, n):
    exact = np.linspace(a, b, n)
    values = linspace_values(a, b, n)
    scale = np.max(np.abs(exact))
    assert len(values) == n and len(set(values)) == n  # distinct, as numpy's
    assert np.max(np.abs(np.array(values) - exact)) <= 1e-12 * scale
    decimals = max(len(repr(v).split(".")[1].rstrip("0")) if "e" not in repr(v) else 0 for v in values)
    if decimals:  # one decimal fewer would move a value by more than 1e-12 or merge two of them
        shorter = [round(float(v), decimals - 1) for v in exact]
        assert len(set(shorter)) < n or np.max(np.abs(np.array(shorter) - exact)) > 1e-12 * scale


def test_linspace_values_of_sixths_and_signs():
    assert linspace_values(0, 1, 7) == [0.0, 0.166666666667, 0.333333333333, 0.5, 0.666666666667, 0.833333333333, 1.0]
    assert linspace_values(-0.3, 0.3, 7) == [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3]
    assert all(str(v) != "-0.0" for v in linspace_values(-1, 1, 3))
    assert linspace_values(0, 0, 1) == [0.0]


def test_parse_override_returns_raw_values():
    assert parse_override("beta=0.1:9:90") == ("beta", "0.1:9:90")
    assert parse_override("d=[2,8]") == ("d", [2, 8])
    assert parse_override("solver=rk4") == ("solver", "rk4")
    # a newline cannot smuggle a second key in
    assert parse_override("n=1\nseed = 3") == ("n", "1\nseed = 3")


@pytest.mark.parametrize(
    "override, fragments",
    [
        ("bta=1", ["--set bta=1", "unknown key 'bta'; did you mean 'beta'?"]),
        ("sover=rk4", ["unknown key 'sover'; did you mean 'solver'?"]),
        ("zzzzzz=1", ["unknown key 'zzzzzz'", "valid keys:", "beta"]),
        ("solver=rk5", ["solver must be one of", "'tsit5'", "got 'rk5'", "did you mean 'rk4'?"]),
        ("dtype=float16", ["dtype must be one of 'float32', 'float64'", "'float16'"]),
        ("model=transformer", ["model must be one of 'sa', 'usa', 'usa-rescaled'", "'transformer'"]),
        ("n=3.5", ["n must be an integer ≥ 1", "got 3.5"]),
        ('n="5"', ["n must be an integer", "got '5' (a string)"]),
        ("n=true", ["n must be an integer", "got true"]),
        ("n=0", ["n must be an integer ≥ 1", "got 0"]),
        ("seed=-1", ["seed must be an integer ≥ 0", "got -1"]),
        ("n_save=1", ["n_save must be an integer ≥ 2", "got 1"]),
        ("d=1", ["d must be an integer ≥ 2", "got 1"]),
        ("d=[4, 1]", ["d[1] must be an integer ≥ 2", "got 1"]),
        ("d=2.5", ["d must be an integer", "2.5"]),
        ("d=[]", ["d must be", "empty list"]),
        ("beta=-inf", ["beta must be a finite number", "-inf"]),
        ("beta=[1, inf]", ["beta[1] must be a finite number", "inf"]),
        ("beta=nan", ["beta must be a finite number", "nan"]),
        ("beta=[]", ["beta must be", "empty list"]),
        ("beta=abc", ["beta must be", "'abc' (a string)"]),
        ("beta=1:2:0", ["'1:2:0'", "a:b:n", "integer n ≥ 1"]),
        ("beta=1:2:x", ["'1:2:x'", "a:b:n"]),
        ("beta=1:2:2.5", ["a:b:n"]),
        ("beta=1,,2", ["empty value", "'1,,2'"]),
        ("beta=1,x", ["beta[1] must be a finite number", "'x' (a string)"]),
        ("beta=true", ["beta must be", "got true"]),
        ("t1=-1", ["t1 must be a finite number > 0", "got -1.0"]),
        ("t1=inf", ["t1 must be a finite number", "inf"]),
        ("cap_angle=0", ["cap_angle must be a finite number > 0 and ≤ 3.14159", "got 0.0"]),
        ("cap_angle=3.2", ["cap_angle must be", "≤ 3.14159", "got 3.2"]),
        ("rho=1", ["rho must be a finite number ≥ -1 and < 1", "got 1.0"]),
        ("delta=0", ["delta must be a finite number > 0 and ≤ 2", "got 0.0"]),
        ("delta=2.5", ["delta must be", "got 2.5"]),
        ("rtol=0", ["rtol must be a finite number > 0", "got 0.0"]),
        ("atol=-1e-9", ["atol must be a finite number > 0", "got -1e-09"]),
        ("dt=-0.1", ["dt must be a finite number ≥ 0", "got -0.1"]),
        ("progress=1", ["progress must be true or false", "got 1"]),
        ("progress=yes", ["progress must be true or false", "'yes' (a string)"]),
        ("solver=true", None),  # str keys keep raw text: 'true' is then not a solver
        ("save_times=[1, -1]", ["save_times[1] must be a finite number ≥ 0"]),
        ("noequals", ["--set expects key=value", "'noequals'"]),
        ("=3", ["--set expects key=value", "key is empty"]),
    ],
)
def test_set_errors_name_key_value_and_allowed(override, fragments):
    with pytest.raises(ConfigError) as excinfo:
        load_config(None, [override])
    msg = one_line_error(excinfo)
    for fragment in fragments or ["solver must be one of", "'true'"]:
        assert fragment in msg, (fragment, msg)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ---------------------------------------------------------------------------------------------
# Types from dicts and files


def test_type_rules():
    assert load_config({"t1": 3}).t1 == 3.0 and type(load_config({"t1": 3}).t1) is float
    assert load_config({"n": 3.0}).n == 3 and type(load_config({"n": 3.0}).n) is int
    assert load_config({"n": np.int64(4), "t1": np.float32(0.5)}).n == 4
    assert load_config({"progress": np.bool_(False)}).progress is False
    assert load_config({"beta": np.array([1.0, 2.0])}).beta == (1.0, 2.0)
    assert load_config({"d": (2, 3.0)}).d == (2, 3)
    with pytest.raises(ConfigError, match=r"n must be an integer ≥ 1, got true"):
        load_config({"n": True})
    with pytest.raises(ConfigError, match=r"t1 must be a finite number > 0, got false"):
        load_config({"t1": False})
    with pytest.raises(ConfigError, match=r"t1 must be .*got '3' \(a string\)"):
        load_config({"t1": "3"})
    with pytest.raises(ConfigError, match=r"beta must be .*'0.5' \(a string\)"):
        load_config({"beta": "0.5"})
    with pytest.raises(ConfigError, match=r"beta must be .*array of shape \(2, 2\)"):
        load_config({"beta": np.ones((2, 2))})
    with pytest.raises(ConfigError, match=r"experiment must be a string, got 3"):
        load_config({"experiment": 3})
    with pytest.raises(ConfigError, match=r"key names must be strings"):
        load_config({3: 3})


def test_nested_tables_are_errors(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('n = 4\n[solver]\nname = "rk4"\n')
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    msg = one_line_error(excinfo)
    assert str(path) in msg and "solver must be one of" in msg and "nested tables are not supported" in msg
    path.write_text("[betta]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown key 'betta'; did you mean 'beta'\?"):
        load_config(path)


def test_file_errors(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as excinfo:
        load_config(missing)
    assert f"config file {str(missing)!r} does not exist" in one_line_error(excinfo)
    bad = tmp_path / "bad.toml"
    bad.write_text("n = 4\nbeta = = 2\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(bad)
    msg = one_line_error(excinfo)
    assert str(bad) in msg and "malformed TOML" in msg and "line 2" in msg and "column" in msg
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"n = \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)
    with pytest.raises(ConfigError, match="config text: malformed TOML"):
        load_config("n = \n")
    with pytest.raises(ConfigError, match="TOML file path, TOML text or a dict"):
        load_config(42)


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("bta = 2\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    assert one_line_error(excinfo) == f"{path}: unknown key 'bta'; did you mean 'beta'?"


def test_bad_base_is_reported_as_experiment_defaults():
    with pytest.raises(ConfigError, match=r"^experiment defaults: unknown key 'nn'; did you mean 'n'\?$"):
        load_config(base={"nn": 3})


# ---------------------------------------------------------------------------------------------
# Cross-key rules


def test_fixed_step_solvers_need_dt():
    for solver in ("euler", "renormalized_euler", "rk4", "lie_euler", "cg3"):
        with pytest.raises(ConfigError) as excinfo:
            load_config({"solver": solver})
        msg = one_line_error(excinfo)
        assert "dt must be > 0" in msg and repr(solver) in msg
        assert load_config({"solver": solver, "dt": 0.1}).dt == 0.1
    for solver in ("tsit5", "dopri5", "dopri8"):
        assert load_config({"solver": solver}).dt == 0.0


@pytest.mark.parametrize(
    "values, fragments",
    [
        (
            {"save_times": [0, 2, 1]},
            ["save_times must be strictly increasing", "save_times[1] = 2.0", "save_times[2] = 1.0"],
        ),
        ({"save_times": [0, 1, 1]}, ["strictly increasing"]),
        ({"save_times": [0, 20], "t1": 15}, ["save_times must lie within [0, t1 = 15.0]", "got 20.0"]),
        ({"init": "file"}, ["init = 'file' needs init_file"]),
        ({"init": "equiangular", "n": 3, "d": 3, "rho": -0.6}, ["rho must be ≥ -1/(n-1) = -0.5", "-0.6"]),
        ({"init": "equiangular", "n": 4, "d": [8, 3], "rho": 0.2}, ["d must be ≥ 4", "got d = 3"]),
        ({"init": "orthogonal", "n": 5, "d": [2, 8]}, ["d must be ≥ n = 5 for orthogonal init", "got d = 2"]),
        ({"init": "clusters", "n": 2, "n_init_clusters": 3}, ["n_init_clusters must be ≤ n = 2", "got 3"]),
    ],
)
def test_cross_key_errors(values, fragments):
    with pytest.raises(ConfigError) as excinfo:
        load_config(values)
    msg = one_line_error(excinfo)
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)


def test_cross_key_valid_cases():
    assert load_config({"save_times": [0, 1, 15], "t1": 15}).save_times == (0.0, 1.0, 15.0)
    assert load_config({"init": "equiangular", "n": 3, "d": 2, "rho": -0.5}).rho == -0.5  # simplex fits d = n − 1
    assert load_config({"init": "orthogonal", "n": 4, "d": [4, 8]}).d == (4, 8)
    assert load_config({"init": "file", "init_file": "x.npy"}).init_file == "x.npy"
    assert validate({"n": 3, "beta": 2}) == load_config({"n": 3, "beta": [2.0]})  # a dict is normalized first
    with pytest.raises(ConfigError, match="dt must be > 0"):
        validate({"solver": "rk4"})


def test_registered_checks_run(registry):
    @register_check
    def no_big_usa(c):
        if c.model == "usa" and max(c.beta) > 50:
            raise ConfigError(f"beta must be ≤ 50 for model 'usa'; got {max(c.beta)}")

    assert load_config({"model": "usa", "beta": 10}).beta == (10.0,)
    with pytest.raises(ConfigError, match="beta must be ≤ 50 for model 'usa'; got 60.0"):
        load_config({"model": "usa", "beta": 60})
    register_check(no_big_usa)
    assert CHECKS.count(no_big_usa) == 1


# ---------------------------------------------------------------------------------------------
# Config object


def test_config_is_immutable_and_mapping_like():
    c = load_config({"n": 5, "beta": [1, 2]})
    assert c["n"] == c.n == 5 and "beta" in c and len(c) == len(KEYS)
    with pytest.raises(AttributeError, match="immutable"):
        c.n = 6
    with pytest.raises(TypeError):
        c["n"] = 6  # type: ignore[index]
    with pytest.raises(AttributeError, match="no key 'bta'; did you mean 'beta'"):
        _ = c.bta
    d = c.to_dict()
    assert d["beta"] == [1.0, 2.0] and isinstance(d["beta"], list)
    d["n"] = 99
    assert c.n == 5  # to_dict is a copy
    assert load_config(c.to_dict()) == c


def test_replace_validates():
    c = load_config()
    c2 = c.replace(n=5, beta=[2, 3])
    assert c2.n == 5 and c2.beta == (2.0, 3.0) and c.n == 32
    with pytest.raises(ConfigError, match="dt must be > 0"):
        c.replace(solver="euler")
    with pytest.raises(ConfigError, match="unknown key 'nn'"):
        c.replace({"nn": 1})


def test_equality_hash_pickle():
    a, b = load_config({"n": 4}), load_config(None, ["n=4"])
    assert a == b and hash(a) == hash(b)
    assert a != load_config({"n": 5})
    assert pickle.loads(pickle.dumps(a)) == a
    assert isinstance(pickle.loads(pickle.dumps(a)), Config)


# ---------------------------------------------------------------------------------------------
# Registry


def test_register_a_new_key(registry):
    register(Key("experts", "int", 1, "number of experts", minimum=1))
    assert load_config(None, ["experts=4"]).experts == 4
    with pytest.raises(ConfigError, match="experts must be an integer ≥ 1, got 0"):
        load_config({"experts": 0})
    register(Key("experts", "int", 1, "number of experts", minimum=1))  # identical: fine
    with pytest.raises(ConfigError, match="already registered"):
        register(Key("experts", "int", 2, "number of experts", minimum=1))
    assert "experts" in describe_keys()


def test_every_key_is_declared_when_the_config_module_is_imported():
    """In a fresh interpreter the variant keys and their rules exist without importing the models."""
    script = (
        "import sys\n"
        "from attnflow.experiments.config import ConfigError, load_config\n"
        "c = load_config(None, ['heads=2', 'd=4'])\n"
        "print(c.heads, c.d)\n"
        "try:\n"
        "    load_config(None, ['heads=3', 'd=4'])\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
        "print('attnflow.experiments.run.field_config' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "2 (4,)",
        "heads must divide d: heads = 3 does not divide d = 4",
        "False",
    ]


def test_bad_key_definitions():
    with pytest.raises(ConfigError, match="n must be an integer ≥ 1, got 0"):
        Key("n", "int", 0, "x", minimum=1)
    with pytest.raises(ConfigError, match="type must be one of"):
        Key("x", "complex", 0, "x")
    with pytest.raises(ConfigError, match="key name must match"):
        Key("bad-name", "int", 0, "x")
    with pytest.raises(ConfigError, match="one line"):
        Key("x", "int", 0, "two\nlines")


def test_table_key_round_trip(registry):
    register(Key("schedule", "table", {}, "schedule parameters"))
    c = load_config('schedule = {kappa = 2.5, kind = "brownian", sizes = [1, 2]}\n')
    assert c.schedule == {"kappa": 2.5, "kind": "brownian", "sizes": (1, 2)}
    with pytest.raises(TypeError):
        c.schedule["kappa"] = 3  # type: ignore[index]
    assert load_config(to_toml(c)) == c
    assert c.to_dict()["schedule"] == {"kappa": 2.5, "kind": "brownian", "sizes": [1, 2]}
    path_text = "[schedule]\nkappa = 1.0\n"
    assert load_config(path_text).schedule == {"kappa": 1.0}
    with pytest.raises(ConfigError, match="schedule must be a table, got 3"):
        load_config({"schedule": 3})
    with pytest.raises(ConfigError, match=r"schedule.kappa must be finite"):
        load_config({"schedule": {"kappa": math.inf}})


def test_describe_keys_lists_every_key():
    text = describe_keys()
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["key", "type", "default", "description"]
    assert len(lines) == len(KEYS) + 2
    for name, key in KEYS.items():
        row = next(line for line in lines if line.split()[0] == name)
        assert key.type in row and key.doc in row
    assert any(line.startswith("n ") and " 32 " in line and "≥ 1" in line for line in lines)
    assert any("'tsit5'" in line for line in lines)


# ---------------------------------------------------------------------------------------------
# Grids


def test_parse_grid_forms():
    key, values = parse_grid("beta=0.1:9:90")
    assert key == "beta" and values == [round(0.1 * k, 1) for k in range(1, 91)]  # as a user writes them
    assert parse_grid("d=2,8,32") == ("d", [2, 8, 32])
    assert all(type(v) is int for v in parse_grid("d=2,8,32")[1])
    assert parse_grid("solver=rk4,tsit5") == ("solver", ["rk4", "tsit5"])
    assert parse_grid("beta=0.5, 1, 2") == ("beta", [0.5, 1.0, 2.0])
    assert parse_grid("n=2:10:5") == ("n", [2, 4, 6, 8, 10])
    assert parse_grid("d=[2, 8]") == ("d", [2, 8])
    assert parse_grid("init_file=a.npy,2024") == ("init_file", ["a.npy", "2024"])
    assert parse_grid("progress=true,false") == ("progress", [True, False])
    assert parse_grid("beta=3") == ("beta", [3.0])


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ("beta=", ["--grid beta", "empty"]),
        ("bta=1,2", ["unknown key 'bta'; did you mean 'beta'?"]),
        ("d=2,2", ["repeats the value 2"]),
        ("d=2,1", ["grid d, value 1", "d must be an integer ≥ 2", "got 1"]),
        ("d=2,x", ["d must be an integer", "'x' (a string)"]),
        ("solver=rk4,rk9", ["solver must be one of", "'rk9'"]),
        ("n=1:2:3", ["n must be an integer", "1.5"]),
        ("beta=0:1:0", ["a:b:n"]),
        ("beta=[1, 2", ["not a valid TOML array"]),
        ("beta", ["--grid expects key=values"]),
    ],
)
def test_parse_grid_errors(spec, fragments):
    with pytest.raises(ConfigError) as excinfo:
        parse_grid(spec)
    msg = one_line_error(excinfo)
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)


def test_expand_grid_order_and_counts():
    base = load_config({"n": 4})
    grid = expand_grid(base, [parse_grid("d=2,8"), parse_grid("beta=0.5,1,2")])
    assert len(grid) == 6
    points = [p for p, _ in grid]
    assert points == [
        {"d": 2, "beta": 0.5},
        {"d": 2, "beta": 1.0},
        {"d": 2, "beta": 2.0},
        {"d": 8, "beta": 0.5},
        {"d": 8, "beta": 1.0},
        {"d": 8, "beta": 2.0},
    ]
    for point, c in grid:
        assert isinstance(c, Config)
        assert c.d == (point["d"],) and c.beta == (point["beta"],) and c.n == 4
    assert [p for p, _ in expand_grid(base, {"beta": [1, 2], "seed": [0, 1, 2]})][:3] == [
        {"beta": 1.0, "seed": 0},
        {"beta": 1.0, "seed": 1},
        {"beta": 1.0, "seed": 2},
    ]
    assert expand_grid(base, {}) == [({}, base)]


def test_expand_grid_errors():
    base = load_config()
    with pytest.raises(ConfigError, match="grid axis 'd' is given more than once"):
        expand_grid(base, [("d", [2]), ("beta", [1]), ("d", [3])])
    with pytest.raises(ConfigError, match="grid beta is empty"):
        expand_grid(base, {"beta": []})
    with pytest.raises(ConfigError) as excinfo:
        expand_grid(base, {"seed": list(range(1000)), "n": list(range(1, 102))})
    msg = one_line_error(excinfo)
    assert "101000 points" in msg and f"at most {MAX_GRID_POINTS}" in msg
    with pytest.raises(ConfigError) as excinfo:
        expand_grid(base, {"solver": ["tsit5", "euler"]})
    msg = one_line_error(excinfo)
    assert msg.startswith('grid point solver="euler": dt must be > 0')
    with pytest.raises(ConfigError, match="grid d, value 0: d must be an integer ≥ 2"):
        expand_grid(base, {"d": [1]})
    with pytest.raises(ConfigError, match="must be a list of values"):
        expand_grid(base, {"d": "2,8"})
    assert len(expand_grid(base, {"seed": list(range(MAX_GRID_POINTS))[:1000], "n": list(range(1, 101))})) == 100_000


# ---------------------------------------------------------------------------------------------
# TOML round trip


def test_to_toml_round_trip_tricky_values():
    c = load_config(
        {
            "experiment": 'quote " backslash \\ tab \t newline \n del \x7f bell \x07 ünï ✓',
            "beta": [0.1, 1 / 3, 5e-324, 1e8, 2.0**-1074, 123456789.123456789 / 10],
            "extremizer_tau": [1e300, -1e300, 5e-324],  # an unbounded key: floats at the ends of their range
            "rho": -0.0,
            "d": [2, 10**6],
            "t1": 1e-300,
            "save_times": [0.0, 5e-324, 1e-300],
            "init_file": "",
        }
    )
    text = to_toml(c)
    back = load_config(text)
    assert back == c
    assert math.copysign(1.0, back.rho) == -1.0
    assert all(type(a) is type(b) for a, b in zip(back.values(), c.values()))


def test_to_toml_writes_a_header_and_reads_back_lists_and_nested_tables(registry):
    register(Key("schedule", "table", {}, "schedule parameters"))
    schedule = {
        "kappa": 1e308,
        "tiny": 5e-324,
        "neg_zero": -0.0,
        "big": 2**62,
        "text": 'say "hi" \\ ünïcødé ✓ \t\r\n\x00\x1f\x7f',
        "dotted.key": True,
        "": "empty key",
        "ключ": [1.5, -2.25e-300],
        "nested": {"deeper": {"x": [[1, 2], ["a", "b"]]}, "empty": {}},
        "rows": [{"a": 1, "b": "x" * 120}, {"a": 2, "b": "y"}],
        "short_rows": [{"a": 1}, {"a": 2}],
        "mixed": [1, "two", 3.0, False, {"t": 1}],
    }
    c = load_config({"schedule": schedule, "beta": [0.1, 1 / 3, 1e8], "statistics": ["pairs"], "angles": []})
    text = to_toml(c)
    assert text.startswith("# attnflow configuration\n")
    assert "\n[schedule]\n" in text
    back = load_config(text)
    assert back == c and back.to_dict() == c.to_dict()
    assert math.copysign(1.0, back.schedule["neg_zero"]) == -1.0
    assert all(type(a) is type(b) for a, b in zip(back.values(), c.values()))


def test_to_toml_of_plain_values_and_refusals():
    text = to_toml({"layers": np.array([1, 2]), "bins": np.int64(3), "w": np.float32(0.5), "f": (0.25,)})
    assert text.startswith("# attnflow configuration\n")
    assert tomllib.loads(text) == {"layers": [1, 2], "bins": 3, "w": 0.5, "f": [0.25]}
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ConfigError, match="cannot write the non-finite number"):
            to_toml({"x": bad})
        with pytest.raises(ConfigError, match="cannot write the non-finite number"):
            to_toml({"x": [1.0, bad]})
    with pytest.raises(ConfigError, match=r"cannot write None \(of type NoneType\) to TOML"):
        to_toml({"x": None})


_finite = dict(allow_nan=False, allow_infinity=False)


@st.composite
def valid_configs(draw):
    t1 = draw(st.floats(min_value=0.0, max_value=1e6, **_finite))
    solver = draw(st.sampled_from(KEYS["solver"].choices))
    n = draw(st.integers(1, 64))
    values = {
        "experiment": draw(st.text(max_size=20)),
        "model": draw(st.sampled_from(KEYS["model"].choices)),
        "n": n,
        "d": draw(st.lists(st.integers(2, 2**40), min_size=1, max_size=4)),
        "beta": draw(st.lists(st.floats(min_value=0.0, **_finite), min_size=1, max_size=5)),
        "seeds": draw(st.integers(1, 10**6)),
        "seed": draw(st.integers(0, 2**63)),
        "init": draw(st.sampled_from(["uniform", "cap", "file"])),
        "rho": draw(st.floats(min_value=-1.0, max_value=1.0, exclude_max=True)),
        "cap_angle": draw(st.floats(min_value=0.0, max_value=math.pi, exclude_min=True)),
        "n_init_clusters": draw(st.integers(1, 1000)),
        "spread": draw(st.floats(min_value=0.0, **_finite)),
        "init_file": draw(st.text(min_size=1, max_size=30)),
        "t1": t1,
        "n_save": draw(st.integers(2, 10**5)),
        "save_times": sorted(set(draw(st.lists(st.floats(min_value=0.0, max_value=t1, **_finite), max_size=6)))),
        "solver": solver,
        "dt": draw(
            st.floats(min_value=1e-12, max_value=10.0)
            if solver in cfgmod.FIXED_STEP_SOLVERS
            else st.floats(min_value=0.0, **_finite)
        ),
        "rtol": draw(st.floats(min_value=0.0, exclude_min=True, **_finite)),
        "atol": draw(st.floats(min_value=0.0, exclude_min=True, **_finite)),
        "dtype": draw(st.sampled_from(["float32", "float64"])),
        "delta": draw(st.floats(min_value=0.0, max_value=2.0, exclude_min=True)),
        "progress": draw(st.booleans()),
        "stop_when_clustered": draw(st.booleans()),
    }
    # -0.0 and 0.0 collapse under set(): keep save_times strictly increasing
    return values


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs())
def test_to_toml_round_trip_property(values):
    try:
        c = load_config(values)
    except ConfigError:
        assume(False)
    back = load_config(to_toml(c))
    assert back == c
    for name in c:
        a, b = c[name], back[name]
        assert type(a) is type(b)
        if isinstance(a, float):
            assert math.copysign(1, a) == math.copysign(1, b)
    assert validate(back) is back
