"""The pinned assets: where each file comes from, its exact size and sha256 (PRODUCT.md).

A file is identified by its content, never by its URL: a download is accepted only when its
size and sha256 match the table. `filename` is the file's place inside the cache's data
folder, and also its path under a mirror (`ANNEAL_MIRROR` / `base_url`), so a mirror is laid
out like the cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from anneal.data.errors import UnknownAssetError

_GPT2 = "https://huggingface.co/openai-community/gpt2/resolve/607a30d783dfa663caf39e06633721c8d4cfcd7e"


@dataclass(frozen=True)
class Asset:
    """One pinned file."""

    name: str
    url: str
    size: int  # bytes
    sha256: str  # lowercase hex
    filename: str  # relative path, '/'-separated, inside the cache's data folder (and a mirror)
    summary: str = ""
    # the registered models and datasets that read it: `anneal download`/`cache` show an asset only when one of
    # them is installed, and `anneal train --data` knows which files a model needs
    users: tuple[str, ...] = ()


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            "tinyshakespeare",
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            1_115_394,
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            "tinyshakespeare/input.txt",
            "Karpathy's tiny Shakespeare, one text file",
            ("tinyshakespeare", "nanogpt", "llama", "moe", "bert", "gpt2"),
        ),
        Asset(
            "gpt2-weights",
            f"{_GPT2}/model.safetensors",
            548_105_171,
            "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707",
            "gpt2/model.safetensors",
            "GPT-2 small weights (Hugging Face safetensors)",
            ("gpt2",),
        ),
        Asset(
            "gpt2-vocab",
            f"{_GPT2}/vocab.json",
            1_042_301,
            "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
            "gpt2/vocab.json",
            "GPT-2 BPE vocabulary",
            ("gpt2",),
        ),
        Asset(
            "gpt2-merges",
            f"{_GPT2}/merges.txt",
            456_318,
            "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
            "gpt2/merges.txt",
            "GPT-2 BPE merges",
            ("gpt2",),
        ),
        Asset(
            "digits",
            "https://raw.githubusercontent.com/scikit-learn/scikit-learn/1.5.2/sklearn/datasets/data/digits.csv.gz",
            57_523,
            "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
            "digits/digits.csv.gz",
            "UCI optdigits test set as scikit-learn bundles it: 1,797 8x8 digits, csv.gz",
            ("digits",),
        ),
        Asset(
            "cifar10",
            "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
            170_052_171,
            "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
            "cifar10/cifar-10-binary.tar.gz",
            "CIFAR-10, binary version (tar.gz)",
            ("cifar10",),
        ),
    )
}

# Names that stand for several assets; `all` is every asset in the table.
GROUPS: dict[str, tuple[str, ...]] = {"gpt2": ("gpt2-weights", "gpt2-vocab", "gpt2-merges")}


def names() -> list[str]:
    """Every asset and group name a user may type (`all` included)."""
    return [*ASSETS, *GROUPS, "all"]


def get_asset(name: str) -> Asset:
    """The asset called `name`; `UnknownAssetError` lists the known ones."""
    try:
        return ASSETS[name]
    except KeyError:
        raise UnknownAssetError(name, list(ASSETS)) from None


def resolve(names_or_groups: Iterable[str]) -> list[Asset]:
    """Assets for names, group names (`gpt2`) and `all`, in table order, each once."""
    wanted: set[str] = set()
    for name in names_or_groups:
        if name == "all":
            wanted.update(ASSETS)
        elif name in GROUPS:
            wanted.update(GROUPS[name])
        elif name in ASSETS:
            wanted.add(name)
        else:
            raise UnknownAssetError(name, [*ASSETS, *GROUPS, "all"])
    return [a for n, a in ASSETS.items() if n in wanted]


def used(installed: Iterable[str]) -> list[Asset]:
    """The assets that one of `installed` (registered model and dataset names) reads, in table order."""
    have = set(installed)
    return [a for a in ASSETS.values() if have.intersection(a.users)]


def needed_by(model: str, dataset: str | None = None) -> list[Asset]:
    """The assets a run of `model` reads: those of the model itself and of its `dataset` (vit on digits: digits)."""
    return [a for a in ASSETS.values() if model in a.users or (dataset is not None and dataset in a.users)]


def source_url(asset: Asset, base_url: str | None = None) -> str:
    """Where to download `asset` from: its pinned URL, or `<base_url>/<filename>` on a mirror."""
    if base_url:
        return f"{base_url.rstrip('/')}/{asset.filename}"
    return asset.url
