"""Which test modules need an oracle (PyTorch, transformers, tiktoken): the noxfile runs the others on the
Pythons those cannot be installed on (3.12 and 3.13 here; docs/ARCHITECTURE.md, "Install and run")."""

from __future__ import annotations

import ast
from pathlib import Path

ORACLE_MODULES = {"torch", "transformers", "tiktoken"}


def needs_oracle(module: Path, seen: dict[Path, bool] | None = None) -> bool:
    """Whether a test module imports an oracle (ORACLE_MODULES), itself or through a helper module beside it
    (`from torch_reference import ...`), at any depth; pytest.importorskip("torch") counts."""
    seen = {} if seen is None else seen
    if module not in seen:
        seen[module] = False  # a helper importing its importer ends here
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip":
                names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for name in names:
                top, helper = name.split(".")[0], module.parent / f"{name.split('.')[0]}.py"
                if top in ORACLE_MODULES or (helper.is_file() and needs_oracle(helper, seen)):
                    seen[module] = True
    return seen[module]


def oracle_free(where: Path) -> list[str]:
    """The test modules under `where` that import no oracle, for a Python without one (pytest arguments)."""
    modules = sorted(where.glob("tests/test_*.py")) or sorted(where.glob("test_*.py"))
    return [str(m.relative_to(where)) for m in modules if not needs_oracle(m)]
