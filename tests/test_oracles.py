"""The selection CI runs on Pythons without the PyTorch/transformers oracles (scripts/oracles.py, noxfile)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from oracles import needs_oracle, oracle_free  # noqa: E402

PACKAGES = ROOT / "packages"


def test_a_module_importing_an_oracle_is_left_out_even_through_a_helper(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "reference.py").write_text("def peer():\n    import torch.nn\n    return torch.nn\n")
    (tests / "helper.py").write_text("from reference import peer\n")
    modules = {
        "test_direct.py": "import torch\n",
        "test_from.py": "from transformers import GPT2LMHeadModel\n",
        "test_skip.py": "import pytest\ntiktoken = pytest.importorskip('tiktoken')\n",
        "test_helper.py": "from helper import peer\n",
        "test_plain.py": "import numpy\nfrom anneal import Tensor\nfrom . import helper_named_torch\n",
        "test_cycle.py": "import test_cycle\n",
    }
    for name, text in modules.items():
        (tests / name).write_text(text)
    assert oracle_free(tmp_path) == ["tests/test_cycle.py", "tests/test_plain.py"]


def test_the_packages_oracle_free_modules() -> None:
    free = {p.name: oracle_free(p) for p in sorted(PACKAGES.iterdir()) if (p / "tests").is_dir()}
    assert all(free.values()), free  # every package runs something on every Python
    assert "tests/test_train.py" in free["anneal-cli"] and "tests/test_gpt2_cmd.py" not in free["anneal-cli"]
    assert "tests/test_ops.py" not in free["anneal-core"] and "tests/test_registry.py" in free["anneal-core"]
    helper_users = [m for m in (PACKAGES / "anneal-models" / "tests").glob("test_*.py")
                    if "torch_reference" in m.read_text()]  # fmt: skip
    assert helper_users and all(needs_oracle(m) for m in helper_users)
    assert oracle_free(ROOT / "tests") and "test_oracles.py" in oracle_free(ROOT / "tests")
