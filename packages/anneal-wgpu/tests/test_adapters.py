from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from anneal_ir.plugins import load_plugins
from anneal_ir.settings import Settings
from anneal_wgpu import adapters, plugin


def fake(name: str, adapter_type: str, backend: str = "Vulkan") -> adapters.AdapterInfo:
    return adapters.AdapterInfo(name, "vendor", "", backend, adapter_type, ("shader-f16",), {})


def test_the_chosen_adapter_is_real_and_has_the_limits_the_compiler_reads(adapter: adapters.AdapterInfo) -> None:
    assert adapter.backend in adapters.ACCEPTED_BACKENDS
    for key in adapters.COMPILER_LIMITS:
        assert adapter.limits[key] > 0, key
    assert adapter.limits["max-compute-invocations-per-workgroup"] >= 64
    assert adapter.handle is not None and adapter.handle.info["device"] == adapter.name


def test_opengl_adapters_are_ignored(adapter: adapters.AdapterInfo) -> None:
    usable, ignored = adapters.enumerate_adapters()
    assert adapter in usable
    assert all(a.backend in adapters.ACCEPTED_BACKENDS for a in usable)
    assert all(a.backend not in adapters.ACCEPTED_BACKENDS for a in ignored)


def test_select_adapter_returns_the_wgpu_adapter(adapter: adapters.AdapterInfo) -> None:
    assert adapters.select_adapter() is adapter.handle


def test_probe_reports_the_adapter_and_whether_it_is_software(adapter: adapters.AdapterInfo) -> None:
    availability = plugin.probe()
    assert availability.available
    assert availability.detail == adapter.summary
    assert availability.software == (adapter.adapter_type == "CPU")


def test_choice_by_substring(adapter: adapters.AdapterInfo) -> None:
    wanted = adapter.name.split()[0].upper()  # case-insensitive
    assert adapters.describe(Settings(wgpu_adapter=wanted)).chosen == adapter
    found = adapters.describe(Settings(wgpu_adapter="no-such-adapter"))
    assert found.chosen is None
    assert found.problem.startswith("ANNEAL_WGPU_ADAPTER='no-such-adapter' matches none of the adapters: ")


def test_real_gpus_come_before_software_adapters() -> None:
    cpu, gpu, igpu = fake("lavapipe", "CPU"), fake("big", "DiscreteGPU"), fake("small", "IntegratedGPU")
    ranked = adapters.rank([cpu, igpu, gpu])
    assert ranked == (gpu, igpu, cpu)
    assert adapters.choose(ranked, None) == (gpu, "")
    assert adapters.choose(ranked, "lava") == (cpu, "")
    assert cpu.software and not gpu.software


def test_no_adapter_names_the_fix() -> None:
    chosen, problem = adapters.choose((), None)
    assert chosen is None
    assert "no Vulkan/Metal/D3D12 adapter found" in problem
    assert "apt-get install mesa-vulkan-drivers" in problem


def test_registration_is_cheap_and_creates_no_device() -> None:
    code = "import sys, anneal_wgpu.plugin; assert 'wgpu' not in sys.modules, 'plugin import loaded wgpu'"
    subprocess.run([sys.executable, "-c", code], check=True)
    plugins = load_plugins(Settings(load_plugins=frozenset({"anneal-wgpu"})), stream=None)
    assert plugins.failures == []
    assert plugins.backends["webgpu"].plugin == "anneal-wgpu"


def test_a_missing_or_unusable_runtime_dir_is_replaced_by_a_private_one(tmp_path: Path) -> None:
    import stat

    from anneal_wgpu.loader import ensure_runtime_dir

    env: dict[str, str] = {}
    made = ensure_runtime_dir(env)
    assert made is not None and env["XDG_RUNTIME_DIR"] == made
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700 and os.stat(made).st_uid == os.getuid()
    assert ensure_runtime_dir(env) is None and env["XDG_RUNTIME_DIR"] == made  # a valid one stays
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # what Mesa refuses: readable by others
    for bad in (str(shared), str(tmp_path / "missing")):
        env = {"XDG_RUNTIME_DIR": bad}
        assert ensure_runtime_dir(env) not in (None, bad) and env["XDG_RUNTIME_DIR"] != bad


def test_enumerating_adapters_prints_no_mesa_runtime_dir_error() -> None:
    """Mesa's lavapipe prints "XDG_RUNTIME_DIR is invalid or not set" at each start without one."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "from anneal_wgpu.adapters import enumerate_adapters; print(len(enumerate_adapters()[0]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 1 and "XDG_RUNTIME_DIR" not in result.stderr
