"""Test, lint and demo sessions for the monorepo.

    nox                          # everything
    nox -t anneal-ir             # one package's tests (tag = distribution name)
    nox -s wheels                # build every wheel and sdist, install them as a user would, run the CLI
    nox -s integration lint      # cross-package tests, ruff
    nox -s webgpu                # the op/gradient suites on the WebGPU backend
    nox -s cpu_c                 # the same suites with every cpu kernel compiled to C
    nox --force-python 3.11      # what CI runs: the sessions declare 3.11-3.13, machines have 3.11
    nox --force-python 3.12 -t every-python   # and then on 3.12 and 3.13: what needs no PyTorch oracle

Each package's tests run in its own directory, in a venv holding that package and its
internal dependencies installed editable, so an undeclared dependency fails there.
PyTorch (CPU build) is a test-only value oracle for the packages in TORCH_USERS, Hugging Face transformers
for GPT-2 in TRANSFORMERS_USERS.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "scripts"))
from oracles import oracle_free  # noqa: E402  (scripts/: tests/test_oracles.py checks the selection)

PYTHONS = ["3.11", "3.12", "3.13"]
# Top to bottom as in docs/ARCHITECTURE.md; each package may depend only on those above it.
PACKAGES = [
    "anneal-ir",
    "anneal-autodiff",
    "anneal-schedule",
    "anneal-cpu",
    "anneal-wgpu",
    "anneal-core",
    "anneal-models",
    "anneal-cli",
]
TORCH = "torch==2.13.0"  # the CPU wheel; pip finds it through PIP_FIND_LINKS
TORCH_USERS = {"anneal-core", "anneal-cpu", "anneal-autodiff", "anneal-schedule", "anneal-models", "anneal-cli"}
TRANSFORMERS = ["transformers==5.24.0", "tiktoken==0.14.0"]  # GPT-2's oracles: Hugging Face's model, tiktoken's BPE
TRANSFORMERS_USERS = {"anneal-models", "anneal-cli"}
MPI = ["mpi4py==4.1.2", "mpich==5.0.2"]  # data-parallel training's tests: mpi4py and MPICH's wheel (mpiexec)
MPI_USERS = {"anneal-cli"}
BROWSER = ["playwright==1.65.2"]  # the viz tests drive Debian's Chromium (scripts/system-deps.sh) through it
BROWSER_USERS = {"anneal-cli"}
TEST_TOOLS = ["pytest", "hypothesis", "pytest-xdist"]
# The slowest suites run on two workers (CI has 2 cores); anneal-cli's a file per worker (its MPI, tmux and
# browser tests keep their order within their files, and their deadlines leave room for the other worker).
PARALLEL = {"anneal-models": ["-n", "2"], "integration": ["-n", "2"], "anneal-cli": ["-n", "2", "--dist", "loadfile"]}
# What runs on 3.12 and 3.13 too (`nox --force-python 3.12 -t every-python`, scripts/test.sh): the wheels, and
# every package's and the integration tests less the modules that import an oracle. PyTorch's CPU wheels for
# 3.12/3.13 are not reachable from these machines (the index has only the CUDA builds, gigabytes each), so the
# oracle modules run on 3.11 alone; so do tests marked `oracle_python` (slow, and the same on any Python: the
# data-parallel models' numerics), which keeps the two extra Pythons to a few minutes of CI each.
EVERY_PYTHON = "every-python"
ORACLE_PYTHON = PYTHONS[0]
PYTEST_NO_TESTS = 5

# uv makes venvs and installs (torch above all) many times faster; without it, pip.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
# uv does not read pip's configuration: hand it the same local wheel folders.
if os.environ.get("PIP_FIND_LINKS") and not os.environ.get("UV_FIND_LINKS"):
    os.environ["UV_FIND_LINKS"] = ",".join(os.environ["PIP_FIND_LINKS"].split())


def _folders() -> tuple[dict[str, Path], dict[str, str]]:
    """Distribution name -> its folder under packages/, and -> the module its wheel holds (from each pyproject)."""
    folders, modules = {}, {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text())
        name = data["project"]["name"]
        folders[name] = pyproject.parent
        (source,) = data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
        modules[name] = source.removeprefix("src/")
    return folders, modules


FOLDERS, MODULES = _folders()
CORE = FOLDERS["anneal-core"]  # the op suites live in the core package's tests
TYPED = [MODULES[p] for p in PACKAGES]  # mypy: every package


def internal_deps(package: str) -> list[str]:
    """The package and every anneal distribution it needs (optional extras included), in table order."""
    seen: set[str] = set()
    todo = [package]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        project = tomllib.loads((FOLDERS[name] / "pyproject.toml").read_text())["project"]
        reqs = list(project.get("dependencies", []))
        reqs += [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
        for req in reqs:
            dist = req.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
            if dist in PACKAGES:
                todo.append(dist)
    return [p for p in PACKAGES if p in seen]


def install_editable(session: nox.Session, packages: list[str], *extra: str) -> None:
    # Build with the venv's own hatchling instead of one isolated build env per package.
    session.install("hatchling", "editables")
    args = [arg for p in packages for arg in ("-e", str(FOLDERS[p]))]
    session.install("--no-build-isolation", *args, *extra)


def pytest(session: nox.Session, where: Path, label: str, *selection: str) -> None:
    """Run pytest (on `selection`, else everything); collecting no test at all is a failure, not a pass."""
    try:
        with session.chdir(where):
            session.run("pytest", *PARALLEL.get(label, []), *selection, *session.posargs)
    except nox.command.CommandFailed as exc:
        if getattr(exc, "return_code", None) == PYTEST_NO_TESTS:
            session.error(f"{label}: pytest collected no tests (exit 5); every package must have tests")
        raise


def oracles_here(session: nox.Session) -> bool:
    """Whether this session's Python can install the oracles (else it runs the modules that need none)."""
    return str(session.python) == ORACLE_PYTHON


def selection(session: nox.Session, where: Path) -> list[str]:
    """pytest's arguments: everything where the oracles install, else the oracle-free modules less the tests
    marked oracle_python."""
    return [] if oracles_here(session) else [*oracle_free(where), "-m", "not oracle_python"]


@nox.session(python=PYTHONS)
@nox.parametrize("package", [nox.param(p, id=p, tags=[p, EVERY_PYTHON]) for p in PACKAGES])
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, in its directory, with its internal dependencies editable (without an oracle on
    3.12/3.13: the modules that need none)."""
    oracles = ([TORCH] if package in TORCH_USERS else []) + (TRANSFORMERS if package in TRANSFORMERS_USERS else [])
    oracles = oracles if oracles_here(session) else []
    oracles += MPI if package in MPI_USERS else []
    oracles += BROWSER if package in BROWSER_USERS else []
    install_editable(session, internal_deps(package), *TEST_TOOLS, *oracles)
    pytest(session, FOLDERS[package], package, *selection(session, FOLDERS[package]))


@nox.session(python=PYTHONS, tags=["integration", EVERY_PYTHON])
def integration(session: nox.Session) -> None:
    """Cross-package tests (tests/): every package installed, plugin fixtures, dependency rules."""
    oracles = [TORCH, *TRANSFORMERS] if oracles_here(session) else []
    install_editable(session, PACKAGES, *TEST_TOOLS, *oracles)
    pytest(session, ROOT / "tests", "integration", *selection(session, ROOT / "tests"))


@nox.session(python=PYTHONS[0], tags=["webgpu"])
def webgpu(session: nox.Session) -> None:
    """The op, gradient and JVP suites again, on the WebGPU backend (lavapipe in CI)."""
    install_editable(session, PACKAGES, *TEST_TOOLS, TORCH)
    suites = [
        "tests/test_ops.py",
        "tests/test_grad.py",
        "tests/test_jvp.py",
        "tests/test_models_forward.py",
        "tests/test_variables.py",
        "tests/test_read_first.py",
        "tests/test_random.py",
        "tests/test_math_ops.py",
        "tests/test_order.py",
        "tests/test_indexing.py",
        "tests/test_scatter_einsum.py",
        "tests/test_edge_cases.py",
        "tests/test_bounds.py",
        "tests/test_conv_family.py",
        "tests/test_functional_more.py",
        "tests/test_gathers.py",
        "tests/test_float16_ops.py",
        "tests/test_bitwise.py",
        "tests/test_shape_more.py",
        "tests/test_grad_mode.py",
    ]
    with session.chdir(CORE):
        session.run("pytest", "-n", "2", *suites, *session.posargs, env={"ANNEAL_DEVICE": "webgpu"})


@nox.session(python=PYTHONS[0], tags=["cpu-c"])
def cpu_c(session: nox.Session) -> None:
    """The op, gradient, JVP and Variable suites with every cpu kernel compiled to C (small ones too)."""
    install_editable(session, PACKAGES, *TEST_TOOLS, TORCH)
    suites = ["tests/test_ops.py", "tests/test_grad.py", "tests/test_jvp.py", "tests/test_variables.py",
              "tests/test_math_ops.py", "tests/test_order.py", "tests/test_indexing.py", "tests/test_scatter_einsum.py",
              "tests/test_edge_cases.py", "tests/test_bounds.py", "tests/test_conv_family.py",
              "tests/test_gathers.py", "tests/test_float16_ops.py", "tests/test_bitwise.py",
              "tests/test_shape_more.py", "tests/test_functional_more.py", "tests/test_grad_mode.py",
              "tests/test_random.py"]  # fmt: skip
    with session.chdir(CORE):
        session.run(
            "pytest", "-n", "2", *suites, *session.posargs, env={"ANNEAL_DEVICE": "cpu", "ANNEAL_CPU_C_MIN": "0"}
        )


@nox.session(python=PYTHONS[0], tags=["lint"])
def lint(session: nox.Session) -> None:
    """ruff: lint rules and formatting (line length 120)."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS[0], tags=["types"])
def types(session: nox.Session) -> None:
    """mypy on the installed packages (imports are followed: anneal_cli pulls in anneal and the rest)."""
    install_editable(session, PACKAGES, "mypy")
    session.run("mypy", *(arg for module in TYPED for arg in ("-p", module)))


@nox.session(python=PYTHONS, tags=["wheels", EVERY_PYTHON])
def wheels(session: nox.Session) -> None:
    """Build all eight wheels (each from its sdist), install them into a fresh virtual environment as a user
    would, and run the CLI there from an empty folder, offline, with the data given by --data."""
    session.install("build", "hatchling")
    work = Path(session.create_tmp()).resolve()
    dist, user, home = work / "dist", work / "user-venv", work / "home"
    for folder in (dist, user, home):
        shutil.rmtree(folder, ignore_errors=True)
    home.mkdir()
    for package in PACKAGES:  # sdist first, then the wheel built from it: a file missing from the sdist fails here
        session.run("python", "-m", "build", "--no-isolation", "--outdir", str(dist), str(FOLDERS[package]))
    session.run("python", str(ROOT / "scripts" / "check_dist.py"), str(dist))
    session.run("python", "-m", "venv", str(user))
    python = str(user / "bin" / "python")
    # The wheel files by path: the CLI's name is held on the public index by an unrelated project.
    wheels = sorted(str(w) for w in dist.glob("*.whl"))
    session.run(python, "-m", "pip", "install", "-q", "--find-links", str(dist), *wheels, external=True)
    env = {"ANNEAL_CACHE_DIR": str(home / "cache"), "ANNEAL_OFFLINE": "1", "PYTHONPATH": "", "HOME": str(home)}
    anneal = str(user / "bin" / "anneal")
    text = str(ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt")
    with session.chdir(home):  # never the source tree
        session.run(python, str(ROOT / "scripts" / "check_installed.py"), str(user), external=True, env=env)
        session.run(anneal, "--version", external=True, env=env)
        session.run(anneal, "doctor", external=True, env=env)
        session.run(anneal, "train", "mlp", "--preset", "tiny", "--plain", "--device", "cpu", external=True, env=env)
        session.run(anneal, "train", "mlp", "--preset", "tiny", "--plain", "--device", "webgpu", "--steps", "20",
                    external=True, env=env)  # fmt: skip
        session.run(anneal, "train", "moe", "--preset", "tiny", "--plain", "--device", "cpu", "--data", text,
                    external=True, env=env)  # fmt: skip
