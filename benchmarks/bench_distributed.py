"""Data-parallel training on MPI (issue 17): steps/s on 1 and N ranks, and the gradient exchange's cost.

    python benchmarks/bench_distributed.py                      # mlp and nanogpt tiny on 1 and 2 ranks, cpu
    python benchmarks/bench_distributed.py --device webgpu --ranks 2 --models nanogpt:small
    python benchmarks/bench_distributed.py --allreduce-only     # the 10.6M-float32 Allreduce alone

Each training run is `anneal train --json` (the real command, through the mpich wheel's mpiexec for N > 1);
its steps/s is read from the last logged record (ms/step over the last half of the steps, so compilation and
the jit capture are left out), its communication from the same record's comm_ms (the last step's time in the
exchange: copies out of the device, the Allreduce, waiting for the other ranks). The Allreduce part times
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


def train(model: str, preset: str, ranks: int, steps: int, device: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "anneal_cli.main", "train", model, "--preset", preset, "--steps", str(steps),
           "--log-every", str(steps // 2), "--eval-every", str(10**9), "--device", device, "--json"]  # fmt: skip
    if ranks > 1:
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    last = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    return {"ms": float(last["ms_per_step"]), "comm_ms": float(last.get("comm_ms") or 0.0), "loss": last["loss"]}


def allreduce(n: int, reps: int) -> None:
    """Run under mpiexec: time Allreduce of n float32 in buckets as the trainer sends them; rank 0 prints JSON."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buckets = [np.ones(min(BUCKET, n - s), np.float32) for s in range(0, n, BUCKET)]
    small = np.ones(1, np.float32)
    for b in buckets:
        comm.Allreduce(MPI.IN_PLACE, b)
    times, lat = [], []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        reqs = [comm.Iallreduce(MPI.IN_PLACE, b) for b in buckets]
        MPI.Request.Waitall(reqs)
        times.append(time.perf_counter() - t0)
    for _ in range(50):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, small)
        lat.append(time.perf_counter() - t0)
    if comm.rank == 0:
        best, median = min(times), float(np.median(times))
        nbytes = 4 * n
        # a ring Allreduce moves 2 (p-1)/p of the buffer through each rank's link
        bus = 2 * (comm.size - 1) / comm.size * nbytes / median / 1e9
        print(json.dumps({"ranks": comm.size, "floats": n, "bytes": nbytes, "buckets": len(buckets),
                          "median_ms": median * 1e3, "best_ms": best * 1e3, "bus_GBps": bus,
                          "latency_us": float(np.median(lat)) * 1e6}))  # fmt: skip


def run_allreduce(ranks: int, n: int, reps: int) -> dict[str, float]:
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, __file__, "--_allreduce", str(n), "--reps", str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--models", default="mlp:small:200,nanogpt:tiny:40", help="model:preset:steps,...")
    ap.add_argument("--allreduce-only", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--_allreduce", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._allreduce:
        allreduce(args._allreduce, args.reps)
        return
    if not args.allreduce_only:
        for spec in args.models.split(","):
            model, preset, steps = spec.split(":")
            one = train(model, preset, 1, int(steps), args.device)
            many = train(model, preset, args.ranks, int(steps), args.device)
            print(f"{model} {preset} on {args.device}: 1 rank {1000 / one['ms']:.1f} steps/s ({one['ms']:.1f} ms), "
                  f"{args.ranks} ranks {1000 / many['ms']:.1f} steps/s ({many['ms']:.1f} ms, of it comm "
                  f"{many['comm_ms']:.1f} ms); speed-up {one['ms'] / many['ms']:.2f}x; "
                  f"final loss {one['loss']:.5f} vs {many['loss']:.5f}")  # fmt: skip
    r = run_allreduce(args.ranks, NANOGPT_FULL, args.reps)
    print(f"Allreduce of {r['floats'] / 1e6:.1f}M float32 ({r['bytes'] / 1e6:.1f} MB, {r['buckets']} buckets) on "
          f"{r['ranks']} ranks: median {r['median_ms']:.1f} ms (best {r['best_ms']:.1f}), bus bandwidth "
          f"{r['bus_GBps']:.2f} GB/s; latency of a 4-byte Allreduce {r['latency_us']:.1f} us")  # fmt: skip


if __name__ == "__main__":
    main()
