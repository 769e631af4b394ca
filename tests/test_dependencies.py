"""Every package imports only what its pyproject declares, and internal dependencies point
only up the package table of docs/ARCHITECTURE.md (a package uses the ones above it).

Imports are read with ast from each package's src/, including `importlib.import_module("...")`
with a literal name. A distribution declared only as an optional extra may be imported
only inside `try: ... except ImportError:`.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))

# Import name -> distribution, for every third-party module the packages may use.
THIRD_PARTY = {
    "numpy": "numpy",
    "pluggy": "pluggy",
    "click": "click",
    "wgpu": "wgpu",
    "safetensors": "safetensors",
    "requests": "requests",
    "rich": "rich",
    "uniplot": "uniplot",
    "PIL": "pillow",
    "tokenizers": "tokenizers",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "mpi4py": "mpi4py",
    "filelock": "filelock",
    "urllib3": "urllib3",
    "torch": "torch",  # anneal bench's peer, an optional extra
}


def project(package: Path) -> dict[str, Any]:
    return tomllib.loads((package / "pyproject.toml").read_text())


def module_of(package: Path) -> str:
    """The import name a package's wheel holds (anneal-core holds `anneal`)."""
    (src,) = project(package)["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return str(src).removeprefix("src/")


DISTRIBUTIONS = {module_of(p): project(p)["project"]["name"] for p in PACKAGES}  # import name -> distribution


def dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def architecture_order() -> list[str]:
    """The distributions, top to bottom, from the package table in docs/ARCHITECTURE.md."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    return re.findall(r"^\| (anneal[\w-]*) \| `anneal\w*` \|", text, re.M)


@dataclass(frozen=True)
class Import:
    module: str  # top-level name
    file: Path
    line: int
    guarded: bool  # inside try/except ImportError


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names):
            return True
    return False


def imports_of(path: Path) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(a.name.split(".")[0], path, node.lineno, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(Import(node.module.split(".")[0], path, node.lineno, guarded))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Import(node.args[0].value.split(".")[0], path, node.lineno, guarded))
        if isinstance(node, ast.Try):
            inner = guarded or _catches_import_error(node)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return found


def declared(package: Path) -> tuple[set[str], set[str]]:
    table = project(package)["project"]
    required = {dist_name(r) for r in table.get("dependencies", [])}
    optional = {dist_name(r) for reqs in table.get("optional-dependencies", {}).values() for r in reqs}
    return required, optional - required


def test_the_table_names_every_package() -> None:
    assert sorted(architecture_order()) == sorted(DISTRIBUTIONS.values())


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_package_imports_only_what_it_declares(package: Path) -> None:
    own, name = module_of(package), project(package)["project"]["name"]
    required, optional = declared(package)
    order = architecture_order()
    problems = []
    for dep in sorted(required | optional):
        if dep.startswith("anneal") and order.index(dep) >= order.index(name):
            problems.append(f"pyproject: {name} depends on {dep}, which is not above it in ARCHITECTURE.md")
    sources = sorted((package / "src").rglob("*.py"))
    assert sources, f"{name} has no source files"
    for imp in (i for src in sources for i in imports_of(src)):
        where = f"{imp.file.relative_to(ROOT)}:{imp.line}"
        if imp.module == own or imp.module in sys.stdlib_module_names or imp.module == "__future__":
            continue
        if imp.module in DISTRIBUTIONS:
            dist = DISTRIBUTIONS[imp.module]
        elif imp.module in THIRD_PARTY:
            dist = THIRD_PARTY[imp.module]
        else:
            problems.append(
                f"{where}: imports {imp.module!r}, unknown to this test: add it to THIRD_PARTY and pyproject"
            )
            continue
        if dist in required or (dist in optional and imp.guarded):
            continue
        if dist in optional:
            problems.append(f"{where}: {dist} is optional for {name}; import it inside try/except ImportError")
        else:
            problems.append(f"{where}: imports {imp.module!r} but {name}'s pyproject does not declare {dist}")
    assert not problems, "\n".join(problems)


def test_the_checker_catches_an_undeclared_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nfrom anneal_ir.uop import UOp\ntry:\n    import wgpu\nexcept ImportError:\n    pass\n"
        "def f():\n    import importlib\n    return importlib.import_module('anneal_cpu.backend')\n"
    )
    found = {(i.module, i.guarded) for i in imports_of(source)}
    assert found == {("os", False), ("anneal_ir", False), ("wgpu", True), ("importlib", False), ("anneal_cpu", False)}
