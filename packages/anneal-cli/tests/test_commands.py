"""The commands against the plugins installed in this environment (anneal-cpu, anneal-models, anneal-wgpu)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from anneal_cli.main import AnnealGroup


def test_version_lists_anneal_distributions(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("anneal-cli 0.1.0 (Python ")
    assert any(line.split()[:2] == ["anneal-ir", "0.1.0"] for line in lines)
    assert any(line.split() == ["anneal-cpu", "0.1.0", "plugin"] for line in lines)


def test_plugins_json_lists_the_builtins(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    loaded = {p["name"]: p for p in report["plugins"]}
    assert {"anneal-cpu", "anneal-models"} <= set(loaded)
    assert loaded["anneal-cpu"] == {
        "name": "anneal-cpu",
        "version": "0.1.0",
        "module": "anneal_cpu.plugin",
        "hooks": ["register_backends"],
        "provides": ["backend cpu"],
    }
    assert report["failures"] == []


def test_plugins_plain(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["plugins"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].split() == ["PLUGIN", "VERSION", "MODULE", "HOOKS", "PROVIDES"]
    assert "anneal_cpu.plugin" in result.stdout


def test_allow_list_from_the_environment(cli: AnnealGroup, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANNEAL_LOAD_PLUGINS", "anneal-cpu")
    report = json.loads(runner.invoke(cli, ["plugins", "--json"]).stdout)
    assert [p["name"] for p in report["plugins"]] == ["anneal-cpu"]


def test_devices_lists_cpu_and_what_auto_means(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    cpu = next(b for b in report["backends"] if b["name"] == "cpu")
    assert cpu["available"] and cpu["plugin"] == "anneal-cpu"
    assert report["auto"]["device"] in ("cpu", "webgpu")
    assert report["auto"]["note"].startswith(f"auto chose {report['auto']['device']}")
    plain = runner.invoke(cli, ["devices"])
    assert plain.stdout.splitlines()[0].split() == ["DEVICE", "AVAILABLE", "PLUGIN", "DETAIL"]


def test_doctor_reports_adapter_or_the_fix(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["doctor"])
    assert f"numpy {__import__('numpy').__version__}, BLAS: " in result.stdout
    assert "device: auto chose " in result.stdout
    assert "cpu kernels: C via " in result.stdout or "cpu kernels: numpy only (" in result.stdout
    if "cpu kernels: C via " in result.stdout:  # numpy's wheels on Linux carry OpenBLAS: the pool calls its sgemm
        assert "threads; contractions by cblas_sgemm of numpy's OpenBLAS" in result.stdout
    if result.exit_code == 0:
        assert "max storage buffers per shader stage" in result.stdout
        assert "compiler features: shader-f16 " in result.stdout
    else:
        assert result.exit_code == 1
        assert "the CPU backend (numpy) still works" in result.stdout
        assert result.stderr.startswith("anneal: error: ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="hides Vulkan drivers the Linux way")
def test_doctor_without_a_vulkan_driver_names_the_fix() -> None:
    import anneal_wgpu  # noqa: F401 - anneal-cli's tests install its wgpu extra

    # VK_ICD_FILENAMES pointing nowhere makes the Vulkan loader find no driver at all.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANNEAL_")}
    env["VK_ICD_FILENAMES"] = env["VK_DRIVER_FILES"] = "/nonexistent/icd.json"
    result = subprocess.run(
        [sys.executable, "-m", "anneal_cli.main", "doctor"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no Vulkan/Metal/D3D12 adapter found" in result.stdout
    assert "apt-get install mesa-vulkan-drivers" in result.stdout
    assert "the CPU backend (numpy) still works" in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("anneal: error: no Vulkan/Metal/D3D12 adapter found")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Mesa's runtime-directory check is Linux's")
def test_no_xdg_runtime_dir_noise_from_doctor_or_a_webgpu_training(adapter: object, tmp_path: Path) -> None:
    """Without a usable XDG_RUNTIME_DIR, Mesa's Vulkan drivers print an error line on every start; anneal gives
    the process a private one before the loader starts (anneal_wgpu/loader.py), so its commands print none."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR" and not k.startswith("ANNEAL_")}
    env["TMPDIR"] = str(tmp_path)  # where the private runtime folder goes: this test's own

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)

    raw = run(sys.executable, "-c", "import wgpu; wgpu.gpu.enumerate_adapters_sync()")  # wgpu without anneal
    if "XDG_RUNTIME_DIR" not in raw.stderr:
        pytest.skip("this Vulkan driver prints nothing about XDG_RUNTIME_DIR: nothing to hide")
    anneal = [sys.executable, "-m", "anneal_cli.main"]
    doctor = run(*anneal, "doctor")
    assert doctor.returncode == 0 and "webgpu:0" in doctor.stdout, doctor.stdout + doctor.stderr
    train = run(*anneal, "train", "mlp", "--device", "webgpu", "--steps", "2", "--plain")
    assert train.returncode == 0 and "step 2/2" in train.stdout, train.stdout + train.stderr
    for result in (doctor, train):
        assert [line for line in result.stderr.splitlines() if "XDG_RUNTIME_DIR" in line] == []


def test_doctor_names_the_cpu_compiler_or_the_fix(
    cli: AnnealGroup, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no cc, gcc or clang
    assert "cpu kernels: numpy only (no C compiler (cc, gcc or clang) on PATH); install gcc" in \
        runner.invoke(cli, ["doctor"]).stdout  # fmt: skip
    monkeypatch.setenv("ANNEAL_CPU_CC", "numpy")
    assert "cpu kernels: numpy only (ANNEAL_CPU_CC=numpy)" in runner.invoke(cli, ["doctor"]).stdout


def test_no_placeholder_commands(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    listed = {line.split()[0] for line in result.stdout.split("Commands:")[1].splitlines() if line.strip()}
    assert listed == {
        "bench",
        "cache",
        "devices",
        "doctor",
        "download",
        "eval",
        "explain",
        "gpt2",
        "graph",
        "kernels",
        "plugins",
        "sample",
        "score",
        "train",
        "viz",
        "web",
    }


def test_usage_errors_exit_2(cli: AnnealGroup, runner: CliRunner) -> None:
    assert runner.invoke(cli, ["no-such-command"]).exit_code == 2
    assert runner.invoke(cli, ["train"]).exit_code == 2
    assert runner.invoke(cli, ["train", "x", "--steps", "0"]).exit_code == 2


def test_a_reader_that_goes_away_ends_the_command_quietly(offline_data: None) -> None:
    """`anneal kernels ... | head -1`: no BrokenPipeError, no error line, the exit status click gives it (1)."""
    argv = [sys.executable, "-m", "anneal_cli.main", "kernels", "nanogpt", "--preset", "tiny", "--backward", "--device",
            "cpu"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"k0 ")
    proc.stdout.close()  # what head does after its line
    assert proc.wait(timeout=120) == 1
    assert proc.stderr.read() == b""


def test_training_piped_into_head_still_finishes_its_run(tmp_path: Path) -> None:
    """`anneal train ... | head -1`: the printing ends, the run does not: every step, the checkpoint and the
    summary are written (a resumed run too), quietly."""
    run = tmp_path / "run"
    base = [sys.executable, "-m", "anneal_cli.main", "train", "mlp", "--preset", "tiny", "--device", "cpu", "--plain",
            "--log-every", "1", "--out", str(run)]  # fmt: skip
    for steps in ("30", "60"):  # the second resumes the first
        argv = [*base, "--steps", steps] + (["--resume", str(run)] if steps == "60" else [])
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # what head does after its line
        assert proc.wait(timeout=120) == 0
        assert b"Error" not in proc.stderr.read()
        rows = (run / "loss.csv").read_text().splitlines()
        assert rows[-1].split(",")[0] == steps  # every step ran
        assert (run / "summary.txt").read_text().startswith("mlp: eval loss")
        (run / "summary.txt").unlink()


def test_the_readme_lists_every_option_of_every_command(cli: AnnealGroup) -> None:
    """The README's command table names each built-in command's visible options in its first column."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    firsts = [line.split(" | ")[0] for line in readme.splitlines() if line.startswith("| `")]

    def leaves(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from leaves(sub, f"{path} {name}".strip())
        else:
            yield path, command

    missing = {}
    for path, command in leaves(cli, ""):
        row = " ".join(f for f in firsts if re.search(rf"`(mpiexec -n N )?anneal {re.escape(path)}[ `]", f))
        absent = [p.opts[0] for p in command.params
                  if isinstance(p, click.Option) and not p.hidden and not any(o in row for o in p.opts)]  # fmt: skip
        if not row or absent:
            missing[path] = absent or "no row"
    assert missing == {}
