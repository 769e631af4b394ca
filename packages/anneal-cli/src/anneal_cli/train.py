"""`anneal train <model>`: resolve the model and the device, build, run the loop.

Output: a live dashboard on a terminal (anneal_cli.dashboard); one plain line per logged step
when stdout is not a terminal or with --plain; one JSON object per logged step with --json.
--out DIR writes a run folder and --resume DIR continues one (anneal_cli.runs). Ctrl-C stops
after the step in progress, saves it and prints the command that resumes; a second Ctrl-C
stops at once. --data PATH takes the model's dataset from the user's own (verified) copy,
--mirror URL downloads from a mirror (http(s)://, file:/// or a folder).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from anneal import data
from anneal.registry import AUTO, GPU_BACKEND, DeviceError, backend_names, get_backend, resolve_device, split_index
from anneal.registry import plugins as loaded_plugins
from anneal_cli import distributed, loop
from anneal_cli.data_cmds import check_mirror
from anneal_cli.errors import WGPU_WHEEL, CommandError, one_line
from anneal_cli.params import FiniteFloat
from anneal_cli.runs import (
    RANKS,
    SUMMARY,
    SUMMARY_JSON,
    RunFolder,
    SavedRun,
    atomic_write,
    read_run,
    setting_up,
    tensors_digest,
)
from anneal_ir.plugins import ModelEntry

PRESETS = ("tiny", "small", "full")
DEFAULT_PRESET = "small"  # PRODUCT.md: small is the default, when a model defines it
FALLBACKS = {"steps": 100, "seed": 0}  # for models whose defaults leave them out
SHOWN = ("preset", "steps", "batch", "lr", "seed")  # the settings the first line names
INTERRUPTED = 130  # the shell's code for a process stopped by SIGINT (128 + 2)


# --data and --mirror, the same on every command that reads a model's dataset (train, sample, score)
DATA_OPTION = click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, path_type=Path),
    help="Take the dataset from this file or folder (e.g. tinyshakespeare's input.txt, or a folder laid out like "
    "the cache), checked against its pinned sha256, instead of the cache or the network.",
)
MIRROR_OPTION = click.option(
    "--mirror",
    metavar="URL",
    callback=lambda ctx, param, value: check_mirror(value),
    help="Download missing data from <URL>/<file>: http(s)://, file:///FOLDER or a folder (default: ANNEAL_MIRROR).",
)


def find_model(name: str) -> ModelEntry:
    models = loaded_plugins().models
    if name not in models:
        known = ", ".join(sorted(models)) or "none (is anneal-models installed?)"
        raise click.UsageError(f"unknown model {name!r}; known models: {known}")
    return models[name]


def make_config(entry: ModelEntry, preset: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Fallbacks < the model's defaults < its preset < the flags actually given."""
    if preset is not None and preset not in entry.presets:
        have = ", ".join(entry.presets) or "none"
        raise click.UsageError(f"model {entry.name!r} has no preset {preset!r} (its presets: {have})")
    chosen = preset or (DEFAULT_PRESET if DEFAULT_PRESET in entry.presets else None)
    config: dict[str, Any] = {**FALLBACKS, **entry.defaults}
    if chosen is not None:
        config.update(entry.presets[chosen])
        config["preset"] = chosen
    config.update({k: v for k, v in flags.items() if v is not None})
    return config


def resumed_config(saved: SavedRun, preset: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The saved run's configuration (its plan: steps, lr and schedule, batch, seed, ...) with the flags given now
    (more --steps, another --lr, ...). A setting the trainer derived (steps from epochs) is derived again when a
    flag changed what it came from."""
    if preset is not None and preset != saved.config.get("preset"):
        raise click.UsageError(
            f"--resume continues {saved.path} with its preset {saved.config.get('preset')!r}; drop --preset {preset}"
        )
    config = dict(saved.config)
    given = {k: v for k, v in flags.items() if v is not None}
    if any(config.get(k) != v for k, v in given.items()):
        for key in saved.derived:
            if key not in given:
                config[key] = None
    config.update(given)
    return config


def plan_line(saved: SavedRun, config: dict[str, Any], total: int) -> str:
    """One line: where the run resumes, what of its saved plan is kept, and what the flags given now changed."""
    changed = [(k, saved.config.get(k), config.get(k)) for k in sorted(set(saved.config) | set(config))
               if k != "steps" and saved.config.get(k) != config.get(k)]  # fmt: skip
    if total != saved.config.get("steps"):
        changed.insert(0, ("steps", saved.config.get("steps"), total))
    changes = {k for k, _, _ in changed}
    kept = ", ".join(f"{k} {config[k]}" for k in (*SHOWN, "warmup", "min_lr", "epochs")
                     if config.get(k) is not None and k not in changes)  # fmt: skip
    text = f"resuming {saved.path} at step {saved.step} of {total}; "
    if not changed:
        return text + f"keeping the run's plan ({kept})"
    told = ", ".join(f"{k} {old} -> {new}" for k, old, new in changed)
    return text + f"changed by the flags given now: {told}; kept from the run: {kept}"


def check_dataset(entry: ModelEntry, dataset: str | None) -> None:
    """--dataset names one of the model's datasets (a usage error otherwise, naming what it takes)."""
    if dataset is None:
        return
    if not entry.datasets:
        raise click.BadParameter(
            f"model {entry.name!r} takes no --dataset (it has its own data)", param_hint="--dataset"
        )
    if dataset not in entry.datasets:
        known = loaded_plugins().datasets
        what = f"{dataset!r} is not one of them" if dataset not in known else f"{dataset!r} is not an image set for it"
        raise click.BadParameter(f"model {entry.name!r} trains on {', '.join(entry.datasets)}; {what}",
                                 param_hint="--dataset")  # fmt: skip


def parse_settings(entry: ModelEntry, settings: tuple[str, ...]) -> dict[str, Any]:
    """--set KEY=VALUE pairs as config entries: VALUE as JSON (3, 0.5, true, null, "s"), else the string itself.
    KEY must be one of the model's configuration keys."""
    keys = set(entry.defaults) | {k for preset in entry.presets.values() for k in preset}
    out: dict[str, Any] = {}
    for item in settings:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        if key not in keys:
            raise click.BadParameter(f"model {entry.name!r} has no setting {key!r}; its settings: "
                                     f"{', '.join(sorted(keys))}", param_hint="--set")  # fmt: skip
        try:
            out[key] = json.loads(text)  # accepts NaN and Infinity, which no setting may be
        except ValueError:
            out[key] = text
        value = out[key]
        if isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            with contextlib.suppress(ValueError):  # "nan" or "inf" as a string: a float to the model all the same
                value = float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise click.BadParameter(f"{item!r}: {key} must be a finite number", param_hint="--set")
    return out


def split_device(name: str) -> tuple[str, int | None]:
    """--device webgpu:1 -> ("webgpu", 1): the adapter of that index in `anneal doctor`'s order."""
    try:
        return split_index(name)
    except DeviceError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None


def pin_adapter(index: int | None, local_rank: int) -> int:
    """Make the webgpu backend use adapter `index` (default: this rank's local rank, modulo the adapters)."""
    try:
        from anneal_wgpu import adapters
    except ImportError:
        raise click.BadParameter(f"an indexed webgpu device needs the WebGPU backend: {WGPU_WHEEL}",
                                 param_hint="--device") from None  # fmt: skip

    found = adapters.describe().adapters
    if index is None:
        index = local_rank % len(found) if found else 0
    try:
        adapters.use_index(index)
    except adapters.NoAdapterError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None
    return index


def start_parallel(trainer: Any, world: distributed.World, model: str, batch: int) -> None:
    """Make the trainer one rank of world: rank 0's state broadcast (every rank starts identical, a resumed
    run included: only rank 0 reads the checkpoint), its step split around the gradient exchange."""
    problem = trainer.parallel_problem() if callable(getattr(trainer, "parallel_problem", None)) else (
        "its trainer has no data-parallel step")  # fmt: skip
    if problem is not None:
        raise click.UsageError(f"model {model!r} cannot train data-parallel: {problem}")
    if batch and batch < world.size:
        raise click.BadParameter(f"a global batch of {batch} cannot be split over {world.size} ranks",
                                 param_hint="--batch")  # fmt: skip
    from anneal import Tensor

    state = {k: t.numpy() for k, t in trainer.state_dict().items()} if world.rank == 0 else None
    state = world.bcast(state, "the initial state's broadcast")
    if world.rank != 0:
        trainer.load_state_dict({k: Tensor(v, device="cpu") for k, v in state.items()})
    trainer.data_parallel(world)


def parallel_checkpoint(trainer: Any, folder: RunFolder | None, step: int, world: distributed.World) -> None:
    """Every rank's state digest gathered on rank 0, which refuses to save states that differ and records them
    (ranks.json) beside the checkpoint it writes."""
    state = trainer.state_dict()
    digest = tensors_digest({k: t.numpy() for k, t in state.items()})
    digests = world.gather(digest, f"the step {step} checkpoint's state digests")
    if world.rank != 0 or digests is None:
        return
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        raise CommandError(f"at step {step} the state of rank {differ[0]} differs from rank 0's "
                           f"(sha256 {digests[differ[0]][:12]} against {digests[0][:12]}); not saved")  # fmt: skip
    if folder is not None:
        folder.save_checkpoint(state, step)
        folder.write_losses()
        record = {"step": step, "ranks": world.size, "sha256": digests}
        atomic_write(folder.path / RANKS, (json.dumps(record, indent=2) + "\n").encode())


def check_device(name: str) -> None:
    if name != AUTO and name not in backend_names():
        known = ", ".join(backend_names()) or "none"
        raise click.BadParameter(f"unknown device {name!r}; registered backends: {known}", param_hint="--device")


def count_parameters(trainer: Any) -> int | None:
    params = getattr(trainer, "params", None)
    if not isinstance(params, (list, tuple)):
        return None
    total = 0
    for p in params:
        shape = getattr(p, "shape", None)
        if shape is None:
            return None
        n = 1
        for s in shape:
            n *= int(s)
        total += n
    return total


def wants_dashboard(plain: bool, as_json: bool) -> bool:
    if plain or as_json or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


@click.command()
@click.argument("model")
@click.option("--device", default=AUTO, show_default=True, help="auto, cpu, webgpu or a plugin's backend.")
@click.option("--steps", type=click.IntRange(min=1), help="Train until this many steps are done.")
@click.option("--lr", type=FiniteFloat(min=0, min_open=True), help="Learning rate.")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size.")
@click.option("--seed", type=int, help="Random seed.")
@click.option("--preset", type=click.Choice(PRESETS), help="Model size: tiny (seconds), small (default), full.")
@click.option("--log-every", type=click.IntRange(min=1), help="Log every N steps [default: steps/10].")
@click.option(
    "--eval-every",
    type=click.IntRange(min=1),
    help="Evaluate (models with validation) and checkpoint (with --out) every N steps [default: the model's, "
    "else steps/10].",
)
@click.option("--plain", is_flag=True, help="One line per logged step, even on a terminal.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per logged step on stdout.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write a run folder: config.json, loss.csv, checkpoint.safetensors, samples.",
)
@click.option(
    "--resume",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Continue the run in this folder from its checkpoint (up to --steps).",
)
@click.option("--dataset", help="The dataset, for models that take several (vit, resnet9: digits, cifar10, ...).")
@DATA_OPTION
@MIRROR_OPTION
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any other setting of the model (a JSON value, else a string): --set dim=64 --set jvp=false.",
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    help="Train data-parallel on N processes, launched through mpiexec (same as mpiexec -n N anneal train ...).",
)
@click.option(
    "--comm-timeout",
    type=FiniteFloat(min=0, min_open=True),
    default=distributed.DEFAULT_TIMEOUT,
    show_default=True,
    help="Data-parallel: seconds a rank waits for the others before it names the missing rank and exits 1.",
)
@click.option(
    "--bucket-mb",
    type=FiniteFloat(min=0, min_open=True),
    default=distributed.BUCKET_BYTES / 2**20,
    show_default=True,
    help="Data-parallel: MiB of gradients per Allreduce; each bucket's exchange starts as soon as the backward has "
    "computed it (smaller: earlier and more overlap, but more messages).",
)
@click.option("--terminal", is_flag=True, hidden=True, help="--nproc's ranks: the launcher's stdout is a terminal.")
def train(
    model: str,
    device: str,
    steps: int | None,
    lr: float | None,
    batch: int | None,
    seed: int | None,
    preset: str | None,
    log_every: int | None,
    eval_every: int | None,
    plain: bool,
    as_json: bool,
    out: Path | None,
    resume: Path | None,
    dataset: str | None,
    data_path: Path | None,
    mirror: str | None,
    settings: tuple[str, ...],
    nproc: int | None,
    comm_timeout: float,
    bucket_mb: float,
    terminal: bool,
) -> None:
    """Train MODEL; hyperparameters default per model, a flag overrides only what it names.

    Under mpiexec (or with --nproc N) every process is a rank of one data-parallel run: --batch stays the
    global batch, rank 0 prints and writes the run folder."""
    launch = distributed.launched()
    if nproc is not None and nproc > 1:
        if launch is not None:
            raise click.UsageError("--nproc starts mpiexec itself; under mpiexec, leave it out")
        code = distributed.launch(nproc, _argv_without_nproc(), lambda line: click.echo(line, err=True))
        raise SystemExit(code)
    # the options as parsed, less the launcher's own: what every rank trains with
    options = {
        k: v for k, v in click.get_current_context().params.items() if k not in ("nproc", "comm_timeout", "bucket_mb")
    }
    if launch is None:
        return _train(**options, world=None)
    # A rank: a deterministic usage error is said by rank 0 alone; after that, any failure is one line and an
    # immediate exit (MPI_Finalize could wait forever on ranks that stopped in an exchange).
    quiet = launch.rank != 0
    try:
        world = distributed.World(timeout=comm_timeout, bucket_bytes=max(4, int(bucket_mb * 2**20)))
        # The ranks of a host share its cores: before anything reads the settings or starts the cpu backend.
        threads = str(distributed.cpu_threads_per_rank(world.local_size))
        os.environ.setdefault("ANNEAL_CPU_THREADS", threads)
        os.environ.setdefault("OMP_NUM_THREADS", threads)
        if threads == "1":  # the cpu runtime leaves numpy's OpenBLAS at a thread per core when it has one thread
            # itself, and those threads spin against the other rank's (nanogpt tiny, 2 ranks on 2 cores: 130-250
            # ms/step against 45 with BLAS on one thread)
            from anneal_cpu.runtime import numpy_blas

            numpy_blas(single_threaded=True)
        _train(**options, world=world)
    except (click.UsageError, CommandError) as exc:  # the same on every rank, or rank 0's alone (its run folder)
        if not quiet:
            exc.show()
        _exit(exc.exit_code)
    except loop.NonFiniteLoss as exc:  # the global loss: every rank sees it, rank 0 says it
        if not quiet:
            click.echo(f"anneal: error: {exc}", err=True)
        _exit(1)
    except click.ClickException as exc:
        click.echo(f"anneal: error: rank {launch.rank}: {exc.format_message()}", err=True)
        _exit(exc.exit_code)
    except SystemExit as exc:
        _exit(exc.code if isinstance(exc.code, int) else 1)
    except Exception as exc:  # RankFailure names the rank itself
        text = str(exc) if isinstance(exc, distributed.RankFailure) else f"rank {launch.rank}: {one_line(exc)}"
        click.echo(f"anneal: error: {text}", err=True)
        if isinstance(exc, distributed.RankFailure):
            sys.stderr.flush()  # said before the hung ranks end: the others would name them dead
            exc.end_laggards()
        _exit(1)


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _argv_without_nproc() -> list[str]:
    """This command's arguments after `train`, less --nproc N (the ranks get the rest)."""
    args = sys.argv[1:]
    args = args[args.index("train") + 1 :] if "train" in args else args
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def _train(**options: Any) -> None:
    """_train_in with the ExitStack that holds the run's data sources (closed whatever happens)."""
    with contextlib.ExitStack() as stack:
        _train_in(stack, **options)


def _train_in(
    stack: contextlib.ExitStack,
    model: str,
    device: str,
    steps: int | None,
    lr: float | None,
    batch: int | None,
    seed: int | None,
    preset: str | None,
    log_every: int | None,
    eval_every: int | None,
    plain: bool,
    as_json: bool,
    out: Path | None,
    resume: Path | None,
    dataset: str | None,
    settings: tuple[str, ...],
    world: distributed.World | None,
    terminal: bool,
    data_path: Path | None,
    mirror: str | None,
) -> None:
    entry = find_model(model)
    device, adapter_index = split_device(device)
    check_device(device)
    check_dataset(entry, dataset)
    flags = {**parse_settings(entry, settings), "steps": steps, "lr": lr, "batch": batch, "seed": seed,
             "eval_every": eval_every, "dataset": dataset}  # fmt: skip
    saved = read_run(resume, entry.name) if resume is not None else None
    config = resumed_config(saved, preset, flags) if saved else make_config(entry, preset, flags)
    # the data: the user's own copy (--data) and a mirror (--mirror, else ANNEAL_MIRROR) for the rest
    local = local_data(entry.name, config, data_path) if data_path is not None else {}
    check_env_mirror()
    stack.enter_context(data.sources(files=local, mirror=mirror))
    lead = world is None or world.rank == 0  # the process that prints and writes the run folder
    resolved, note = resolve_device(device)
    if resolved == GPU_BACKEND and (adapter_index is not None or world is not None):
        adapter_index = pin_adapter(adapter_index, world.local_rank if world is not None else 0)
    resolved, _backend = get_backend(resolved)  # create it now, so a broken device fails first
    shown_device = resolved if adapter_index is None else f"{resolved}:{adapter_index}"

    # under mpiexec rank 0's stdout is a pipe: --nproc says when the launcher's is a terminal
    dashboard = (wants_dashboard(plain, as_json) or (terminal and not plain and not as_json)) and lead
    info: Callable[[str], None] = (
        survives_closed_pipe(lambda text: click.echo(text, err=as_json)) if lead else (lambda text: None)
    )
    start = saved.step if saved else 0

    # ---- setup: a run folder made here is removed again if any of this fails ----
    folder: RunFolder | None = None
    if not lead:
        pass  # rank 0 alone writes the run folder
    elif out is not None and (saved is None or out.resolve() != saved.path.resolve()):
        folder = RunFolder.create(out, entry.name)
        if saved is not None:
            folder.rows = list(saved.history)
    elif saved is not None:
        folder = RunFolder.reopen(saved)
    with setting_up(folder):
        try:
            trainer = entry.build(dict(config), resolved)
        except data.DataError as exc:  # a download that failed, the cache offline: its message names the fix
            raise CommandError(" ".join(str(exc).split())) from exc
        if saved is not None and lead:
            load_checkpoint(trainer, saved)
        if world is not None:
            start_parallel(trainer, world, entry.name, int(config.get("batch") or 0))
        before = config  # what the trainer derives is filled in below
        config = completed_config(config, trainer)
        total = int(config["steps"])
        shown = "  ".join(f"{k} {config[k]}" for k in SHOWN if k in config)
        if world is not None:
            shown += f"  ranks {world.size}" + (f" on {world.hosts} hosts" if world.hosts > 1 else "")
        parameters = count_parameters(trainer)
        if not dashboard:
            info(f"model {entry.name}  device {shown_device}  {shown}"
                 + (f"  params {parameters}" if parameters else ""))  # fmt: skip
        if note:
            info(note)
        if saved is not None:
            info(plan_line(saved, config, total))
        if folder is not None:
            trainer_config = getattr(trainer, "config", None)
            # what the trainer derived (steps from epochs) is derived again on --resume when a flag changes its inputs
            filled = {k for k in ("steps", "eval_every") if config.get(k) is not None and before.get(k) is None}
            kept = {k for k in (saved.derived if saved is not None else []) if flags.get(k) is None}
            folder.write_config(config, shown_device, trainer_config if isinstance(trainer_config, dict) else None,
                                derived=sorted(filled | kept))  # fmt: skip
            if not folder.ready:
                checkpoint(trainer, folder, start)  # the first checkpoint: from here on the folder can be resumed
                folder.write_losses()
                folder.ready = True
            if hasattr(trainer, "out_dir"):
                trainer.out_dir = folder.path  # where the model writes its samples
            if not dashboard:
                info(f"run folder {folder.path}")
    if start >= total:
        info(f"{entry.name} is already at step {start} of {total}; pass a larger --steps to train further")
        return

    eval_cadence = eval_every or int(config.get("eval_every") or 0) or loop.default_eval_every(total)
    progress = Progress(start, start)
    observers: list[Any] = [progress, *([folder] if folder is not None else [])]

    def save(done: int) -> None:
        if world is not None:  # every rank takes part: the states are compared across ranks at each checkpoint
            parallel_checkpoint(trainer, folder, done, world)
        else:
            checkpoint(trainer, folder, done)
        progress.saved = done

    if world is not None and folder is not None:
        folder.ranks = lambda: (world.size, trainer.comm_ms)
    run_args: dict[str, Any] = {
        "log_every": log_every or loop.default_log_every(total),
        "lr": config.get("lr"),
        "start": start,
        "eval_every": eval_cadence,
        "checkpoint": save if folder is not None or world is not None else None,
        "comm_ms": (lambda: trainer.comm_ms) if world is not None else None,
    }
    # Ctrl-C: stop at the next step boundary, so the checkpoint holds exactly the steps done (data-parallel ranks
    # would stop at different steps and wait on each other: they keep the default, stopping at once)
    interrupt = contextlib.ExitStack()  # only around the loop: after it, Ctrl-C is Ctrl-C again
    stop = interrupt.enter_context(stop_at_step_boundary()) if world is None else None
    resume_hint = resume_command(entry.name, folder, device=device, data_path=data_path, mirror=mirror)
    try:
        if dashboard:
            run_dashboard(entry.name, shown_device, trainer, config, total, start, parameters, observers,
                          {**run_args, "stop": stop}, saved, force_terminal=terminal,
                          ranks=world.size if world is not None else None)  # fmt: skip
        else:
            line = loop.json_line if as_json else loop.plain_line
            emit = survives_closed_pipe(lambda r: click.echo(line(r)))
            loop.run(trainer, total, emit=emit if lead else (lambda r: None), observers=observers, stop=stop,
                     **run_args)  # fmt: skip
    except loop.NonFiniteLoss as exc:
        raise CommandError(str(exc)) from exc
    except loop.Interrupted as exc:  # between steps: the state is exactly `exc.done` steps
        if folder is not None and progress.saved != exc.done:
            save(exc.done)
        interrupted(f"interrupted at step {exc.done}", resume_hint)
    except KeyboardInterrupt:  # a second Ctrl-C, inside a step: that step's state is half made, so not saved
        done = f"; its last checkpoint is step {progress.saved}" if folder is not None else ""
        interrupted(f"interrupted during step {progress.done + 1}{done}", resume_hint)
    finally:
        interrupt.close()
        if folder is not None and folder.ready:
            folder.write_losses()  # every step that ran, even when the run failed
    if not lead:
        return  # the summary and the sample are rank 0's
    finish = getattr(trainer, "finish", None)
    text = finish() if callable(finish) else None
    if text:
        if folder is not None:  # the file first: a reader that went away must not cost the run its summary
            atomic_write(folder.path / SUMMARY, (str(text).rstrip("\n") + "\n").encode())
        info(str(text))
    report = getattr(trainer, "report", None)
    if folder is not None and callable(report):  # a classifier's accuracy, per class and by epoch
        atomic_write(folder.path / SUMMARY_JSON, (json.dumps(report(), indent=2) + "\n").encode())


def survives_closed_pipe(write: Callable[[Any], None]) -> Callable[[Any], None]:
    """A reader that went away (`anneal train ... | head`) ends the printing, not the run: the steps, checkpoints
    and summary are still written, and stdout goes to /dev/null so that nothing complains at exit."""
    closed = False

    def guarded(item: Any) -> None:
        nonlocal closed
        if closed:
            return
        try:
            write(item)
        except BrokenPipeError:
            closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())

    return guarded


class Progress:
    """An observer of the loop: the steps done and the step of the last checkpoint (for what Ctrl-C says)."""

    def __init__(self, done: int, saved: int) -> None:
        self.done, self.saved = done, saved

    def after_step(self, done: int, loss: float) -> None:
        self.done = done


@contextlib.contextmanager
def stop_at_step_boundary() -> Iterator[Callable[[], bool]]:
    """While the block runs, the first SIGINT only asks the loop to stop after the step in progress (the returned
    function says whether it was asked); a second one raises KeyboardInterrupt at once. Outside the main thread
    (where no handler can be set) Ctrl-C keeps its default."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return

    def handler(signum: int, frame: Any) -> None:
        if asked.is_set():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        asked.set()
        click.echo("stopping after this step to save it (Ctrl-C again to stop at once, without saving)", err=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def resume_command(
    model: str, folder: RunFolder | None, *, device: str, data_path: Path | None, mirror: str | None
) -> str | None:
    """The command that continues this run (None without a run folder): what the user has to type, no more."""
    if folder is None:
        return None
    args = ["anneal", "train", model, "--resume", str(folder.path)]
    if device != AUTO:
        args += ["--device", device]
    if data_path is not None:
        args += ["--data", str(data_path)]
    if mirror is not None:
        args += ["--mirror", mirror]
    return shlex.join(args)


def interrupted(what: str, resume_hint: str | None) -> None:
    """Say how the run stopped and how to go on, then exit 130 (the shell's code for SIGINT)."""
    hint = (
        f"resume with {resume_hint}" if resume_hint else "nothing saved (train with --out DIR to make a run resumable)"
    )
    click.echo(f"{what}; {hint}", err=True)
    raise click.exceptions.Exit(INTERRUPTED)


def check_env_mirror() -> None:
    """ANNEAL_MIRROR, checked before anything downloads: a runtime error naming the variable."""
    value = os.environ.get("ANNEAL_MIRROR")
    if value:
        try:
            data.mirror_source(value)
        except data.MirrorError as exc:
            raise CommandError(f"ANNEAL_MIRROR: {exc}") from None


def local_data(model: str, config: dict[str, Any], path: Path) -> dict[str, Path]:
    """--data: the files of the pinned assets this run reads that `path` holds, verified (a usage error otherwise)."""
    dataset = config.get("dataset")
    needed = data.needed_by(model, str(dataset) if dataset is not None else None)
    if not needed:
        what = f"its dataset {dataset!r} is generated" if dataset is not None else "it reads no dataset file"
        raise click.BadParameter(f"model {model!r} takes no --data: {what}", param_hint="--data")
    try:
        return data.local_files(path, needed)
    except data.DataError as exc:
        raise click.BadParameter(" ".join(str(exc).split()), param_hint="--data") from None


# How anneal.data's failed downloads name the way to pass one's own copy; other commands name their own flag.
_TRAIN_DATA = re.compile(r"`anneal train --data PATH`( \(the file, or a folder holding it\))?")


@contextlib.contextmanager
def naming_own_flag(flag: str, detail: bool = True) -> Iterator[None]:
    """A data error in the block names `flag` (e.g. "`anneal sample --data PATH`") where anneal.data's message
    names train's --data; `detail` keeps its "(the file, or a folder holding it)"."""
    try:
        yield
    except data.DataError as exc:
        if isinstance(exc, ValueError):
            raise  # a bad mirror: the command's usage error, as it was
        text = _TRAIN_DATA.sub(lambda m: flag + ((m.group(1) or "") if detail else ""), one_line(exc))
        raise CommandError(text) from None


@contextlib.contextmanager
def command_data(command: str, model: str, config: dict[str, Any], data_path: Path | None,
                 mirror: str | None) -> Iterator[None]:  # fmt: skip
    """For a command that reads a run's data (sample, score): its --data copy and --mirror (else ANNEAL_MIRROR),
    as `anneal train` takes them, and failed downloads that name this command's --data."""
    local = local_data(model, config, data_path) if data_path is not None else {}
    check_env_mirror()
    with data.sources(files=local, mirror=mirror), naming_own_flag(f"`anneal {command} --data PATH`"):
        yield


def completed_config(config: dict[str, Any], trainer: Any) -> dict[str, Any]:
    """The settings a trainer derived from others (steps from epochs, eval_every from the epoch length) fill
    what the configuration left open; what it was given stays."""
    derived = getattr(trainer, "config", None)
    if not isinstance(derived, dict):
        return config
    filled = {k: derived[k] for k in ("steps", "eval_every") if config.get(k) is None and derived.get(k) is not None}
    return {**config, **filled}


def load_checkpoint(trainer: Any, saved: SavedRun, hint: str = "") -> None:
    """Load the run's state into the trainer; a checkpoint that does not fit is one line (with `hint`, what the
    caller knows of why)."""
    load = getattr(trainer, "load_state_dict", None)
    if not callable(load):
        raise click.UsageError(f"model {saved.model!r} cannot resume: its trainer has no load_state_dict()")
    try:
        load(saved.state)
    except Exception as exc:  # missing/unexpected keys, shape mismatches: the checkpoint is of another model
        ckpt = saved.path / "checkpoint.safetensors"
        raise CommandError(f"checkpoint {ckpt} does not fit this {saved.model} model{hint}: {one_line(exc)}") from None
    # the summary at the end covers the whole run, not only its resumed part
    if saved.history and hasattr(trainer, "first_loss") and trainer.first_loss is None:
        trainer.first_loss = saved.history[0].loss
    if isinstance(getattr(trainer, "val_history", None), list):
        trainer.val_history = [(r.step, r.val) for r in saved.history if r.val is not None]


def checkpoint(trainer: Any, folder: RunFolder | None, step: int) -> None:
    state_dict = getattr(trainer, "state_dict", None)
    if folder is not None and callable(state_dict):
        folder.save_checkpoint(state_dict(), step)
        folder.write_losses()


def run_dashboard(
    model: str,
    device: str,
    trainer: Any,
    config: dict[str, Any],
    total: int,
    start: int,
    parameters: int | None,
    observers: list[Any],
    run_args: dict[str, Any],
    saved: SavedRun | None,
    force_terminal: bool = False,
    ranks: int | None = None,
) -> None:
    from rich.console import Console

    from anneal_cli.dashboard import CompilerStats, Dashboard, seam_stats

    console = Console(force_terminal=True) if force_terminal else Console()
    with console.status(f"compiling {model}'s step for the dashboard's statistics…"):
        try:
            seam = seam_stats(trainer, device)
        except Exception:  # statistics are a view: a model whose graph cannot be scheduled alone still trains
            seam = None
    compiler = CompilerStats.maybe(device, trainer, seam)
    history = [(r.step, r.loss, r.val) for r in saved.history] if saved else []
    settings = [(k, config[k]) for k in SHOWN if k in config and k != "steps"] + ([("ranks", ranks)] if ranks else [])
    dash = Dashboard(console, model=model, device=device, steps=total, start=start, settings=settings,
                     parameters=parameters, history=history, compiler=compiler)  # fmt: skip
    if compiler is not None:
        observers = [compiler, *observers]
    with dash:
        loop.run(trainer, total, emit=lambda r: None, observers=[*observers, dash], **run_args)
    rate = dash.rate()
    console.print(
        f"trained {model} to step {dash.done}/{total} in {(dash.finished_at or dash.t0) - dash.t0:.1f} s"
        + (f" ({rate:,.1f} steps/s)" if rate else "")
        + (f"; final loss {dash.loss:.4f}" if dash.loss is not None else ""),
        highlight=False,
    )
