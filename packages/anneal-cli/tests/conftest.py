from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from anneal import registry
from anneal.data.testing import shared_data_dir
from anneal_cli.main import AnnealGroup, build_cli
from anneal_ir.plugins import Availability, Plugins, hookimpl, load_plugins
from anneal_ir.settings import Settings


class FakeBackend:
    pass


class Fit:
    """A trainer whose loss halves each step, or becomes NaN at ``nan_at``."""

    def __init__(self, config: dict[str, Any], device: str) -> None:
        if config.get("explode"):
            raise ValueError("bad config")
        self.config, self.device, self.loss = config, device, 1.0

    def step(self, i: int) -> float:
        self.loss /= 2
        return float("nan") if i + 1 == self.config.get("nan_at") else self.loss

    def finish(self) -> str:
        return f"finished on {self.device}"


class TestPlugin:
    """Registers through the real hooks, in-process (entry points are the integration test's job)."""

    @hookimpl
    def register_backends(self, register: Callable[..., None]) -> None:
        register("fake", FakeBackend, summary="a fake backend")
        register("down", FakeBackend, probe=lambda: Availability(False, "no such hardware; install it"))

    @hookimpl
    def register_models(self, register: Callable[..., None]) -> None:
        register(
            "fit",
            build=Fit,
            defaults={"steps": 8, "lr": 0.1, "batch": 4, "seed": 0},
            presets={"tiny": {"steps": 4}, "small": {"steps": 6}},
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "oracle_python: slow and the same on any Python; runs on 3.11 alone (noxfile's selection)"
    )


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    registry.reset()
    yield
    registry.reset()


@pytest.fixture
def test_plugins(fresh_registry: None) -> Plugins:
    plugins = load_plugins(
        Settings(load_plugins=frozenset({"test-plugin"})), extra=[("test-plugin", TestPlugin())], stream=None
    )
    registry.reset(using=plugins)
    return plugins


@pytest.fixture
def cli() -> AnnealGroup:
    return build_cli()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def adapter() -> object:
    from anneal_wgpu.testing import require_adapter

    return require_adapter(pytest.fail, pytest.skip)


@pytest.fixture()
def offline_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned tinyshakespeare, digits and GPT-2 vocabulary in a private cache, used offline (the real fetch
    verifies them)."""
    cache = tmp_path / "cache"
    for name, file in (("tinyshakespeare", "input.txt"), ("digits", "digits.csv.gz"), ("gpt2", "vocab.json"),
                       ("gpt2", "merges.txt")):  # fmt: skip
        (cache / "data" / name).mkdir(parents=True, exist_ok=True)
        shutil.copy(shared_data_dir(__file__) / name / file, cache / "data" / name)
    monkeypatch.setenv("ANNEAL_CACHE_DIR", str(cache))
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, through Playwright (a missing browser fails the test: see browser.py)."""
    from browser import chromium_path
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield launched
        launched.close()
