"""The ``attnflow`` command line: list, run, sweep, plot and validate experiments; hist, fit and probe of a model's token states.

Results go to stdout (``--json`` prints the summary object), progress and logs to stderr.
Bad input gets one line naming the problem and exit status 2, with nothing written; a failed run exit status 1.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import json
import os
import signal
import sys
import warnings
from pathlib import Path

from ..._version import __version__
from .interrupts import Interrupts, Terminated

EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: SIGTERM (``kill``, a batch system's stop)
# stdout closed before all was written (``attnflow list --keys | head``): 128 + SIGPIPE, the status a
# shell reports for a program the signal ended (``seq 100000 | head``), as conventional Unix tools exit
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
# errors of the machine rather than of the input: a full disk or quota, a file over its size limit, the
# device itself. Exit status 1; every other error of a path (a name too long, no permission) is exit 2
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.ENOMEM})


class UsageError(Exception):
    """Bad input from the command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of argparse's usage dump
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- resolving a configuration ------------------------------------------------------------------


def resolve_config(target: str, sets=(), *, quick: bool = False):
    """Config and Experiment for a built-in name or a TOML file, with ``--set`` overrides applied."""
    from .. import builtin
    from ..config import ConfigError, load_config, read_toml_file, shorten

    if target in builtin.EXPERIMENTS or target == builtin.GENERIC.name:
        experiment, source = builtin.resolve(target), None
    elif target.endswith(".toml") or os.path.sep in target or os.path.lexists(target):
        path = Path(target)
        try:
            name = read_toml_file(path).get("experiment", "simulate")
        except ConfigError as err:
            raise UsageError(str(err)) from None
        if not isinstance(name, str):
            raise UsageError(f"{target}: experiment must be a string, got {shorten(repr(name))}")
        try:
            experiment = builtin.resolve(name)
        except ValueError as err:
            raise UsageError(f"{target}: {err}") from None
        source = path
    else:
        generic = builtin.GENERIC.name
        close = difflib.get_close_matches(target, [*builtin.EXPERIMENTS, generic], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(
            f"unknown experiment {target!r}{hint} (built-in: {', '.join(builtin.EXPERIMENTS)}; "
            f"{generic}: a configuration of your own, set with --set KEY=VALUE); or give a FILE.toml"
        )
    base = dict(experiment.defaults)
    if quick:
        base.update(experiment.quick)
    try:
        config = load_config(source, list(sets), base=base)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return config, experiment


def _default_name(target: str) -> str:
    """Output folder name: the experiment's name, or the config file's stem."""
    return Path(target).stem if target.endswith(".toml") else target


# -- commands -----------------------------------------------------------------------------------


def cmd_list(args) -> int:
    from .. import builtin
    from ..config import describe_keys

    if args.keys:
        print(describe_keys())
        return 0
    if args.name is not None:
        from .describe import describe

        try:
            experiment = builtin.resolve(args.name)
        except ValueError as err:
            raise UsageError(str(err)) from None
        print(describe(experiment))
        return 0
    generic = builtin.GENERIC
    width = max(len(n) for n in [*builtin.EXPERIMENTS, generic.name])
    for name, e in builtin.EXPERIMENTS.items():
        print(f"{name:<{width}}  {e.description}  ({e.reference})")
    print(f"{generic.name:<{width}}  {generic.description}")
    return 0


def cmd_run(args) -> int:
    from ...solvers.solution import MaxStepsError, NonFiniteError
    from ..results import runs, target

    config, experiment = resolve_config(args.target, args.set, quick=args.quick)
    out = target.output_path(args.out, os.path.join("runs", _default_name(args.target)))
    if args.quiet:
        config = config.replace(progress=False)
    if experiment.grid:
        return _run_grid_experiment(config, experiment, out, args)
    target.check_target(out, overwrite=args.overwrite, flag="--overwrite", user=True)
    try:
        result = experiment.execute(config)
    except (NonFiniteError, MaxStepsError) as err:
        if err.result is None:
            raise
        # keep what was computed before the failure (statistics up to then, null afterwards); the
        # figures are left out, since they would draw the gaps as data
        runs.save(out, err.result, experiment, plot=False, error=str(err), overwrite=args.overwrite)
        _log(f"attnflow: error: {err}; the statistics up to then are in {out}/ (no figures)")
        return EXIT_FAILURE
    summary = runs.save(out, result, experiment, plot=not args.no_plot, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(summary, indent=2, allow_nan=False))
    else:
        runs.print_report(result, experiment, out)
    return 0


def _run_grid_experiment(config, experiment, out: Path, args) -> int:
    """An experiment made of several runs (e.g. Fig. 5's four weight ensembles): a sweep plus joint figures."""
    from ..results import figures, runs, store
    from ..sweep import schedule

    if any(key in experiment.grid for key in (s.split("=", 1)[0].strip() for s in args.set)):
        raise UsageError(f"{experiment.name} sweeps {', '.join(experiment.grid)} itself; do not --set it")
    specs = [f"{key}={','.join(str(v) for v in values)}" for key, values in experiment.grid.items()]
    # a rerun completes (or reuses) what is there, if it was made with the same configuration
    resume = (out / store.MANIFEST_FILE).is_file() and not args.overwrite
    done = schedule.run_sweep(
        config, experiment, specs, out, resume=resume, overwrite=args.overwrite, plot=not args.no_plot
    )
    loaded = {}
    for run in done:
        value = run["point"][next(iter(experiment.grid))]
        loaded[value] = runs.load_result(out / run["name"])[0]
    if not args.no_plot:
        figures.write(out, experiment.grid_figures(loaded))
    summaries = {str(k): store.read_summary(out / r["name"] / store.SUMMARY_FILE) for k, r in zip(loaded, done)}
    if args.json:
        print(json.dumps({"sweep": str(out), "runs": summaries}, indent=2, allow_nan=False))
    else:
        print(f"{experiment.name}: {len(done)} runs in {out}/")
        for check in experiment.grid_checks(loaded) if experiment.grid_checks else []:
            print(f"  [{check.mark}] {check.name}: expected {check.expected}, measured {check.measured}")
        for p in sorted(out.glob("*.png")):
            print(f"  {p.name}")
    return 0


def cmd_sweep(args) -> int:
    from ..results import target
    from ..sweep import schedule

    config, experiment = resolve_config(args.target, args.set, quick=args.quick)
    if not args.grid:
        raise UsageError("sweep needs at least one --grid key=values (e.g. --grid beta=0.5:5:10)")
    out = target.output_path(args.out, os.path.join("sweeps", _default_name(args.target)))
    if args.quiet:
        config = config.replace(progress=False)
    failure = None
    try:
        if args.executor == "local":
            if args.scheduler is not None or args.workers is not None:
                flag = "--scheduler" if args.scheduler is not None else "--workers"
                raise UsageError(f"{flag} needs --executor dask (the local executor runs in this process)")
            runs = schedule.run_sweep(
                config, experiment, args.grid, out, resume=args.resume, overwrite=args.overwrite, plot=not args.no_plot
            )
        else:
            from ..sweep.executors import check_scheduler_address, make_executor

            # bad input fails before a cluster starts
            if args.scheduler is not None:
                check_scheduler_address(args.scheduler)
            schedule.check_sweep(config, args.grid, out, resume=args.resume, overwrite=args.overwrite)
            with make_executor(args.executor, scheduler=args.scheduler, workers=args.workers) as executor:
                if config.progress:
                    _log(f"sweep: Dask scheduler {executor.address}, {executor.workers} workers")
                runs = schedule.run_sweep(
                    config,
                    experiment,
                    args.grid,
                    out,
                    resume=args.resume,
                    overwrite=args.overwrite,
                    plot=not args.no_plot,
                    executor=executor,
                )
    except schedule.SweepError as err:  # the others are written: report them all, then the failure
        failure, runs = err, err.runs
    if args.json:
        print(json.dumps(schedule.report(out, runs), indent=2, allow_nan=False))
    else:
        schedule.print_report(experiment.name, out, runs)
    if failure is not None:
        raise failure
    return 0


def _integer_from(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _integer_from(1, "a positive integer")
_non_negative_int = _integer_from(0, "an integer ≥ 0")


def cmd_plot(args) -> int:
    from ..plots.interactive import MissingPlotly
    from . import plot

    try:
        written = plot.replot(Path(args.dir), kinds=args.kind, interactive=args.interactive, x=args.x, y=args.y)
    except MissingPlotly as err:
        raise UsageError(str(err)) from None
    for path in written:
        print(path)
    return 0


def cmd_validate(args) -> int:
    from . import validate

    return validate.main(quick=args.quick)


def cmd_hist(args) -> int:
    from . import hist

    return hist.main(args)


def cmd_fit(args) -> int:
    from . import fit

    return fit.main(args)


def cmd_probe(args) -> int:
    from . import probe_command as probe

    return probe.main(args)


def cmd_export(args) -> int:
    from . import export

    return export.main(args)


# -- entry point --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``attnflow`` command line's argument parser, one subparser per command (docs/cli.md is made from it)."""

    parser = _Parser(
        prog="attnflow",
        description="Transformers as interacting particle systems on the sphere: "
        "run the papers' experiments, sweep d and β, plot clustering.",
    )
    parser.add_argument("--version", action="version", version=f"attnflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("list", help="list the built-in experiments, or describe one (its keys, size and time)")
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="an experiment: its description, every key it reads with its value and --quick value, its size and time",
    )
    p.add_argument("--keys", action="store_true", help="list every configuration key with its generic default")
    p.set_defaults(func=cmd_list)

    def common(p, out_help):
        p.add_argument(
            "target",
            metavar="NAME|FILE.toml",
            help="a built-in experiment (attnflow list), simulate (every key at its default, changed with "
            "--set) or a config file",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override a configuration key (repeatable), e.g. --set beta=4 --set d=[2,8]",
        )
        p.add_argument("--out", metavar="DIR", help=out_help)
        overwrite(p)
        p.add_argument(
            "--quick", action="store_true", help="the experiment's shrunk version (seconds, for a first look)"
        )
        p.add_argument("--no-plot", action="store_true", help="skip the figures")
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
        no_cache(p)

    def overwrite(p):
        p.add_argument(
            "--overwrite",
            action="store_true",
            help="replace the results already in DIR (only the files attnflow wrote; yours are kept)",
        )

    def no_cache(p):
        p.add_argument(
            "--no-cache",
            action="store_true",
            help="do not keep compiled programs on disk (default: in $ATTNFLOW_CACHE_DIR, else "
            "~/.cache/attnflow/jax; ATTNFLOW_CACHE_DIR=off also turns it off)",
        )

    def directory_flags(p):
        """What a command writing one run directory from a file (hist, fit) takes besides its own flags."""
        overwrite(p)
        p.add_argument("--json", action="store_true", help="print the summary object on stdout")
        p.add_argument("--no-plot", action="store_true", help="skip the figures")
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
        no_cache(p)

    p = sub.add_parser(
        "run",
        help="run one configuration and plot it",
        description="Run one configuration and plot it. `attnflow list NAME` shows what an experiment runs: every key "
        "it reads with its value and --quick value, its members, memory and measured time.",
    )
    common(p, "output directory (default: runs/NAME)")
    p.add_argument("--json", action="store_true", help="print the summary object on stdout")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="run a grid of configurations")
    common(p, "output directory (default: sweeps/NAME)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the sweep as JSON on stdout: how many runs are done, reused, failed, and every "
        "run's manifest entry with its summary object",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=VALUES",
        help="a grid axis: a:b:n (linspace) or v1,v2,... (repeatable; the grid is their product)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="complete the sweep in DIR, keeping its complete runs (refused if they were made with "
        "another configuration)",
    )
    p.add_argument(
        "--executor",
        choices=["local", "dask"],
        default="local",
        help="where the runs execute: in this process (default) or on a Dask cluster",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --executor dask: a running Dask scheduler (e.g. tcp://10.0.0.5:8786); "
        "default: a LocalCluster on this machine",
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help="with --executor dask and no --scheduler: LocalCluster worker processes "
        "(default: the CPU cores, at most 8)",
    )
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("plot", help="redraw the figures of a run (or of every run of a sweep), or a sweep's curve")
    p.add_argument("dir", metavar="DIR", help="a run directory (attnflow run) or a sweep directory (attnflow sweep)")
    p.add_argument("--kind", action="append", metavar="NAME", help="only this figure (repeatable)")
    p.add_argument(
        "--interactive",
        action="store_true",
        help="write interactive HTML pages instead: the particles on the sphere or circle, the mean-field "
        'globe, the phase diagram (needs plotly: pip install -e ".[views]")',
    )
    p.add_argument("--x", metavar="AXIS", help="with --y: a sweep's curve against this grid axis (e.g. beta)")
    p.add_argument(
        "--y", metavar="STATISTIC", help="with --x: the summary statistic drawn, one curve per value of the other axes"
    )
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("hist", help="inner-product histograms per layer of a model's token states ([GLPR] Fig. 1)")
    p.add_argument(
        "states",
        metavar="STATES.npz",
        help="hidden states, an array (layers, tokens, d) or (layers, batch, tokens, d) of floats in an "
        ".npz (or .npy) file",
    )
    p.add_argument("--key", metavar="NAME", help="the array to read from an .npz archive holding several")
    p.add_argument("--layers", metavar="LIST", help="the layers to show, e.g. 0,3,6 or 0-12 (default: all)")
    p.add_argument("--bins", type=_positive_int, default=64, help="histogram bins over [-1, 1] (default: 64)")
    p.add_argument(
        "--simulate-from",
        metavar="LAYER",
        help="start a simulation from this layer's normalized states and compare it with the later layers",
    )
    p.add_argument("--beta", metavar="B[,B...]", help="with --simulate-from: the inverse temperature(s) to simulate")
    p.add_argument(
        "--layer-time",
        metavar="TAU",
        help="with --simulate-from: simulated time per layer, layer ℓ at t = (ℓ − LAYER)·TAU (default: 1)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --simulate-from: a simulation key (model, solver, dt, rtol, atol, dtype, heads, mask, ...)",
    )
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/hist-STEM)")
    directory_flags(p)
    p.set_defaults(func=cmd_hist)

    p = sub.add_parser(
        "fit", help="fit β, QᵀK, V and the time per layer of the particle model to a model's token states per layer"
    )
    p.add_argument(
        "states",
        metavar="STATES.npz",
        help="hidden states, an array (layers, tokens, d) or (layers, prompts, tokens, d) of floats in an "
        ".npz (or .npy) file, as for hist",
    )
    p.add_argument("--key", metavar="NAME", help="the array to read from an .npz archive holding several")
    p.add_argument("--model", choices=("sa", "usa"), default="sa", help="attention normalized (sa, default) or not")
    p.add_argument("--causal", action="store_true", help="token i attends to tokens j ≤ i only")
    p.add_argument("--heads", type=_positive_int, default=1, help="attention heads (default: 1)")
    p.add_argument("--rank", type=_positive_int, help="QᵀK of this rank per head (default: full d × d)")
    p.add_argument("--qk-identity", action="store_true", help="QᵀK = identity (β alone)")
    p.add_argument("--v-identity", action="store_true", help="V = identity (the layer time alone)")
    p.add_argument("--shared-tau", action="store_true", help="one time for every layer (default: one per layer)")
    p.add_argument(
        "--horizon",
        type=_positive_int,
        default=1,
        help="the loss averages the errors 1 … H layers ahead, each from observed states (default: 1)",
    )
    p.add_argument("--substeps", type=_positive_int, default=8, help="RK4 steps per layer (default: 8)")
    p.add_argument("--steps", type=_positive_int, default=300, help="Adam steps (default: 300)")
    p.add_argument(
        "--lbfgs-steps",
        type=_non_negative_int,
        default=150,
        help="L-BFGS steps after Adam (default: 150; 0: Adam alone)",
    )
    p.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        help="seed of the initial weights' perturbation (an integer ≥ 0; default: 0)",
    )
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/fit-STEM)")
    directory_flags(p)
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser(
        "probe",
        help="measure a model's token states per layer as the theory measures the particles: clusters, the "
        "energy E_β and whether it climbs, rank, intrinsic dimension, neighbourhoods, attention sinks",
    )
    p.add_argument("states", metavar="STATES.npz", help="hidden states as for hist, and optionally attention weights")
    for flag, metavar, text in (
        ("--key", "NAME", "the states' array in an .npz archive holding several"),
        (
            "--attention-key",
            "NAME",
            "the attention weights (blocks = layers − 1, [prompts,] heads, tokens, tokens), "
            "rows summing to 1 (default: 'attention' when the archive holds it)",
        ),
        ("--layers", "LIST", "the layers to measure, e.g. 0,3,6 or 0-12 (default: all)"),
        ("--beta", "B", "β of the energy E_β (default: the β attnflow fit finds with QᵀK = V = I)"),
        ("--delta", "D", "clustering threshold: pairs with ⟨x_i, x_j⟩ ≥ 1 − D are together (default: 1e-3)"),
        ("--epsilon", "EPS", "sink threshold on a head's mean attention to the first token (default: 0.3)"),
        ("--out", "DIR", "output directory (default: runs/probe-STEM)"),
    ):
        p.add_argument(flag, metavar=metavar, help=text)
    p.add_argument("--k", type=_positive_int, default=10, help="neighbours per token for the overlap (default: 10)")
    directory_flags(p)
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("export", help="a Hugging Face model's states and attention weights on prompts, as a file")
    p.add_argument("model", metavar="MODEL", help="a local model directory or a Hugging Face hub name")
    for flag, metavar, kind, text in (
        ("--prompts", "FILE", str, "a UTF-8 text file, one prompt a line (required)"),
        ("--tokens", "N", _positive_int, "cut every prompt to its first N tokens (default: the shortest one's length)"),
        ("--prompts-count", "P", _positive_int, "the first P prompts of the file (default: all)"),
        ("--out", "STATES.npz", str, "the states file to write, its provenance beside it as .json (required)"),
    ):
        p.add_argument(flag, metavar=metavar, type=kind, required=flag in ("--prompts", "--out"), help=text)
    p.add_argument("--no-attention", action="store_true", help="save the hidden states alone, not the attention")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("validate", help="check the simulator against the theory, as a table")
    p.add_argument("--quick", action="store_true", help="the fast subset (under two minutes on 2 cores)")
    no_cache(p)
    p.set_defaults(func=cmd_validate)
    return parser


def _runtime_checks_without_callbacks() -> None:
    """Ask equinox to compile its runtime checks as NaN-producing branches instead of Python callbacks
    (its documented EQX_ON_ERROR=nan, read when equinox is imported), so that JAX can cache the
    adaptive solves: the only such checks in attnflow's programs are diffrax's checks of the save
    times, which ``simulate`` makes hold by itself. ``import attnflow`` and this module do not import
    equinox; an EQX_ON_ERROR set by the user wins."""
    if "equinox" not in sys.modules:
        os.environ.setdefault("EQX_ON_ERROR", "nan")


def _configure_process(args) -> None:
    """Process-wide settings of the ``attnflow`` program: the compilation cache for the commands that
    compile (``solvers/compilation_cache.py``), on or, with ``--no-cache``, off. ``main`` has already asked for equinox's runtime
    checks without Python callbacks, before anything imported equinox, so that the adaptive solves
    can be cached too."""
    if getattr(args, "no_cache", False):  # kept off, in the processes it starts too
        from ...solvers.compilation_cache import disable_compilation_cache

        disable_compilation_cache()
    elif hasattr(args, "no_cache"):
        from ...solvers.compilation_cache import enable_compilation_cache

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            enable_compilation_cache()
        for w in caught:
            _log(str(w.message))


def _errno_of(err: BaseException) -> int | None:
    """The OS error number behind ``err`` (a StoreError keeps the OSError it was raised from)."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return cause.errno
        cause = cause.__cause__
    return None


def _message(err: BaseException) -> str:
    """``err`` in one line; an OSError of the OS itself as 'PATH: reason'."""
    if isinstance(err, OSError) and not isinstance(err, ValueError) and err.strerror:
        where = None if err.filename is None else os.fsdecode(err.filename)
        text = err.strerror if where is None else f"{where if len(where) <= 120 else where[:119] + '…'}: {err.strerror}"
    else:
        text = str(err)
    return " ".join(text.splitlines()).strip()


def _leave_now(status: int) -> None:
    """End the program at once with ``status``, after flushing its streams, without the interpreter's
    teardown. An interrupt can come while XLA compiles on a thread of its own (JAX waits for that
    compilation on the main thread); the teardown then destroys JAX's client, and with it the thread
    pool and devices the compilation is still using: a segmentation fault after "interrupted". What
    attnflow writes is complete and synced by now (a run being written was removed, the manifest
    rewritten), so nothing is lost by skipping the teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _quiet_stdout() -> None:
    """After stdout was closed early, point it at /dev/null so that Python's last flush of it, at exit,
    raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor behind it (in-process callers)
        pass


def main(argv=None) -> int:
    """The command line. As a program (``argv`` None) it also sets up the process: see ``_configure_process``,
    and ``interrupts.Interrupts`` for Ctrl-C and SIGTERM; called from Python with ``argv`` it leaves the caller's JAX settings,
    signal handling and interpreter alone."""
    program = argv is None
    interrupts = Interrupts()
    if program:
        _runtime_checks_without_callbacks()  # first: before anything imports equinox
        interrupts.install()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if program:
            _configure_process(args)
        status = args.func(args)
        interrupts.check()  # one lost where it came and not raised again yet: it ends the command all the same
        sys.stdout.flush()  # a reader that went away shows here, still inside these handlers
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except (UsageError, ValueError, OSError, FloatingPointError, RuntimeError) as err:
        # by meaning (docs/design.md §4.3): a failed run exits 1 (a ConvergenceError, which is a RuntimeError:
        # non-finite members, max_steps, Newton; a failed sweep; a full disk), bad input 2 (ConfigError, InputError)
        _log(f"attnflow: error: {_message(err)}")
        failed = isinstance(err, (FloatingPointError, RuntimeError)) or _errno_of(err) in MACHINE_ERRNOS
        return EXIT_FAILURE if failed else EXIT_USAGE
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, Terminated)
        _log("attnflow: terminated" if terminated else "attnflow: interrupted")
        status = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
        if program:
            _leave_now(status)
        return status


if __name__ == "__main__":
    sys.exit(main())
