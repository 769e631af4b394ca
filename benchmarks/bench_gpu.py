"""WebGPU backend vs PyTorch CUDA (float32, TF32 off) on the same GPU, measured in one run.

Prints, for each case, anneal's time, torch's time, their ratio and the achieved TFLOP/s or
GB/s (and the share of the GPU's peak memory bandwidth, given with --peak-gbs). anneal's time is
that of jit replays synchronized once per batch; where the adapter has timestamp queries, the
kernels' own GPU time is printed too ("gpu"), free of host round trips.
Run on a machine with a GPU: python benchmarks/bench_gpu.py [--peak-gbs 4800] [--quick] [--sweep]
(--sweep also times every candidate strategy of the matmul, elementwise and softmax kernels: what
ANNEAL_BEAM searches, all of it.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from anneal import Tensor
from anneal.jit import jit
from anneal.realize import runner
from anneal_cli.bench.profile import print_slowest, profile_replay

DEVICE = "webgpu"
TORCH = "cuda"  # --torch-device: the peer's device


def sync() -> None:
    runner(DEVICE).backend.synchronize()


def torch_sync() -> None:
    if TORCH == "cuda":
        torch.cuda.synchronize()


def timeit(fn: Callable[[], object], sync_fn: Callable[[], None], runs: int = 10, reps: int = 3) -> float:
    """Seconds per call: calls are queued back to back and synchronized once per batch, so the
    cost of a host round trip (about 1 ms for wgpu's buffer mapping) is not counted per call: a
    batch lasts tens of milliseconds, where that round trip adds a few percent at most."""
    fn()
    sync_fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        sync_fn()
        best = min(best, (time.perf_counter() - t0) / runs)
    return best


def gpu_time(fn: Callable[[], object], reps: int = 10) -> float | None:
    """The GPU time of one call's kernels from timestamp queries (best of reps), or None without them."""
    backend = runner(DEVICE).backend
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        if not backend.start_timing():
            return None
        fn()
        best = min(best, sum(backend.stop_timing()))
    return best


def report(name: str, ta: float, tt: float, work: float, unit: str, peak: float | None = None,
           tg: float | None = None) -> dict:  # fmt: skip
    rate_a, rate_t = work / ta, work / tt
    extra = f"  ({100 * rate_a / peak:.0f}% of peak)" if peak else ""
    gpu = f" | gpu {tg * 1e3:.3f} ms {work / tg:.1f} {unit}" if tg else ""
    print(f"{name:<34} anneal {ta * 1e3:8.3f} ms {rate_a:8.1f} {unit}{extra} | torch {tt * 1e3:8.3f} ms "
          f"{rate_t:8.1f} {unit} | anneal/torch time {ta / tt:5.2f}x{gpu}")  # fmt: skip
    return {"case": name, "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3, f"anneal_{unit}": rate_a,
            f"torch_{unit}": rate_t, "peak_share": rate_a / peak if peak else None,
            "anneal_gpu_ms": tg * 1e3 if tg else None}  # fmt: skip


def sweep(name: str, outputs: list, work: float, unit: str, top: int = 12) -> None:
    """Time every candidate strategy of each kernel of outputs with GPU timestamps (each checked against
    the heuristic's result first), fastest first: what ANNEAL_BEAM=N searches, all of it."""
    from anneal_schedule.heuristic import candidate_opts, choose_opts
    from anneal_wgpu.beam import agrees

    run = runner(DEVICE)
    backend = run.backend
    run.recording = []
    try:
        run.realize([o.uop for o in outputs])
        executed = run.recording[-1]
    finally:
        run.recording = None
    for kern in executed.schedule.kernels:
        buffers = [executed.slots[s].ensure() for s in kern.slots]
        out = buffers[0]
        first = choose_opts(kern.ast, backend.limits)
        backend.run(backend.build(kern.name, kern.ast, first), buffers, {})
        reference = backend.copy_out(out, out.size, out.dtype)
        rows = []
        candidates = candidate_opts(kern.ast, backend.limits)
        backend.render_ahead([(kern.name, kern.ast, opts) for opts in candidates])  # lowered and compiled at once
        for opts in candidates:
            try:
                prog = backend.build(kern.name, kern.ast, opts)
            except Exception as exc:  # noqa: BLE001 - a candidate the device refuses is reported, not fatal
                rows.append((float("inf"), opts, f"refused: {str(exc).splitlines()[0][:60]}"))
                continue
            backend.run(prog, buffers, {})
            got = backend.copy_out(out, out.size, out.dtype)
            ok = agrees(got, reference)  # as ANNEAL_BEAM checks a candidate
            best = float("inf")
            for _ in range(5):
                backend.start_timing()
                backend.run(prog, buffers, {})
                best = min(best, backend.stop_timing()[0])
            rows.append((best, opts, "" if ok else "WRONG"))
        rows.sort(key=lambda r: r[0])
        print(f"  sweep {name} {kern.name}: {len(rows)} candidates (heuristic: {_describe(first)})")
        for t, opts, note in rows[:top]:
            print(f"    {t * 1e3:8.3f} ms {work / t:8.1f} {unit}  {_describe(opts)} {note}")
        wrong = [r for r in rows if r[2] == "WRONG"]
        if wrong:
            print(f"    WRONG results from {len(wrong)} candidates: {[_describe(r[1]) for r in wrong]}")


def _describe(opts: object) -> str:
    return ", ".join(repr(o) for o in opts) or "no opts"  # type: ignore[attr-defined]


def matmul(n: int, do_sweep: bool = False) -> dict:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    x, w = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
    tx, tw = torch.tensor(a, device=TORCH), torch.tensor(b, device=TORCH)
    got = (x @ w).numpy()
    ref = (tx @ tw).cpu().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2 * np.sqrt(n))
    step = jit(lambda u, v: (u @ v).realize())
    ta = timeit(lambda: step(x, w), sync, runs=50)
    tt = timeit(lambda: tx @ tw, torch_sync, runs=50)
    tg = gpu_time(lambda: step(x, w))
    if do_sweep:
        sweep("matmul", [x @ w], 2 * n**3 / 1e12, "TFLOP/s", top=25)
    return report(f"matmul {n}x{n}x{n} f32", ta, tt, 2 * n**3 / 1e12, "TFLOP/s", tg=tg)


def elementwise(n: int, peak: float | None, do_sweep: bool = False) -> dict:
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    x, y = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
    tx, ty = torch.tensor(a, device=TORCH), torch.tensor(b, device=TORCH)

    def chain(u: object, v: object) -> object:
        return ((u * 1.5 + v).relu() * v - u * 0.25).sigmoid()  # type: ignore[operator]

    np.testing.assert_allclose(chain(x, y).numpy(), chain(tx, ty).cpu().numpy(), rtol=1e-5, atol=1e-6)
    step = jit(lambda u, v: chain(u, v).realize())  # replayed: the GPU's time, not Python's graph building
    ta = timeit(lambda: step(x, y), sync, runs=200)
    tt = timeit(lambda: chain(tx, ty), torch_sync, runs=200)
    tg = gpu_time(lambda: step(x, y))
    if do_sweep:
        sweep("elementwise", [chain(x, y)], 3 * 4 * n / 1e9, "GB/s")
    return report(f"elementwise chain ({n // 2**20}M f32)", ta, tt, 3 * 4 * n / 1e9, "GB/s", peak, tg)


def softmax(rows: int, cols: int, peak: float | None, do_sweep: bool = False) -> dict:
    a = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    x, tx = Tensor(a, device=DEVICE), torch.tensor(a, device=TORCH)
    np.testing.assert_allclose(x.softmax(-1).numpy(), tx.softmax(-1).cpu().numpy(), rtol=1e-4, atol=1e-7)
    step = jit(lambda u: u.softmax(-1).realize())
    ta = timeit(lambda: step(x), sync, runs=200)
    tt = timeit(lambda: tx.softmax(-1), torch_sync, runs=200)
    tg = gpu_time(lambda: step(x))
    kernels = len(runner(DEVICE).scheduler.schedule([x.softmax(-1).uop])[0].kernels)
    if do_sweep:
        sweep("softmax", [x.softmax(-1)], 2 * 4 * rows * cols / 1e9, "GB/s")
    name = f"softmax {rows}x{cols} f32 ({kernels} kernel{'s' if kernels > 1 else ''})"
    return report(name, ta, tt, 2 * 4 * rows * cols / 1e9, "GB/s", peak, tg)


def channel_sums(n: int, positions: int, channels: int, peak: float | None, do_sweep: bool = False) -> dict:
    """A batch norm's statistics over channels-last activations: per-channel sums of squares, a long reduction
    with few outputs (split into partial sums) read across the channels' contiguous rows."""
    a = np.random.default_rng(0).standard_normal((n, positions, channels)).astype(np.float32)
    x, tx = Tensor(a, device=DEVICE), torch.tensor(a, device=TORCH)
    np.testing.assert_allclose(x.square().sum((0, 1)).numpy(), tx.square().sum((0, 1)).cpu().numpy(), rtol=1e-3)
    step = jit(lambda u: u.square().sum((0, 1)).realize())
    ta = timeit(lambda: step(x), sync, runs=50)
    tt = timeit(lambda: tx.square().sum((0, 1)), torch_sync, runs=50)
    tg = gpu_time(lambda: step(x))
    gb = 4 * a.size / 1e9
    if do_sweep:
        sweep("channel sums", [x.square().sum((0, 1))], gb, "GB/s")
    return report(f"channel sums {n}x{positions}x{channels} f32", ta, tt, gb, "GB/s", peak, tg)


def training_step(model: str, steps: int = 20) -> dict:
    """One training step of a model from the zoo vs the same model in torch, eager, same hyperparameters."""
    from torch_models import torch_trainer

    from anneal_models import conv, mlp

    module = {"mlp": mlp, "conv": conv}[model]
    config = {**module.DEFAULTS}
    trainer = module.build(config, DEVICE)
    for i in range(3):
        trainer.step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
        trainer.step(i)
    ta = (time.perf_counter() - t0) / steps
    tstep = torch_trainer(model, config, TORCH)
    for i in range(3):
        tstep(i)
    torch_sync()
    t0 = time.perf_counter()
    for i in range(steps):
        tstep(i)
    torch_sync()
    tt = (time.perf_counter() - t0) / steps
    print(f"{model + ' training step':<34} anneal {ta * 1e3:8.3f} ms | torch eager {tt * 1e3:8.3f} ms | "
          f"ratio {ta / tt:5.2f}x")  # fmt: skip
    return {"case": f"{model} step", "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3}


def transformer_step(steps: int = 20, layers: int = 2, heads: int = 4, dim: int = 128, block: int = 64,
                     batch: int = 12) -> dict:  # fmt: skip
    """One AdamW training step of a 2-layer transformer (the forward of transformer.py + a linear head)."""
    from transformer import AnnealOps, TorchOps, forward, init_weights

    from anneal.jit import jit
    from anneal.optim import AdamW

    w = init_weights(layers, dim, 65, block)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((batch, block, dim)).astype(np.float32)
    target = rng.integers(0, 65, (batch, block))
    ao = AnnealOps(DEVICE)
    aw = {k: Tensor(v, device=DEVICE, requires_grad=True) for k, v in w.items()}
    opt = AdamW(list(aw.values()), lr=1e-3)

    @jit
    def astep(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        logits = forward(ao, aw, x, layers, heads) @ aw["wte"].T
        loss = logits.reshape(-1, 65).log_softmax(-1).gather(1, y.reshape(-1, 1)).mean() * -1
        loss.backward()
        opt.step()
        return loss

    x, y = Tensor(data, device=DEVICE), Tensor(target, device=DEVICE)
    losses = [astep(x, y).item() for _ in range(3)]
    t0 = time.perf_counter()
    for _ in range(steps):
        astep(x, y)
    sync()
    ta = (time.perf_counter() - t0) / steps
    to = TorchOps(TORCH)
    tw = {k: torch.tensor(v, device=TORCH, requires_grad=True) for k, v in w.items()}
    topt = torch.optim.AdamW(list(tw.values()), lr=1e-3)
    tx, ty = torch.tensor(data, device=TORCH), torch.tensor(target, device=TORCH)

    def tstep() -> torch.Tensor:
        topt.zero_grad()
        logits = forward(to, tw, tx, layers, heads) @ tw["wte"].T
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), ty.reshape(-1))
        loss.backward()
        topt.step()
        return loss

    tlosses = [float(tstep().detach()) for _ in range(3)]
    # the same weights, data and optimizer: the first three losses agree (the GPU computed the step right)
    status = "ok" if np.allclose(losses, tlosses, rtol=2e-3, atol=2e-3) else "MISMATCH"
    print(f"transformer losses, first 3 steps: anneal {np.round(losses, 4)} torch {np.round(tlosses, 4)} {status}")
    torch_sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        tstep()
    torch_sync()
    tt = (time.perf_counter() - t0) / steps
    print(f"{'2-layer transformer step':<34} anneal {ta * 1e3:8.3f} ms | torch eager {tt * 1e3:8.3f} ms | "
          f"ratio {ta / tt:5.2f}x")  # fmt: skip
    return {"case": "transformer step", "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3}


# ---- issue 8's cases: forward + backward of what models are made of, jitted, a random upstream gradient ----


def fwd_bwd(name: str, build: Callable[[dict, str], object], shapes: dict[str, tuple[int, ...]], flops: float,
            runs: int = 10, do_sweep: bool = False) -> dict:  # fmt: skip
    """Time the jitted forward + backward of build (inputs from shapes, each requiring grad) on anneal and on
    torch; check the gradients agree (the GPU computed them right). do_sweep also times every candidate of
    each kernel of the gradients (the TFLOP/s a third of the case's: each contraction of a layer does a third)."""
    from anneal.jit import jit

    rng = np.random.default_rng(0)
    data = {k: (rng.standard_normal(v) * 0.5).astype(np.float32) for k, v in shapes.items()}
    ins = {k: Tensor(v, device=DEVICE, requires_grad=True) for k, v in data.items()}
    out_shape = tuple(build({k: torch.tensor(v) for k, v in data.items()}, "torch").shape)  # type: ignore[attr-defined]
    upstream = rng.standard_normal(out_shape).astype(np.float32)
    g = Tensor(upstream, device=DEVICE)

    @jit
    def step(grad: Tensor) -> list[Tensor]:
        for t in ins.values():
            t.grad = None
        out = build(ins, "anneal")
        out.backward(grad)  # type: ignore[attr-defined]
        grads = [t.grad for t in ins.values()]
        from anneal.optim import realize_all

        realize_all(grads)  # type: ignore[arg-type]
        return grads  # type: ignore[return-value]

    got = [x.numpy() for x in step(g)]
    step(g)
    ta = timeit(lambda: step(g), sync, runs=runs)
    tg = gpu_time(lambda: step(g))
    print_slowest(profile_replay(DEVICE, step.captured, lambda: step(g)), top=8, indent=" " * 36)
    tins = {k: torch.tensor(v, device=TORCH, requires_grad=True) for k, v in data.items()}
    tup = torch.tensor(upstream, device=TORCH)

    def tstep() -> None:
        for t in tins.values():
            t.grad = None
        build(tins, "torch").backward(tup)  # type: ignore[attr-defined]

    tstep()
    want = [t.grad.detach().cpu().numpy() for t in tins.values()]  # type: ignore[union-attr]
    ok = all(_agree(a, b) for a, b in zip(got, want))
    tt = timeit(tstep, torch_sync, runs=runs)
    scale, unit = (1e12, "TFLOP/s") if flops / ta > 1e12 else (1e9, "GFLOP/s")
    row = report(name, ta, tt, flops / scale, unit, tg=tg)
    row["grads_agree"] = ok
    if do_sweep:
        for t in ins.values():
            t.grad = None
        build(ins, "anneal").backward(g)  # type: ignore[attr-defined]
        sweep(name, [t.grad for t in ins.values()], flops / 3 / 1e12, "TFLOP/s", top=8)
    print(f"{'':<34} gradients agree with torch: {ok}")
    return row


def _agree(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to float rounding, but for one element in 1,000: a ReLU's derivative at an output within rounding
    of 0 takes the other side in one library (a 128 x 64 x 32 x 32 convolution had two such outputs, each moving
    the 27 input-gradient elements of its window: 46 of 393,216); an error at an image's edge moves 3% of them."""
    close = np.isclose(got, want, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(want).max())))
    return bool(np.count_nonzero(~close) <= got.size // 1000)


def _linear_gelu(t: dict, lib: str) -> object:
    import torch.nn.functional as TF

    import anneal.nn.functional as AF

    return (AF if lib == "anneal" else TF).gelu(t["x"] @ t["w"])


def _matmul(t: dict, lib: str) -> object:
    return t["x"] @ t["w"]


def _layernorm_linear(t: dict, lib: str) -> object:
    import torch.nn.functional as TF

    import anneal.nn.functional as AF

    f = AF if lib == "anneal" else TF
    return f.layer_norm(t["x"], (t["x"].shape[-1],), t["g"], t["b"]) @ t["w"]


def _tied_head(t: dict, lib: str) -> object:
    return t["x"] @ t["w"].T  # GPT-2's logits: the token embedding read as the output layer, 50257 ragged columns


def _sdpa(t: dict, lib: str) -> object:
    import torch.nn.functional as TF

    import anneal.nn.functional as AF

    return (AF if lib == "anneal" else TF).scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)


def _conv(relu: bool) -> Callable[[dict, str], object]:
    def build(t: dict, lib: str) -> object:
        import torch.nn.functional as TF

        import anneal.nn.functional as AF

        f = AF if lib == "anneal" else TF
        y = f.conv2d(t["x"], t["w"], padding=1)
        return f.relu(y) if relu else y

    return build


def model_cases(quick: bool, do_sweep: bool = False, named: str = "") -> list[dict]:
    rows = 4096 if quick else 16384
    qkv = {"q": (64, 6, 256, 64), "k": (64, 6, 256, 64), "v": (64, 6, 256, 64)}
    cases = [  # (name, step, input shapes, float operations)
        ("linear+GELU fwd+bwd", _linear_gelu, {"x": (rows, 384), "w": (384, 1536)}, 3 * 2 * rows * 384 * 1536),
        ("matmul fwd+bwd", _matmul, {"x": (rows, 1536), "w": (1536, 384)}, 3 * 2 * rows * 1536 * 384),
        ("layernorm+linear fwd+bwd", _layernorm_linear, {"x": (rows, 384), "g": (384,), "b": (384,), "w": (384, 1152)},
         3 * 2 * rows * 384 * 1152),
        ("causal SDPA fwd+bwd", _sdpa, qkv, 2.5 * 2 * 2 * 64 * 6 * 256 * 256 * 64),
        ("GPT-2 tied head fwd+bwd", _tied_head, {"x": (rows // 4, 768), "w": (50257, 768)},
         3 * 2 * (rows // 4) * 768 * 50257),
    ]  # fmt: skip
    return [fwd_bwd(name, fn, shapes, work, do_sweep=do_sweep) for name, fn, shapes, work in cases if named in name]


def conv_cases(quick: bool, do_sweep: bool = False, named: str = "") -> list[dict]:
    batch = 128 if quick else 512
    cases = [("conv3x3+relu 3->64 fwd+bwd", _conv(True), {"x": (batch, 3, 32, 32), "w": (64, 3, 3, 3)},
              3 * 2 * batch * 64 * 32 * 32 * 27, 10)]  # fmt: skip
    for c_in, c_out, size in ((64, 128, 32), (128, 128, 16), (256, 256, 8)):  # ResNet-9's convolutions at batch 512
        cases.append((f"conv3x3 {c_in}->{c_out} @{size} fwd+bwd", _conv(False),
                      {"x": (batch, c_in, size, size), "w": (c_out, c_in, 3, 3)},
                      3 * 2 * batch * c_out * size * size * c_in * 9, 3))  # fmt: skip
    return [fwd_bwd(name, fn, shapes, work, runs=runs, do_sweep=do_sweep) for name, fn, shapes, work, runs in cases
            if named in name]  # fmt: skip


def host_overhead(kernels: int = 200) -> dict:
    """A jit-replayed step of ~200 tiny kernels: microseconds of Python per kernel."""
    from anneal.jit import jit

    xs = [Tensor(np.ones(64, np.float32), device=DEVICE) for _ in range(kernels)]

    @jit
    def step(x: Tensor) -> Tensor:
        out = x
        for i in range(kernels):
            out = (out + xs[i]).contiguous()  # one kernel each
        return out.realize()

    x = Tensor(np.zeros(64, np.float32), device=DEVICE)
    for _ in range(3):
        step(x)
    sync()
    n = 20
    t0 = time.perf_counter()
    for _ in range(n):
        step(x)
    host = (time.perf_counter() - t0) / n
    sync()
    run = runner(DEVICE)
    print(f"host overhead: {host * 1e6 / kernels:.1f} us per kernel ({kernels} kernels per replayed step)")
    return {"case": "host overhead", "us_per_kernel": host * 1e6 / kernels, "kernels_run": run.stats.kernels_run}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peak-gbs", type=float, default=None, help="the GPU's peak memory bandwidth in GB/s")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--sweep", action="store_true", help="time every candidate: matmul, elementwise, softmax, convs")
    cases = "matmul,elementwise,softmax,reductions,overhead,steps,models,convs"
    p.add_argument("--only", default="", help=f"comma-separated cases: {cases}")
    p.add_argument("--named", default="", help="models and convs: only the cases whose name holds this")
    args = p.parse_args()
    global TORCH
    TORCH = args.torch_device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    backend = runner(DEVICE).backend
    print(f"anneal webgpu on {backend.adapter.info['device']} ({backend.adapter.info['backend_type']}); "
          f"torch {torch.__version__} on {torch.cuda.get_device_name() if TORCH == 'cuda' else TORCH}")  # fmt: skip
    only = set(args.only.split(",")) if args.only else {"matmul", "elementwise", "softmax", "overhead", "steps",
                                                          "models", "convs"}  # fmt: skip
    results = []
    if "matmul" in only:
        results.append(matmul(1024 if args.quick else 4096, args.sweep))
    if "elementwise" in only:
        results.append(elementwise(2**24 if args.quick else 2**26, args.peak_gbs, args.sweep))
    if "softmax" in only:
        results.append(softmax(4096, 4096 if args.quick else 8192, args.peak_gbs, args.sweep))
    if "reductions" in only:
        results.append(channel_sums(128 if args.quick else 512, 1024, 128, args.peak_gbs, args.sweep))
    if "overhead" in only:
        results.append(host_overhead())
    if "models" in only:
        results += model_cases(args.quick, args.sweep, args.named)
    if "convs" in only:
        results += conv_cases(args.quick, args.sweep, args.named)
    if "steps" in only:
        for model in ("mlp", "conv"):
            results.append(training_step(model))
        results.append(transformer_step())
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
