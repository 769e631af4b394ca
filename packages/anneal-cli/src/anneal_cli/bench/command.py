"""`anneal bench [--device --size --against torch|none --only NAME --steps N --json]`.

Each op case runs forward + backward, jitted, on the device; when PyTorch is installed the same code runs as its
peer in the same process (on CUDA when anneal runs on a GPU and torch has one, else on the CPU, TF32 off), the
ratio is anneal's time over torch's, and torch's gradients check anneal's. Training-step cases time a model's
replayed steps (no peer: the zoo's models exist in anneal only).
"""

from __future__ import annotations

import importlib
import json
import platform
from contextlib import contextmanager
from typing import Any

import click
import numpy as np

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.bench.cases import OP_CASES, SIZES, STEP_CASES, OpCase, StepCase
from anneal_cli.bench.timing import best_time, time_steps
from anneal_cli.train import check_device, find_model, make_config


def _torch(against: str | None) -> Any:
    """torch, or None: --against none, or not installed (an explicit --against torch then fails)."""
    if against == "none":
        return None
    try:
        return importlib.import_module("torch")
    except ImportError:
        if against == "torch":
            raise click.ClickException("--against torch: PyTorch is not installed (pip install torch)") from None
        return None


@contextmanager
def _no_tf32(torch: Any) -> Any:
    """float32 means float32 on both sides: TF32 off for the measurement, restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def run_op(case: OpCase, size: str, device: str, torch: Any, torch_device: str) -> dict[str, Any]:
    from anneal import Tensor
    from anneal.jit import jit
    from anneal.nn import functional as F
    from anneal.realize import realize_all, runner

    shapes = case.shapes(size)
    rng = np.random.default_rng(0)
    data = {k: (rng.standard_normal(v) * 0.5).astype(np.float32) for k, v in shapes.items()}
    inputs = {k: Tensor(v, device=device, requires_grad=True) for k, v in data.items()}
    out_shape = tuple(case.build(F, inputs).shape)
    upstream = Tensor(rng.standard_normal(out_shape).astype(np.float32), device=device)

    @jit
    def step(grad: Tensor) -> list[Tensor]:
        for t in inputs.values():
            t.grad = None
        case.build(F, inputs).backward(grad)
        grads = [t.grad for t in inputs.values() if t.grad is not None]
        realize_all(grads)
        return grads

    got = [g.numpy() for g in step(upstream)]
    seconds = best_time(lambda: step(upstream), runner(device).backend.synchronize)
    row: dict[str, Any] = {"case": case.name, "kind": "forward+backward", "shapes": shapes,
                           "anneal_ms": seconds * 1e3, "anneal_gflops": case.flops(shapes) / seconds / 1e9}  # fmt: skip
    if torch is None:
        return row
    tin = {k: torch.tensor(v, device=torch_device, requires_grad=True) for k, v in data.items()}
    tup = torch.tensor(upstream.numpy(), device=torch_device)

    def torch_step() -> None:
        for t in tin.values():
            t.grad = None
        case.build(torch.nn.functional, tin).backward(tup)

    def torch_sync() -> None:
        if torch_device == "cuda":
            torch.cuda.synchronize()

    with _no_tf32(torch):
        torch_step()
        want = [t.grad.detach().cpu().numpy() for t in tin.values()]
        torch_seconds = best_time(torch_step, torch_sync)
    agree = all(np.allclose(a, b, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(b).max()))) for a, b in zip(got, want))
    row.update(torch_ms=torch_seconds * 1e3, ratio=seconds / torch_seconds, gradients_agree=bool(agree))
    return row


def run_step(case: StepCase, size: str, device: str, steps: int) -> dict[str, Any]:
    entry = find_model(case.model)
    preset = case.presets[size]
    trainer = entry.build(make_config(entry, preset, {}), device)
    first, total_ms = time_steps(trainer, steps)
    return {"case": f"train {case.model} {preset}", "kind": "training step", "anneal_ms": total_ms / steps,
            "first_step_s": first, "steps_per_s": 1000 * steps / total_ms}  # fmt: skip


def _line(row: dict[str, Any]) -> str:
    torch_ms = f"{row['torch_ms']:10.3f}" if "torch_ms" in row else f"{'-':>10}"
    ratio = f"{row['ratio']:8.2f}x" if "ratio" in row else f"{'-':>9}"
    if "anneal_gflops" in row:
        rate = f"{row['anneal_gflops']:9.1f} GFLOP/s"
    else:
        rate = f"{row['steps_per_s']:9.1f} steps/s"
    agree = {True: "yes", False: "NO", None: "-"}[row.get("gradients_agree")]
    return f"{row['case']:<22} {row['anneal_ms']:10.3f} {torch_ms} {ratio}  {rate:<17} {agree}"


@click.command()
@click.option("--device", default=AUTO, show_default=True, help="anneal's device (webgpu, webgpu:1, cpu, auto).")
@click.option("--size", type=click.Choice(SIZES), default="small", show_default=True,
              help="tiny: seconds on a CPU; full: the GPU benchmarks' shapes (benchmarks/RESULTS.md).")  # fmt: skip
@click.option("--against", type=click.Choice(["torch", "none"]),
              help="The peer, in the same run [default: torch when it is installed].")  # fmt: skip
@click.option("--only", multiple=True, metavar="NAME", help="Cases whose name contains NAME (repeatable).")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True, help="Replayed training steps.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the table.")
def bench(device: str, size: str, against: str | None, only: tuple[str, ...], steps: int, as_json: bool) -> None:
    """Time what models are made of (forward + backward) and whole training steps, against PyTorch."""
    check_device(device)
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    torch = _torch(against)
    on_gpu = resolved.startswith("webgpu") and torch is not None and torch.cuda.is_available()
    torch_device = "cuda" if on_gpu else "cpu"
    chosen_ops = [c for c in OP_CASES if not only or any(o in c.name for o in only)]
    chosen_steps = [c for c in STEP_CASES if not only or any(o in f"train {c.model}" for o in only)]
    if not chosen_ops and not chosen_steps:
        names = ", ".join([c.name for c in OP_CASES] + [f"train {c.model}" for c in STEP_CASES])
        raise click.UsageError(f"no case matches --only {' '.join(only)}; the cases: {names}")
    header = (f"anneal bench  device {resolved}  size {size}  peer "
              f"{f'torch {torch.__version__} on {torch_device}' if torch is not None else 'none'}")  # fmt: skip
    if not as_json:
        click.echo(header)
        click.echo(f"{'case':<22} {'anneal ms':>10} {'torch ms':>10} {'ratio':>9}  {'anneal rate':<17} grads ok")
    rows = []
    for op in chosen_ops:
        rows.append(run_op(op, size, resolved, torch, torch_device))
        if not as_json:
            click.echo(_line(rows[-1]))
    for step in chosen_steps:
        rows.append(run_step(step, size, resolved, steps))
        if not as_json:
            click.echo(_line(rows[-1]))
    if as_json:
        document = {"device": resolved, "size": size, "python": platform.python_version(),
                    "torch": None if torch is None else {"version": torch.__version__, "device": torch_device},
                    "cases": rows}  # fmt: skip
        click.echo(json.dumps(document, indent=1))
    elif any(r.get("gradients_agree") is False for r in rows):
        raise click.ClickException("anneal's gradients differ from torch's in a case marked NO")
