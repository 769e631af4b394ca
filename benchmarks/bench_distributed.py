"""Data-parallel training on MPI (issue 17): steps/s on 1 and N ranks, and the gradient exchange's cost.

    python benchmarks/bench_distributed.py                      # mlp and nanogpt tiny on 1 and 2 ranks, cpu
    python benchmarks/bench_distributed.py --device webgpu --ranks 2 --models nanogpt:small
    python benchmarks/bench_distributed.py --allreduce-only     # the 10.6M-float32 Allreduce alone

Each training run is `anneal train --json` (the real command, through the mpich wheel's mpiexec for N > 1);
its steps/s is read from the last logged record (ms/step over the last half of the steps, so compilation and
the jit capture are left out), its communication from the same record's comm_ms (the last step's host time in
the exchange that the backward did not hide: reading the gradients out, the MPI calls started and nudged between
the backward's kernels, waiting for the sums and the other ranks, writing the sums back). `--bucket-mb` sets
the N-rank runs' bucket size (anneal train's option; smaller buckets start their exchange earlier in the
backward). The Allreduce part times
MPI_Allreduce of one flat float32 buffer of nanogpt full's gradient size (10.6M parameters, 42 MB) between
the ranks alone, as the bucketed exchange moves it, and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

NANOGPT_FULL = 10_649_088  # nanogpt --preset full's parameters (6 layers, dim 384, vocab 65, block 256)
BUCKET = 25 * 2**20 // 4  # anneal_cli.distributed.BUCKET_BYTES in float32 elements


def mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else "mpiexec"


def train(model: str, preset: str, ranks: int, steps: int, device: str, threads: int | None = None,
          extra: tuple[str, ...] = ()) -> dict[str, float]:  # fmt: skip
    cmd = [sys.executable, "-m", "anneal_cli.main", "train", model, "--preset", preset, "--steps", str(steps),
           "--log-every", str(steps // 2), "--eval-every", str(10**9), "--device", device, "--json",
           *extra]  # fmt: skip
    if ranks > 1:
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    env = dict(os.environ)
    if threads:  # the single process on as many cores as one rank has (a core-for-core comparison)
        env.update(ANNEAL_CPU_THREADS=str(threads), OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    last = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    return {"ms": float(last["ms_per_step"]), "comm_ms": float(last.get("comm_ms") or 0.0), "loss": last["loss"]}


def allreduce(sizes: list[int], reps: int) -> None:
    """Run under mpiexec: time the Allreduce of n float32 for each n, in buckets as the trainer sends them
    (nonblocking, then wait); rank 0 prints one JSON line per size."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for n in sizes:
        buckets = [np.ones(min(BUCKET, n - s), np.float32) for s in range(0, n, BUCKET)]
        for b in buckets:
            comm.Allreduce(MPI.IN_PLACE, b)
        times = []
        for _ in range(reps if n > 10**5 else 20 * reps):
            comm.Barrier()
            t0 = time.perf_counter()
            MPI.Request.Waitall([comm.Iallreduce(MPI.IN_PLACE, b) for b in buckets])
            times.append(time.perf_counter() - t0)
        if comm.rank == 0:
            median = float(np.median(times))
            # a ring Allreduce moves 2 (p-1)/p of the buffer through each rank's link
            bus = 2 * (comm.size - 1) / comm.size * 4 * n / median / 1e9
            print(json.dumps({"ranks": comm.size, "floats": n, "bytes": 4 * n, "buckets": len(buckets),
                              "median_ms": median * 1e3, "best_ms": min(times) * 1e3, "bus_GBps": bus}))  # fmt: skip


def run_allreduce(ranks: int, sizes: list[int], reps: int) -> list[dict[str, float]]:
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, __file__, "--_allreduce", ",".join(map(str, sizes)),
           "--reps", str(reps)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--models", default="mlp:small:200,nanogpt:tiny:40", help="model:preset:steps,...")
    ap.add_argument("--allreduce-only", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--core-for-core", action="store_true",
                    help="give the 1-rank run only the cores of one rank (cores / ranks threads)")  # fmt: skip
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to anneal train (e.g. --set dropout=0: dropout makes the curves differ)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of 1 and N ranks; the best counts")
    ap.add_argument("--bucket-mb", type=float, help="the N-rank runs' gradient bucket size (anneal train --bucket-mb)")
    ap.add_argument("--_allreduce", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._allreduce:
        allreduce([int(n) for n in args._allreduce.split(",")], args.reps)
        return
    if not args.allreduce_only:
        for spec in args.models.split(","):
            model, preset, steps = spec.split(":")
            runs: dict[int, list[dict[str, float]]] = {1: [], args.ranks: []}
            for _ in range(args.rounds):  # alternating: a neighbour's load on a shared machine hits both alike
                for n in runs:
                    threads = max(1, (os.cpu_count() or 1) // args.ranks) if args.core_for_core and n == 1 else None
                    extra = tuple(a for kv in args.settings for a in ("--set", kv))
                    if n > 1 and args.bucket_mb is not None:
                        extra += ("--bucket-mb", str(args.bucket_mb))
                    runs[n].append(train(model, preset, n, int(steps), args.device, threads, extra))
            one, many = (min(runs[n], key=lambda r: r["ms"]) for n in (1, args.ranks))
            per_rank = max(1, (os.cpu_count() or 1) // args.ranks)
            how = f"1 rank on {per_rank} thread(s)" if args.core_for_core else "1 rank"
            print(f"{model} {preset} on {args.device}, {how}: {1000 / one['ms']:.1f} steps/s ({one['ms']:.1f} ms), "
                  f"{args.ranks} ranks {1000 / many['ms']:.1f} steps/s ({many['ms']:.1f} ms, of it comm "
                  f"{many['comm_ms']:.1f} ms); speed-up {one['ms'] / many['ms']:.2f}x; "
                  f"final loss {one['loss']:.5f} vs {many['loss']:.5f}")  # fmt: skip
    sweep = run_allreduce(args.ranks, [1, 1000, 100_000, 1_000_000, NANOGPT_FULL], args.reps)
    for r in sweep:
        print(f"Allreduce of {r['floats']:>10,} float32 ({r['bytes'] / 1e6:8.3f} MB, {r['buckets']} bucket(s)) on "
              f"{r['ranks']} ranks: median {r['median_ms']:8.3f} ms (best {r['best_ms']:.3f}), bus bandwidth "
              f"{r['bus_GBps']:.2f} GB/s")  # fmt: skip
    # t(bytes) = latency + bytes / bandwidth, fitted over the sweep (the model docs/SCALING.md projects with)
    x = np.array([r["bytes"] for r in sweep], float)
    y = np.array([r["median_ms"] / 1e3 for r in sweep])
    slope, intercept = np.polyfit(x, y, 1, w=1 / y)
    print(f"fit: latency {intercept * 1e6:.1f} us + {1e-9 / slope:.2f} GB/s of buffer; nanogpt full's gradient "
          f"{sweep[-1]['median_ms']:.1f} ms per exchange")  # fmt: skip


if __name__ == "__main__":
    main()
