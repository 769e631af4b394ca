"""How fast can a hand-written WGSL matmul go on this stack (wgpu -> naga -> Vulkan)? A ceiling for the lowering.

Generates one 4096^3 float32 kernel per structural choice, each checked against numpy on a sample of outputs and
timed with GPU timestamps (best of 10), and prints them fastest first beside torch's (same run):

    python benchmarks/wgsl_matmul_ceiling.py [--n 4096] [--quick]

Knobs (each a structural choice the lowering makes or could make):
  tile       BM x BN x BK outputs and k step per workgroup, TM x TN per invocation (TN a multiple of 4)
  a_t        the A tile stored k-major (As[k][m], vec4 along m: TM/4 loads per k) instead of m-major
             (As[m][k], vec4 along k: TM loads per 4 k, which is anneal's today)
  buffers    1: fill, barrier, compute, barrier (a register prefetch of the next step's tile); 2: two tiles in
             workgroup memory, one barrier per step
  unroll_k   the k loop inside a step unrolled fully (1) or by 4 (0)
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Variant:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    a_t: int  # 0: As[m][k] (vec4 along k); 1: As[k][m] filled from 4x4 blocks; 2: As[k][m] as scalars
    buffers: int
    unroll_k: bool

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def __str__(self) -> str:
        layout = ("A m-major", "A k-major", "A k-major scalar")[self.a_t]
        unrolled = " unrolled" if self.unroll_k else ""
        return (
            f"{self.bm}x{self.bn}x{self.bk} reg {self.tm}x{self.tn} {self.threads:>3} inv {layout} "
            f"buf{self.buffers}{unrolled}"
        )


def source(v: Variant, n: int) -> str:
    """The kernel's WGSL: C = A @ B, all n x n row-major, stored as vec4s."""
    wg, nq = v.threads, n // 4
    cols = v.bn // v.tn  # invocations along a tile's columns
    rows = v.bm // v.tm
    a_quads, b_quads = v.bm * v.bk // 4, v.bk * v.bn // 4  # vec4s of each tile
    if a_quads % wg or b_quads % wg or (v.a_t == 1 and (v.bm * v.bk // 16) % wg):
        raise ValueError("tile not a multiple of the workgroup")
    a_size, b_size = a_quads * v.buffers, b_quads * v.buffers
    a_decl = f"array<f32, {4 * a_size}>" if v.a_t == 2 else f"array<vec4<f32>, {a_size}>"
    L: list[str] = [
        f"var<workgroup> As: {a_decl};",
        f"var<workgroup> Bs: array<vec4<f32>, {b_size}>;",
        "@group(0) @binding(0) var<storage, read_write> C: array<vec4<f32>>;",
        "@group(0) @binding(1) var<storage, read> A: array<vec4<f32>>;",
        "@group(0) @binding(2) var<storage, read> B: array<vec4<f32>>;",
        f"@compute @workgroup_size({wg})",
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {",
        f"  let bm = wid.x / {n // v.bn}u; let bn = wid.x % {n // v.bn}u;",
        f"  let tx = lid % {cols}u; let ty = lid / {cols}u;",
    ]
    # global loads of one step: registers ra*, rb*
    a_loads: list[tuple[str, str]] = []  # (register, index expression with kt)
    if v.a_t == 1:  # each invocation reads a 4x4 block (4 rows, 4 k) and stores it transposed
        blocks = v.bm * v.bk // 16
        for j in range(blocks // wg):
            e = f"(lid + {j * wg}u)"
            L.append(f"  let ar{j} = {e} / {v.bk // 4}u; let ak{j} = {e} % {v.bk // 4}u;")
            for i in range(4):
                row = f"bm * {v.bm}u + ar{j} * 4u + {i}u"
                a_loads.append((f"ra{j}_{i}", f"({row}) * {nq}u + kt * {v.bk // 4}u + ak{j}"))
    else:
        for j in range(a_quads // wg):
            e = f"(lid + {j * wg}u)"
            L.append(f"  let ar{j} = {e} / {v.bk // 4}u; let ak{j} = {e} % {v.bk // 4}u;")
            a_loads.append((f"ra{j}", f"(bm * {v.bm}u + ar{j}) * {nq}u + kt * {v.bk // 4}u + ak{j}"))
    b_loads = []
    for j in range(b_quads // wg):
        e = f"(lid + {j * wg}u)"
        L.append(f"  let br{j} = {e} / {v.bn // 4}u; let bc{j} = {e} % {v.bn // 4}u;")
        b_loads.append((f"rb{j}", f"(kt * {v.bk}u + br{j}) * {nq}u + bn * {v.bn // 4}u + bc{j}"))
    for i in range(v.tm):
        for j in range(v.tn // 4):
            L.append(f"  var c{i}_{j} = vec4<f32>(0.0);")
    L.append("  var kt = 0u;")
    for reg, idx in a_loads + b_loads:
        L.append(f"  var {reg} = {'A' if reg.startswith('ra') else 'B'}[{idx}];")

    steps = n // v.bk
    L.append(f"  for (var s = 0u; s < {steps}u; s += 1u) {{")
    abuf = bbuf = ""
    if v.buffers == 2:
        L.append("    let cur = s % 2u;")
        abuf, bbuf = f"cur * {a_quads}u + ", f"cur * {b_quads}u + "
    if v.a_t == 2:
        for j in range(a_quads // wg):
            for kk, comp in enumerate("xyzw"):
                at = f"{abuf.replace('u + ', 'u * 4u + ')}(ak{j} * 4u + {kk}u) * {v.bm}u + ar{j}"
                L.append(f"    As[{at}] = ra{j}.{comp};")
    elif v.a_t == 1:
        for j in range(v.bm * v.bk // 16 // wg):
            r = [f"ra{j}_{i}" for i in range(4)]
            for kk, comp in enumerate("xyzw"):  # As[k][m quad]: the 4 rows' k-th values as one vec4
                L.append(
                    f"    As[{abuf}(ak{j} * 4u + {kk}u) * {v.bm // 4}u + ar{j}] = "
                    f"vec4<f32>({', '.join(x + '.' + comp for x in r)});"
                )
    else:
        for j in range(a_quads // wg):
            L.append(f"    As[{abuf}ar{j} * {v.bk // 4}u + ak{j}] = ra{j};")
    for j in range(b_quads // wg):
        L.append(f"    Bs[{bbuf}br{j} * {v.bn // 4}u + bc{j}] = rb{j};")
    L.append("    workgroupBarrier();")
    L.append(f"    kt = min(s + 1u, {steps - 1}u);")
    for reg, idx in a_loads + b_loads:
        L.append(f"    {reg} = {'A' if reg.startswith('ra') else 'B'}[{idx}];")
    # the multiply-adds of this step
    if v.a_t:
        # k by k: TM/4 A quads (rows), TN/4 B quads (columns)
        body = []
        for i in range(v.tm // 4):
            if v.a_t == 2:
                base = f"{abuf.replace('u + ', 'u * 4u + ')}k * {v.bm}u + (ty + {i * rows}u) * 4u"
                parts = ", ".join(f"As[{base} + {c}u]" for c in range(4))
                body.append(f"      let a{i} = vec4<f32>({parts});")
            else:
                body.append(f"      let a{i} = As[{abuf}k * {v.bm // 4}u + ty + {i * rows}u];")
        for j in range(v.tn // 4):
            body.append(f"      let b{j} = Bs[{bbuf}k * {v.bn // 4}u + tx + {j * cols}u];")
        for i in range(v.tm // 4):
            for r, comp in enumerate("xyzw"):
                for j in range(v.tn // 4):
                    body.append(f"      c{i * 4 + r}_{j} = fma(vec4<f32>(a{i}.{comp}), b{j}, c{i * 4 + r}_{j});")
        k_step, k_end = 1, v.bk
    else:
        body = []
        for i in range(v.tm):
            body.append(f"      let a{i} = As[{abuf}(ty + {i * rows}u) * {v.bk // 4}u + k / 4u];")
        for kk, comp in enumerate("xyzw"):
            for j in range(v.tn // 4):
                body.append(f"      let b{kk}_{j} = Bs[{bbuf}(k + {kk}u) * {v.bn // 4}u + tx + {j * cols}u];")
            for i in range(v.tm):
                for j in range(v.tn // 4):
                    body.append(f"      c{i}_{j} = fma(vec4<f32>(a{i}.{comp}), b{kk}_{j}, c{i}_{j});")
        k_step, k_end = 4, v.bk
    if v.unroll_k:
        for k in range(0, k_end, k_step):
            L.append("    {")
            L.append(f"      let k = {k}u;")
            L += body
            L.append("    }")
    else:
        L.append(f"    for (var k = 0u; k < {k_end}u; k += {k_step}u) {{")
        L += body
        L.append("    }")
    if v.buffers == 1:
        L.append("    workgroupBarrier();")
    L.append("  }")
    if v.a_t:
        row_of = [f"(ty + {(i // 4) * rows}u) * 4u + {i % 4}u" for i in range(v.tm)]
    else:
        row_of = [f"ty + {i * rows}u" for i in range(v.tm)]
    for i in range(v.tm):
        for j in range(v.tn // 4):
            L.append(f"  C[(bm * {v.bm}u + {row_of[i]}) * {nq}u + bn * {v.bn // 4}u + tx + {j * cols}u] = c{i}_{j};")
    L.append("}")
    return "\n".join(L)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--quick", action="store_true", help="a few variants (a software adapter)")
    p.add_argument("--torch-device", default="cuda")
    args = p.parse_args()
    n = args.n
    from anneal.realize import runner

    backend = runner("webgpu").backend
    device = backend.device
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    from anneal_ir import dtypes

    ga, gb, gc = (backend.allocate(n * n, dtypes.float32) for _ in range(3))
    backend.copy_in(ga, a.ravel())
    backend.copy_in(gb, b.ravel())
    sample = rng.integers(0, n, (64, 2))
    want = np.einsum("ik,ki->i", a[sample[:, 0]], b[:, sample[:, 1]])
    flops = 2.0 * n**3
    tiles = [(64, 128, 32, 8, 8), (128, 128, 8, 8, 8), (128, 128, 16, 8, 8), (128, 64, 16, 8, 8),
             (64, 64, 16, 4, 4), (64, 64, 16, 8, 8), (128, 128, 16, 16, 8), (64, 128, 16, 8, 8),
             (128, 256, 8, 8, 16), (128, 64, 32, 8, 8), (128, 128, 16, 8, 16), (128, 128, 32, 16, 8)]  # fmt: skip
    if args.quick:
        tiles = tiles[:2]
    rows = []
    for (bm, bn, bk, tm, tn), a_t, buffers, unroll in itertools.product(tiles, (0, 1, 2), (1, 2), (False, True)):
        v = Variant(bm, bn, bk, tm, tn, a_t, buffers, unroll)
        if v.threads > 1024 or (bm * bk + bk * bn) * 4 * buffers > backend.limits.max_shared_memory:
            continue
        try:
            src = source(v, n)
            module = device.create_shader_module(code=src)
            pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        except Exception as exc:  # noqa: BLE001 - a variant the device refuses is reported
            rows.append((float("inf"), v, f"refused: {str(exc).splitlines()[0][:80]}"))
            continue
        group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
            {"binding": i, "resource": {"buffer": buf.buffer, "offset": 0, "size": buf.buffer.size}}
            for i, buf in enumerate((gc, ga, gb))])  # fmt: skip

        def dispatch(pipeline: object = pipeline, group: object = group, groups: int = (n // bm) * (n // bn)) -> None:
            enc = device.create_command_encoder()
            cp = enc.begin_compute_pass(timestamp_writes=backend._timestamp_writes())
            cp.set_pipeline(pipeline)
            cp.set_bind_group(0, group)
            cp.dispatch_workgroups(groups, 1, 1)
            cp.end()
            device.queue.submit([enc.finish()])

        backend.copy_in(gc, np.zeros(n * n, np.float32))
        dispatch()
        got = backend.copy_out(gc, n * n, dtypes.float32).reshape(n, n)[sample[:, 0], sample[:, 1]]
        ok = np.allclose(got, want, rtol=1e-3, atol=1e-2 * np.sqrt(n))
        best = float("inf")
        if backend.timestamps:
            for _ in range(10):
                backend.start_timing()
                dispatch()
                best = min(best, sum(backend.stop_timing()))
        else:
            for _ in range(3):
                t0 = time.perf_counter()
                dispatch()
                backend.synchronize()
                best = min(best, time.perf_counter() - t0)
        rows.append((best, v, "" if ok else "WRONG"))
    rows.sort(key=lambda r: r[0])
    peer = ""
    try:
        import torch

        ta, tb = torch.tensor(a, device=args.torch_device), torch.tensor(b, device=args.torch_device)
        torch.backends.cuda.matmul.allow_tf32 = False
        for _ in range(3):
            ta @ tb
        if args.torch_device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            ta @ tb
        if args.torch_device == "cuda":
            torch.cuda.synchronize()
        tt = (time.perf_counter() - t0) / 20
        peer = f"torch {tt * 1e3:.3f} ms {flops / tt / 1e12:.1f} TFLOP/s"
    except Exception as exc:  # noqa: BLE001 - the peer is optional here
        peer = f"torch: {exc}"
    print(f"matmul {n}^3 f32, hand-written WGSL variants ({len(rows)}); {peer}")
    for t, v, note in rows:
        print(f"  {t * 1e3:8.3f} ms {flops / t / 1e12:6.1f} TFLOP/s  {v} {note}")


if __name__ == "__main__":
    main()
