"""What every distribution ships as: one release, pinned siblings, the LICENSE, regular packages, no test helpers
in the runtime wheels, and a core whose name is not held by another project on the public index."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
PROJECTS = {folder: tomllib.loads((folder / "pyproject.toml").read_text()) for folder in FOLDERS}
NAMES = {data["project"]["name"]: folder for folder, data in PROJECTS.items()}
HELD_ON_THE_INDEX = {"anneal"}  # an unrelated project; its `anneal/` package and script collide with ours
REPOSITORY = "https://github.com/anneal-project/anneal"  # the project's own (docs/ARCHITECTURE.md, Install and run)


def wheel_module(folder: Path) -> str:
    (src,) = PROJECTS[folder]["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return str(src).removeprefix("src/")


def test_the_eight_distributions_are_one_release_under_names_we_hold() -> None:
    assert len(NAMES) == 8 and "anneal-core" in NAMES and not HELD_ON_THE_INDEX & set(NAMES)
    assert NAMES["anneal-core"].name == "anneal-core"  # packages/<distribution>/
    assert len({data["project"]["version"] for data in PROJECTS.values()}) == 1


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_internal_requirements_pin_the_same_release(folder: Path) -> None:
    project = PROJECTS[folder]["project"]
    version = project["version"]
    requirements = list(project.get("dependencies", []))
    requirements += [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
    internal = [r for r in requirements if r.split("=")[0].split(">")[0].split("<")[0].strip() in NAMES]
    assert internal or project["name"] == "anneal-ir"
    assert all(r.endswith(f"=={version}") for r in internal), internal


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_each_ships_the_license_and_says_which(folder: Path) -> None:
    project = PROJECTS[folder]["project"]
    assert (folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()  # a copy: an sdist keeps no symlink
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    classifiers = set(project["classifiers"])
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)} <= classifiers
    assert "License :: OSI Approved :: MIT License" in classifiers and "Typing :: Typed" in classifiers


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_each_links_the_projects_own_repository(folder: Path) -> None:
    urls = PROJECTS[folder]["project"]["urls"]
    assert urls == {
        "Homepage": REPOSITORY,
        "Source": f"{REPOSITORY}/tree/main/packages/{folder.name}",
        "Documentation": f"{REPOSITORY}/tree/main/docs",
        "Issues": f"{REPOSITORY}/issues",
    }
    assert (ROOT / "packages" / folder.name).is_dir() and (ROOT / "docs").is_dir()  # what the links point into


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_each_is_a_regular_typed_package(folder: Path) -> None:
    module = folder / "src" / wheel_module(folder)
    assert (module / "__init__.py").is_file() and (module / "py.typed").is_file()


@pytest.mark.parametrize(("name", "helper"), [("anneal-core", "anneal/data/testing.py"),
                                              ("anneal-wgpu", "anneal_wgpu/testing.py")])  # fmt: skip
def test_the_runtime_wheels_leave_the_test_helpers_out(name: str, helper: str, tmp_path: Path) -> None:
    folder = NAMES[name]
    assert (folder / "src" / helper).is_file()  # in the source tree, for the test suites
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)], cwd=folder,
                   check=True, capture_output=True)  # fmt: skip  # hatchling: in every test venv (uv's have no pip)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert helper not in names and f"{helper.rsplit('/', 1)[0]}/__init__.py" in names
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from check_dist import url_problems
    finally:
        sys.path.pop(0)
    assert url_problems(wheel) == []  # the project URLs reach the wheel's metadata
