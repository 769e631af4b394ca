"""Third-party plugins, for real: pip-install the monorepo and the fixture plugins into a
fresh virtual environment and drive that environment's `anneal` command.

Nothing is monkeypatched: the plugins are found through their `anneal` entry points.
One venv serves the whole module (building it is the slow part).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# every distribution of the monorepo (each folder of packages/ with a pyproject)
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
FIXTURES = ["anneal-example-plugin", "anneal-broken-plugin", "anneal-misspelled-plugin"]
BROKEN = "anneal-broken-plugin,anneal-misspelled-plugin"


def _clean_env(bindir: Path, **anneal: str) -> dict[str, str]:
    # The outer environment (a nox venv, a developer's ANNEAL_* settings) must not leak in.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("ANNEAL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env.update(anneal)
    return env


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("plugin-venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(where)
    bindir = where / ("Scripts" if sys.platform == "win32" else "bin")
    pip = [str(bindir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    env = _clean_env(bindir)
    subprocess.run([*pip, "hatchling"], check=True, env=env)
    # Plain (non-editable) installs, as a user gets them; hatchling is already there, so no
    # isolated build environment per package.
    paths = [str(ROOT / "packages" / p) for p in PACKAGES] + [str(ROOT / "tests" / "plugins" / p) for p in FIXTURES]
    subprocess.run([*pip, "--no-build-isolation", *paths], check=True, env=env)
    return bindir


def anneal(bindir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bindir / "anneal"), *args], capture_output=True, text=True, env=_clean_env(bindir, **env), timeout=120
    )


def test_plugins_lists_builtins_and_the_example(venv_bin: Path) -> None:
    result = anneal(venv_bin, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    loaded = {p["name"]: p for p in report["plugins"]}
    assert {"anneal-cpu", "anneal-wgpu", "anneal-models", "anneal-example-plugin"} <= set(loaded)
    example = loaded["anneal-example-plugin"]
    assert example["version"] == "0.1.0"
    assert example["module"] == "anneal_example_plugin.plugin"
    assert example["hooks"] == ["register_backends", "register_commands", "register_models"]
    assert example["provides"] == ["backend example", "model example-fit"]


def test_broken_plugins_are_reported_by_name_and_skipped(venv_bin: Path) -> None:
    result = anneal(venv_bin, "plugins", "--json")
    assert result.returncode == 0
    failures = {f["name"]: f for f in json.loads(result.stdout)["failures"]}
    assert set(failures) == {"anneal-broken-plugin", "anneal-misspelled-plugin"}
    assert failures["anneal-broken-plugin"]["version"] == "0.1.0"
    assert (
        "failed to import: RuntimeError: anneal-broken-plugin is broken on purpose"
        in failures["anneal-broken-plugin"]["error"]
    )
    assert "did you mean register_backends?" in failures["anneal-misspelled-plugin"]["error"]
    # Reported once on stderr, with the distribution's name and version.
    assert result.stderr.count("anneal: plugin anneal-broken-plugin 0.1.0: failed to import") == 1
    assert result.stderr.count("anneal: plugin anneal-misspelled-plugin 0.1.0: unknown hook") == 1


def test_devices_shows_the_example_backend(venv_bin: Path) -> None:
    result = anneal(venv_bin, "devices", "--json", ANNEAL_DISABLE_PLUGINS=BROKEN)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the broken plugins are disabled, so nothing to report
    backends = {b["name"]: b for b in json.loads(result.stdout)["backends"]}
    assert {"cpu", "webgpu", "example"} <= set(backends)
    assert backends["example"]["available"] is True
    assert backends["example"]["plugin"] == "anneal-example-plugin"
    plain = anneal(venv_bin, "devices", ANNEAL_DISABLE_PLUGINS=BROKEN)
    assert re.search(r"^example\s+yes\s+anneal-example-plugin\s+numpy matmul", plain.stdout, re.M), plain.stdout


def test_train_uses_the_plugins_model_on_its_backend(venv_bin: Path) -> None:
    result = anneal(venv_bin, "train", "example-fit", "--device", "example", "--steps", "20")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("model example-fit  device example")
    steps = [line for line in lines if line.startswith("step")]
    assert steps[0].startswith("step  2/20  loss") and steps[-1].startswith("step 20/20  loss")
    losses = [float(re.search(r"loss (\S+)", line).group(1)) for line in steps]  # type: ignore[union-attr]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] / 2
    # The model reached the backend instance the CLI created: one matmul per step.
    assert lines[-1] == "example-fit ran on device example (ExampleBackend, 20 calls)"


def test_train_json_and_nonfinite_loss(venv_bin: Path) -> None:
    result = anneal(
        venv_bin, "train", "example-fit", "--device", "example", "--steps", "4", "--log-every", "1", "--json"
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4] and all(r["lr"] == 0.05 for r in records)
    diverged = anneal(venv_bin, "train", "example-fit", "--device", "example", "--steps", "500", "--lr", "10")
    assert diverged.returncode == 1
    assert re.search(r"^anneal: error: loss is (inf|nan) at step \d+; training stopped$", diverged.stderr, re.M)
    assert "Traceback" not in diverged.stderr


def test_plugin_commands_and_version(venv_bin: Path) -> None:
    hello = anneal(venv_bin, "example-hello", ANNEAL_DISABLE_PLUGINS=BROKEN)
    assert (hello.returncode, hello.stdout) == (0, "hello from anneal-example-plugin\n")
    version = anneal(venv_bin, "--version")
    assert version.returncode == 0
    for dist in PACKAGES:
        assert re.search(rf"^\s+{dist}\s+0\.1\.0", version.stdout, re.M), version.stdout
    assert re.search(r"^\s+anneal-example-plugin\s+0\.1\.0\s+plugin$", version.stdout, re.M)
    assert re.search(r"^\s+anneal-broken-plugin\s+0\.1\.0\s+plugin$", version.stdout, re.M)


def test_allow_list_loads_only_what_it_names(venv_bin: Path) -> None:
    only = anneal(venv_bin, "plugins", "--json", ANNEAL_LOAD_PLUGINS="anneal-example-plugin")
    report = json.loads(only.stdout)
    assert [p["name"] for p in report["plugins"]] == ["anneal-example-plugin"]
    assert report["failures"] == [] and only.stderr == ""
    none = anneal(venv_bin, "devices", ANNEAL_LOAD_PLUGINS="")
    assert none.returncode == 0
    assert "no backends registered" in none.stdout


def test_deny_list_removes_a_plugin(venv_bin: Path) -> None:
    result = anneal(venv_bin, "train", "example-fit", ANNEAL_DISABLE_PLUGINS=f"anneal-example-plugin,{BROKEN}")
    assert result.returncode == 2
    assert "unknown model 'example-fit'" in result.stderr
    devices = anneal(venv_bin, "devices", "--json", ANNEAL_DISABLE_PLUGINS="anneal-example-plugin")
    assert "example" not in {b["name"] for b in json.loads(devices.stdout)["backends"]}


def test_unknown_device_and_default_device(venv_bin: Path) -> None:
    bad = anneal(venv_bin, "train", "example-fit", "--device", "nope", ANNEAL_DISABLE_PLUGINS=BROKEN)
    assert bad.returncode == 2
    assert "unknown device 'nope'; registered backends: " in bad.stderr
    # ANNEAL_DEVICE stands in for --device auto.
    chosen = anneal(
        venv_bin, "train", "example-fit", "--steps", "2", ANNEAL_DEVICE="example", ANNEAL_DISABLE_PLUGINS=BROKEN
    )
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.startswith("model example-fit  device example")
    assert "ANNEAL_DEVICE=example" in chosen.stdout
