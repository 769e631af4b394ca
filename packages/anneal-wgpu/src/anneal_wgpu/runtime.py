"""The wgpu runtime: one device per process, buffers, pipelines, batched dispatches.

Dispatches are recorded into one command encoder and submitted together when the host
needs data (copy_out), writes data (copy_in) or synchronizes; pipelines are cached by
kernel source and bind groups by buffer tuple. Errors from wgpu become WebGPUError naming
the kernel.

Timing (``ANNEAL_DEBUG=2``): where the adapter has ``timestamp-query``, ``start_timing`` /
``stop_timing`` give each dispatch's GPU time from timestamps written at the start and end of
its compute pass, with no host synchronization between kernels; the Runner falls back to a
synchronize around each kernel where they are missing.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anneal_ir import DType, UOp, dtypes
from anneal_ir.settings import Settings
from anneal_ir.sint import resolve
from anneal_schedule.accumulate import accumulate_wide
from anneal_schedule.analysis import canonical
from anneal_schedule.backend import Limits
from anneal_schedule.heuristic import choose_opts
from anneal_schedule.opt import Opt
from anneal_wgpu.adapters import select_adapter
from anneal_wgpu.beam import BeamCache, reads_own_output, search
from anneal_wgpu.kernel_cache import KernelCache
from anneal_wgpu.loader import load_wgpu
from anneal_wgpu.reach import fits, reach
from anneal_wgpu.render import Kernel, render_wgsl, storage_type
from anneal_wgpu.render_pool import RenderPool

_STORAGE_NP = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "u32": np.uint32}


class WebGPUError(RuntimeError):
    """A failure inside wgpu (validation, out of memory, device lost), with the kernel named."""


_buffer_ids = itertools.count()
_program_ids = itertools.count()
QUERIES_PER_SET = 4096  # WebGPU's limit on a query set's size: two timestamps per dispatch
MAX_RENDER_PROCESSES = 16  # lowering a step's kernels in parallel: a first step takes seconds, not tens
MAX_PIPELINE_THREADS = 16  # pipelines created at once (the driver compiles shaders with the GIL released)
# reductions with fewer workgroups are split: on an H200 1024 against 512 took ResNet-9's step from 108.7 to 94.5 ms
# (its weight gradients and batch-norm statistics), GPT-2's 177.5 -> 175.8, nanogpt's unchanged (RESULTS.md)
PARALLEL_WORKGROUPS = 1024
SUBMIT_EVERY = 64  # dispatches per submit at most (a long schedule starts running before it is all recorded)
SUBMIT_FIRST = 8  # dispatches of the first submit after the host waited for the GPU, doubling to SUBMIT_EVERY
SUBMIT_SOON_DISPATCHES = 16  # flush_soon submits a schedule of this many dispatches at once
SUBMIT_INTERVAL = 1e-3  # seconds: flush_soon submits fewer dispatches only this long after the last submit


@dataclass
class GPUBuffer:
    buffer: Any
    size: int
    dtype: DType
    storage: str  # the WGSL element type it is stored as
    uid: int = field(default_factory=lambda: next(_buffer_ids))  # never reused, unlike id()

    @property
    def capacity(self) -> int:
        """Elements its memory holds (a pooled buffer may be longer than size)."""
        return int(self.buffer.size) // np.dtype(_STORAGE_NP[self.storage]).itemsize


@dataclass
class WebGPUProgram:
    name: str
    source: str
    kernel: Kernel
    pipeline: Any
    layout: Any
    ast: UOp
    tuned: bool = True  # False: ANNEAL_BEAM searches its opts on the first run
    uid: int = field(default_factory=lambda: next(_program_ids))  # per pipeline; bind groups are cached by it
    # the largest element each argument is read or written at, proved (anneal_wgpu.reach): pipeline has no bounds
    # checks, and binds buffers that hold them; None: pipeline keeps the checks
    reach: dict[int, int] | None = None
    checked: tuple[Any, Any] | None = None  # (pipeline, layout) with checks, for buffers shorter than reach

    @property
    def opts(self) -> str:
        return self.kernel.strategy


def to_storage(data: np.ndarray, dtype: DType, storage: str) -> np.ndarray:
    if dtype == dtypes.bfloat16:  # bits -> f32
        return (data.astype(np.uint32) << 16).view(np.float32)
    if dtype.is_int and dtype.itemsize == 8 and data.size:
        lo, hi = (-(2**31), 2**31 - 1) if storage == "i32" else (0, 2**32 - 1)
        if data.min() < lo or data.max() > hi:
            raise WebGPUError(f"{dtype.name} values outside [{lo}, {hi}] cannot be stored on WebGPU ({storage})")
    return np.ascontiguousarray(data.astype(_STORAGE_NP[storage]))


def from_storage(data: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:  # f32 -> bf16 bits, round to nearest even
        bits = data.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    if dtype == dtypes.bool:
        return data != 0
    return data.astype(dtype.np)


def _mapped(staging: Any, reads: list[tuple[GPUBuffer, int, DType]], offsets: list[int]) -> list[np.ndarray]:
    """The reads' arrays out of a mapped staging buffer, which is unmapped and destroyed."""
    try:
        raw = staging.read_mapped(copy=True)
    finally:
        staging.unmap()
        staging.destroy()
    out = []
    for (handle, size, dtype), offset in zip(reads, offsets):
        arr = np.frombuffer(raw, dtype=_STORAGE_NP[handle.storage], offset=offset, count=size)
        out.append(from_storage(arr, dtype))
    return out


@dataclass
class PendingRead:
    """A read of device buffers under way (WebGPUBackend.copy_out_async): the map of its staging buffer completes
    on wgpu's polling thread once the GPU has run the work recorded before it."""

    promise: Any  # wgpu's GPUPromise of the map
    staging: Any
    reads: list[tuple[GPUBuffer, int, DType]]
    offsets: list[int]
    arrays: list[np.ndarray] | None = None

    def ready(self) -> bool:
        """Whether result() would return at once. wgpu-py sets the promise's thread event from its polling
        thread when the map completes (what its own sync_wait waits on); a wgpu without it reads False until
        result() waits."""
        if self.arrays is not None:
            return True
        event = getattr(self.promise, "_thread_event", None)
        return bool(event is not None and event.is_set())

    def result(self) -> list[np.ndarray]:
        if self.arrays is None:
            self.promise.sync_wait()
            self.arrays = _mapped(self.staging, self.reads, self.offsets)
        return self.arrays


@dataclass
class Timing:
    """Timestamps being recorded: each run's query pair (None: it dispatched nothing), query sets."""

    runs: list[int | None] = field(default_factory=list)
    pairs: int = 0
    sets: list[Any] = field(default_factory=list)


class WebGPUBackend:
    name = "webgpu"

    def __init__(self, settings: Settings | None = None) -> None:
        wgpu = load_wgpu()

        settings = settings or Settings.from_env()
        self.beam = settings.beam
        self.bounds_checks = settings.wgpu_checks  # ANNEAL_WGPU_CHECKS=1: every kernel keeps them (debugging)
        cache_root = settings.cache_root()[0]
        self.beam_cache = BeamCache(cache_root / "beam.json") if self.beam > 0 else None
        self.kernel_cache = KernelCache(cache_root / "wgsl")
        self.render_pool: RenderPool | None = None  # worker processes, started by the first prepare()
        self.ready_pipelines: dict[tuple[str, bool], Any] = {}  # (WGSL, trusted) -> pipeline, made by prepare()
        self.reaches: dict[bytes, dict[int, int] | None] = {}  # kernel key -> its proved reach (anneal_wgpu.reach)
        self.planned: dict[bytes, tuple[UOp, tuple[Opt, ...]]] = {}  # kernel key -> contraction form, heuristic opts
        self.wgpu = wgpu
        adapter = select_adapter()
        self.adapter = adapter
        features = [f for f in ("shader-f16", "timestamp-query") if f in adapter.features]
        keep = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
                "max-compute-workgroups-per-dimension", "max-compute-invocations-per-workgroup",
                "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
                "max-compute-workgroup-storage-size", "max-bindings-per-bind-group")  # fmt: skip
        required = {k: adapter.limits[k] for k in keep if k in adapter.limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=required)
        self.f16 = "shader-f16" in features
        lim = self.device.limits
        self.limits = Limits(
            max_buffers=min(lim["max-storage-buffers-per-shader-stage"], lim["max-bindings-per-bind-group"]),
            max_workgroup_size=(
                lim["max-compute-workgroup-size-x"],
                lim["max-compute-workgroup-size-y"],
                lim["max-compute-workgroup-size-z"],
            ),  # fmt: skip
            max_workgroup_invocations=lim["max-compute-invocations-per-workgroup"],
            max_shared_memory=lim["max-compute-workgroup-storage-size"],
            max_workgroups_per_dim=lim["max-compute-workgroups-per-dimension"],
            max_binding_size=lim["max-storage-buffer-binding-size"],
            f16=self.f16,
            parallel=PARALLEL_WORKGROUPS,
        )
        self.workgroup = min(64, self.limits.max_workgroup_invocations)
        self.encoder: Any = None
        self.compute_pass: Any = None  # the encoder's open pass: dispatches share it until the next submit
        self.recorded = 0  # dispatches in the open encoder
        self._submitted = 0.0  # perf_counter() of the last submit
        self._submit_at = SUBMIT_FIRST  # dispatches that run() submits at: an idle GPU gets its first ones soon
        self.bind_groups: dict[tuple, Any] = {}
        self.var_buffers: dict[tuple[int, ...], Any] = {}
        self._fence: Any = None
        self.pool: dict[int, list[Any]] = {}  # freed wgpu buffers by byte size
        self.pooled_bytes = 0
        self.pool_limit = 1 << 32
        self.timestamps = "timestamp-query" in features  # per-dispatch GPU times for ANNEAL_DEBUG=2
        self.timestamp_period = self._timestamp_period() if self.timestamps else 1.0  # ns per tick
        self._timing: Timing | None = None  # between start_timing and stop_timing

    def _timestamp_period(self) -> float:
        """Nanoseconds per timestamp tick (wgpu-native resolves raw ticks; 1.0 on most drivers)."""
        try:
            from wgpu.backends.wgpu_native._ffi import lib

            period = float(lib.wgpuQueueGetTimestampPeriod(self.device.queue._internal))
        except Exception:  # an older or different wgpu: assume nanoseconds, as WebGPU specifies
            return 1.0
        return period if period > 0 else 1.0

    # ---- timing ----
    def start_timing(self) -> bool:
        """Record GPU timestamps around each following dispatch; False when the adapter has none."""
        if not self.timestamps:
            return False
        self._timing = Timing()
        return True

    def stop_timing(self) -> list[float]:
        """Seconds of GPU time of each run since start_timing, in order (0.0 for a run that dispatched
        nothing). Waits for the work."""
        timing, self._timing = self._timing, None
        if timing is None:
            return []
        ticks: list[int] = []
        self.flush()
        for k, query_set in enumerate(timing.sets):
            count = min(QUERIES_PER_SET, 2 * timing.pairs - k * QUERIES_PER_SET)
            usage = self.wgpu.BufferUsage.QUERY_RESOLVE | self.wgpu.BufferUsage.COPY_SRC
            resolved = self.device.create_buffer(size=8 * count, usage=usage)
            encoder = self.device.create_command_encoder()
            encoder.resolve_query_set(query_set, 0, count, resolved, 0)
            self.device.queue.submit([encoder.finish()])
            ticks += np.frombuffer(self.device.queue.read_buffer(resolved), dtype=np.uint64).tolist()
        return [0.0 if q is None else max(ticks[2 * q + 1] - ticks[2 * q], 0) * self.timestamp_period * 1e-9
                for q in timing.runs]  # fmt: skip

    def _timestamp_writes(self) -> Any:
        """The query pair of the next dispatch (None when not timing)."""
        timing = self._timing
        if timing is None:
            return None
        index = 2 * timing.pairs
        if index // QUERIES_PER_SET >= len(timing.sets):
            timing.sets.append(self.device.create_query_set(type="timestamp", count=QUERIES_PER_SET))
        timing.runs.append(timing.pairs)
        timing.pairs += 1
        return {"query_set": timing.sets[index // QUERIES_PER_SET],
                "beginning_of_pass_write_index": index % QUERIES_PER_SET,
                "end_of_pass_write_index": index % QUERIES_PER_SET + 1}  # fmt: skip

    # ---- memory ----
    def allocate(self, size: int, dtype: DType) -> GPUBuffer:
        storage = storage_type(dtype, self.f16)
        nbytes = max(16, math.ceil(size * np.dtype(_STORAGE_NP[storage]).itemsize / 16) * 16)
        if nbytes > self.limits.max_binding_size:
            raise WebGPUError(f"a buffer of {size} {dtype.name} ({nbytes} bytes) exceeds the device's max storage "
                              f"binding size of {self.limits.max_binding_size} bytes")  # fmt: skip
        pooled = self.pool.get(nbytes)
        if pooled:
            self.pooled_bytes -= nbytes
            return GPUBuffer(pooled.pop(), size, dtype, storage)
        usage = self.wgpu.BufferUsage.STORAGE | self.wgpu.BufferUsage.COPY_SRC | self.wgpu.BufferUsage.COPY_DST
        return GPUBuffer(self.device.create_buffer(size=nbytes, usage=usage), size, dtype, storage)

    def free(self, handle: GPUBuffer) -> None:
        """Keep the memory for the next allocation of the same size. Work already recorded that
        uses it runs first: the queue keeps order, so reuse is safe."""
        nbytes = handle.buffer.size
        if self.pooled_bytes + nbytes <= self.pool_limit:
            self.pool.setdefault(nbytes, []).append(handle.buffer)
            self.pooled_bytes += nbytes

    def copy_in(self, handle: GPUBuffer, data: np.ndarray) -> None:
        self.flush()  # dispatches recorded so far must see the old contents
        arr = to_storage(data, handle.dtype, handle.storage)
        if arr.nbytes:
            pad = (-arr.nbytes) % 4
            raw = arr.tobytes() + b"\0" * pad
            self.device.queue.write_buffer(handle.buffer, 0, raw)

    def copy_out(self, handle: GPUBuffer, size: int, dtype: DType) -> np.ndarray:
        return self.copy_out_many([(handle, size, dtype)])[0]

    def copy_out_many(self, reads: list[tuple[GPUBuffer, int, DType]]) -> list[np.ndarray]:
        """Several buffers in one round trip: copied into one mappable buffer behind the recorded dispatches,
        one submit, one map (a read costs a wait for the queue; a step's value and its index checks share it)."""
        staging, offsets = self._stage(reads)
        staging.map_sync("READ")
        self._submit_at = SUBMIT_FIRST  # the GPU is idle: what comes next starts it in a few dispatches
        return _mapped(staging, reads, offsets)

    def copy_out_async(self, reads: list[tuple[GPUBuffer, int, DType]]) -> PendingRead:
        """copy_out_many without the wait: the copies are recorded behind the dispatches recorded so far and
        submitted, the staging buffer is mapped asynchronously, and the host goes on recording (a data-parallel
        step starts a bucket's exchange this way in the middle of its backward). The read sees exactly what those
        dispatches wrote; ready() says whether the map completed, result() waits for it and returns the arrays."""
        staging, offsets = self._stage(reads)
        return PendingRead(staging.map_async("READ"), staging, list(reads), offsets)

    def _stage(self, reads: list[tuple[GPUBuffer, int, DType]]) -> tuple[Any, list[int]]:
        """A mappable buffer, the reads' copies into it recorded behind the dispatches so far and submitted; with
        each read's byte offset in it."""
        offsets, total = [], 0
        for handle, _, _ in reads:
            offsets.append(total)
            total += handle.buffer.size  # a multiple of 16: every copy stays 4-byte aligned
        usage = self.wgpu.BufferUsage.COPY_DST | self.wgpu.BufferUsage.MAP_READ
        staging = self.device.create_buffer(size=max(total, 16), usage=usage)
        if self.encoder is None:
            self.encoder = self.device.create_command_encoder()
        self._end_pass()
        for (handle, _, _), offset in zip(reads, offsets):
            self.encoder.copy_buffer_to_buffer(handle.buffer, 0, staging, offset, handle.buffer.size)
        self.flush()
        return staging, offsets

    # ---- programs ----
    def prepare(self, kernels: list[tuple[str, UOp]]) -> None:
        """Ahead of a schedule's first run: its new kernels under their opts, rendered and their pipelines
        created (render_ahead)."""
        self.render_ahead([(name, *self.plan(ast)[:2]) for name, ast in kernels])

    def render_ahead(self, chosen: list[tuple[str, UOp, tuple[Opt, ...]]]) -> None:
        """Render each (name, kernel, opts) in worker processes (the lowering is pure Python) into the kernel cache
        that build() reads, then create their pipelines several at once: a schedule's kernels, or the candidates
        of one kernel that a search times."""
        names = {(ast, opts): name for name, ast, opts in chosen}  # each kernel under each opts once
        found = {key: self.kernel_cache.get(*key, self.f16) for key in names}
        todo = [(names[key], *key) for key, kernel in found.items() if kernel is None]
        workers = min(len(todo) // 2, os.cpu_count() or 1, MAX_RENDER_PROCESSES)
        if workers >= 2:
            if self.render_pool is None:
                self.render_pool = RenderPool(workers)
            rendered = self.render_pool.render([(name, ast, opts, self.f16) for name, ast, opts in todo])
            for (_, ast, opts), kernel in zip(todo, rendered):
                if kernel is not None:
                    self.kernel_cache.put(ast, opts, self.f16, kernel)
                    found[(ast, opts)] = kernel
        self.create_pipelines([(k.source, self.trusted(ast)) for (ast, _), k in found.items() if k is not None])

    def create_pipelines(self, sources: list[tuple[str, bool]]) -> None:
        """Pipelines for these kernels (WGSL, without bounds checks), created by a few threads at once: the
        driver's shader compiler is most of a first step's time, and wgpu-native releases the GIL while it runs. A
        kernel that fails is left to build(), which creates it again alone and reports the error with its name."""
        todo = [s for s in dict.fromkeys(sources) if s not in self.ready_pipelines]
        if len(todo) < 2:
            return

        def create(item: tuple[str, bool]) -> Any:
            try:
                return self._pipeline(*item)
            except Exception:
                return None

        with ThreadPoolExecutor(min(len(todo), MAX_PIPELINE_THREADS)) as pool:
            for item, pipeline in zip(todo, pool.map(create, todo)):
                if pipeline is not None:
                    self.ready_pipelines[item] = pipeline

    def trusted(self, ast: UOp) -> bool:
        """May this kernel's pipeline leave out the bounds checks (its reach proved)?"""
        return not self.bounds_checks and self._reach(ast) is not None

    def _reach(self, ast: UOp) -> dict[int, int] | None:
        if ast.key not in self.reaches:
            self.reaches[ast.key] = reach(ast)
        return self.reaches[ast.key]

    def _pipeline(self, source: str, trusted: bool) -> Any:
        return self.device.create_compute_pipeline(
            layout="auto", compute={"module": self._shader_module(source, trusted), "entry_point": "main"}
        )

    def _shader_module(self, source: str, trusted: bool) -> Any:
        """The WGSL as a shader module, with naga's bounds checks unless trusted (wgpu-native's trusted modules;
        loops keep their forced bound either way)."""
        if not trusted:
            return self.device.create_shader_module(code=source)
        from wgpu.backends.wgpu_native._api import GPUShaderModule, ffi, lib, new_struct_p, to_c_string_view

        wgsl = new_struct_p("WGPUShaderSourceWGSL *", code=to_c_string_view(source))
        wgsl[0].chain.next = ffi.NULL
        wgsl[0].chain.sType = lib.WGPUSType_ShaderSourceWGSL
        desc = new_struct_p("WGPUShaderModuleDescriptor *", nextInChain=ffi.cast("WGPUChainedStruct *", wgsl),
                            label=to_c_string_view(""))  # fmt: skip
        checks = lib.WGPUShaderRuntimeChecks_ForceLoopBounding
        handle = lib.wgpuDeviceCreateShaderModuleTrusted(self.device._internal, desc, checks)
        if handle == ffi.NULL:
            raise WebGPUError("creating a shader module failed")
        return GPUShaderModule("", handle, self.device)

    def plan(self, ast: UOp) -> tuple[UOp, tuple[Opt, ...], bool]:
        """The kernel in contraction form (one contraction where the graph wrote nested or gated sums; half sums
        accumulated in float32), its opts (BEAM's cached winner, else the heuristic's) and whether BEAM chose
        them. prepare() and compile() both ask: the rewrite and the heuristic run once per kernel."""
        planned = self.planned.get(ast.key)
        if planned is None:
            form = canonical(accumulate_wide(ast))  # float16 sums in float32 (shader-f16 would keep them half)
            planned = self.planned[ast.key] = (form, choose_opts(form, self.limits))
        form, heuristic = planned
        searched = self.beam_cache.get(self._beam_key(form), form) if self.beam_cache is not None else None
        return form, searched or heuristic, searched is not None

    def compile(self, name: str, ast: UOp) -> WebGPUProgram:
        ast, opts, searched = self.plan(ast)
        prog = self.build(name, ast, opts)
        # a kernel over Variables is not searched: its best opts depend on the values
        prog.tuned = searched or self.beam_cache is None or reads_own_output(ast) or bool(prog.kernel.variables)
        return prog

    def build(self, name: str, ast: UOp, opts: tuple[Opt, ...]) -> WebGPUProgram:
        kernel = self.kernel_cache.get(ast, opts, self.f16)
        if kernel is None:
            kernel = render_wgsl(name, ast, self.f16, opts)
            self.kernel_cache.put(ast, opts, self.f16, kernel)
        elif kernel.name != name:  # the same kernel under another name: the source names it in a comment only
            kernel = dataclasses.replace(kernel, name=name)
        trusted = self.trusted(ast)
        pipeline = self.ready_pipelines.pop((kernel.source, trusted), None)
        try:
            if pipeline is None:
                pipeline = self._pipeline(kernel.source, trusted)
        except Exception as exc:  # wgpu raises its own validation errors: name the kernel
            raise WebGPUError(f"kernel {name} failed to compile: {type(exc).__name__}: {exc}\n{kernel.source}") from exc
        return WebGPUProgram(name, kernel.source, kernel, pipeline, pipeline.get_bind_group_layout(0), ast,
                             reach=self._reach(ast) if trusted else None)  # fmt: skip

    def _beam_key(self, ast: UOp) -> str:
        return f"{self.adapter.info['device']}|{ast.key.hex()}"

    def _tune(self, program: WebGPUProgram, buffers: list[GPUBuffer]) -> None:
        """ANNEAL_BEAM: search once, on the first run (real buffers), then keep the winner."""
        assert self.beam_cache is not None
        timing, self._timing = self._timing, None  # the search's own runs are not the kernel's
        try:
            best = search(self, program, program.ast, buffers, self.beam)
        finally:
            self._timing = timing
        winner = self.build(program.name, program.ast, best)
        program.source, program.kernel, program.pipeline = winner.source, winner.kernel, winner.pipeline
        program.layout, program.uid = winner.layout, winner.uid
        program.reach, program.checked = winner.reach, winner.checked
        program.tuned = True
        self.beam_cache.put(self._beam_key(program.ast), best)

    def _var_buffer(self, values: tuple[int, ...]) -> Any:
        """A uniform buffer holding these Variable values (one per distinct tuple: dispatches recorded
        before a submit cannot share one buffer rewritten in between)."""
        buf = self.var_buffers.get(values)
        if buf is None:
            data = np.zeros(4 * math.ceil(len(values) / 4), np.int32)
            data[: len(values)] = values
            buf = self.device.create_buffer_with_data(data=data.tobytes(), usage=self.wgpu.BufferUsage.UNIFORM)
            if len(self.var_buffers) > 256:
                self.var_buffers.pop(next(iter(self.var_buffers)))
            self.var_buffers[values] = buf
        return buf

    def _bind_group(self, prog: WebGPUProgram, buffers: list[GPUBuffer], values: tuple[int, ...] = ()) -> Any:
        """(pipeline, bind group) for these buffers: the unchecked pipeline where they hold what the kernel
        reaches, else one with bounds checks."""
        key = (prog.uid, *(b.uid for b in buffers), values)  # uids, never reused (unlike id())
        found = self.bind_groups.pop(key, None)
        if found is not None:
            self.bind_groups[key] = found  # the most recent last: the cache drops the least recently used
        else:
            pipeline, layout = prog.pipeline, prog.layout
            if prog.reach is not None and not fits(prog.reach, {i: b.capacity for i, b in enumerate(buffers)}):
                if prog.checked is None:
                    checked = self._pipeline(prog.source, trusted=False)
                    prog.checked = (checked, checked.get_bind_group_layout(0))
                pipeline, layout = prog.checked
            entries = [{"binding": arg, "resource": {"buffer": buffers[arg].buffer, "offset": 0,
                                                     "size": buffers[arg].buffer.size}}
                       for arg, _, _ in prog.kernel.bindings]  # fmt: skip
            if prog.kernel.variables:
                vb = self._var_buffer(values)
                entries.append({"binding": len(prog.kernel.bindings),
                                "resource": {"buffer": vb, "offset": 0, "size": vb.size}})  # fmt: skip
            found = pipeline, self.device.create_bind_group(layout=layout, entries=entries)
            if len(self.bind_groups) > 512:  # a bind group keeps its buffers alive: bound the cache
                self.bind_groups.pop(next(iter(self.bind_groups)))
            self.bind_groups[key] = found
        return found

    def run(self, program: WebGPUProgram, buffers: list[GPUBuffer], var_values: dict[str, int]) -> None:
        if not program.tuned:
            program.tuned = True  # before searching: the search itself runs the program
            self._tune(program, buffers)
        k = program.kernel
        values = tuple(var_values[v] for v in k.variables)
        groups = resolve(k.groups, var_values)
        if groups == 0:
            if self._timing is not None:
                self._timing.runs.append(None)
            return
        max_x = self.limits.max_workgroups_per_dim
        gy = math.ceil(groups / max_x)  # fold into 2-D past the limit, as evenly as possible: a row of
        gx = math.ceil(groups / gy)  # max_x would launch up to max_x - 1 idle workgroups
        if gy > max_x:
            raise WebGPUError(f"kernel {program.name}: {groups} workgroups exceed the dispatch limits")
        try:
            pipeline, bind_group = self._bind_group(program, buffers, values)
            cpass = self._pass_for_dispatch()
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, bind_group)
            cpass.dispatch_workgroups(gx, gy, 1)
            if self._timing is not None:
                self._end_pass()
            self.recorded += 1
        except Exception as exc:
            self.encoder = self.compute_pass = None
            raise WebGPUError(f"kernel {program.name} failed to dispatch: {type(exc).__name__}: {exc}") from exc
        if self.recorded >= self._submit_at:
            self.flush()
            self._submit_at = min(SUBMIT_EVERY, 2 * self._submit_at)

    def _pass_for_dispatch(self) -> Any:
        """The compute pass the next dispatch goes into. One pass holds every dispatch until the next submit
        (WebGPU makes each dispatch's writes visible to the next one in the pass), which saves the host a pass
        per kernel; when timing, each dispatch gets a pass of its own, whose timestamps time it alone."""
        if self.encoder is None:
            self.encoder = self.device.create_command_encoder()
        writes = self._timestamp_writes()
        if writes:
            self._end_pass()
            self.compute_pass = self.encoder.begin_compute_pass(timestamp_writes=writes)
        elif self.compute_pass is None:
            self.compute_pass = self.encoder.begin_compute_pass()
        return self.compute_pass

    def _end_pass(self) -> None:
        if self.compute_pass is not None:
            cpass, self.compute_pass = self.compute_pass, None
            cpass.end()

    def flush_soon(self) -> None:
        """The end of a schedule: submit what was recorded, unless it is a few dispatches recorded within
        SUBMIT_INTERVAL of the last submit; the next schedule's or a synchronization's submit takes those
        (a submit costs the host about as much as recording a dispatch: back-to-back calls of one small
        kernel would spend half their host time submitting)."""
        if self.encoder is None:
            return
        if self.recorded >= SUBMIT_SOON_DISPATCHES or time.perf_counter() - self._submitted >= SUBMIT_INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Submit what was recorded: the GPU starts on it while the host goes on (the Runner flushes after
        each schedule, and run() every SUBMIT_EVERY dispatches, so recording and running overlap)."""
        if self.encoder is not None:
            self._end_pass()
            encoder, self.encoder, self.recorded = self.encoder, None, 0
            self._submitted = time.perf_counter()
            try:
                self.device.queue.submit([encoder.finish()])
            except Exception as exc:
                raise WebGPUError(f"submitting kernels failed: {type(exc).__name__}: {exc}") from exc

    def synchronize(self) -> None:
        """Wait for every submitted kernel. (Reading back a tiny buffer waits for the queue; wgpu-py
        0.32's on_submitted_work_done_sync does not work with its bundled wgpu-native.)"""
        self.flush()
        if self._fence is None:
            usage = self.wgpu.BufferUsage.COPY_SRC | self.wgpu.BufferUsage.COPY_DST
            self._fence = self.device.create_buffer(size=16, usage=usage)
        self.device.queue.read_buffer(self._fence)
        self._submit_at = SUBMIT_FIRST
