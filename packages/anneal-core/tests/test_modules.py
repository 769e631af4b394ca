"""anneal.nn modules and anneal.nn.state: whole models against torch, finite differences, state files.

Models are built twice, in anneal and torch, with identical weights (torch's state_dict loaded
into the anneal model, which also checks that the dotted names agree); forward values and every
parameter's gradient are compared. Finite differences (float64) check gradients with no
reference implementation at all.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn as tnn

import anneal
import anneal.nn.functional as AF
from anneal import Tensor, dtypes
from anneal.nn import modules as nn
from anneal.nn import state as st
from anneal.optim import SGD, realize_all

RTOL = 1e-4
ATOL = 1e-5  # float32 gradients near 0 carry ~1e-6 absolute rounding error (see test_grad.py)


def rnd(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def compare(model: nn.Module, tmodel: tnn.Module, *inputs: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Same weights, same input, same output gradient: outputs and all parameter gradients agree."""
    model.load_state_dict(tmodel.state_dict())
    out = model(*[Tensor(x) for x in inputs])
    tout = tmodel(*[torch.tensor(x) for x in inputs])
    g = rnd(*out.shape, seed=99)
    out.backward(Tensor(g))
    tout.backward(torch.tensor(g))
    named = dict(model.named_parameters())
    tnamed = dict(tmodel.named_parameters())
    assert named.keys() == tnamed.keys()
    realize_all([out, *(p.grad for p in named.values() if p.grad is not None)])
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol, err_msg="forward")
    for k, p in named.items():
        tp = tnamed[k]
        assert p.grad is not None and tp.grad is not None, k
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"grad of {k}")


# ---- models: anneal and torch twins ----


def mlp() -> tuple[nn.Module, tnn.Module]:
    return (
        nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 3)),
        tnn.Sequential(tnn.Linear(6, 16), tnn.GELU(), tnn.Linear(16, 16), tnn.SiLU(), tnn.Linear(16, 3)),
    )


class ConvNet(nn.Module):
    def __init__(self, dtype: Any = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, dtype=dtype)
        self.bn = nn.BatchNorm2d(8, dtype=dtype)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, groups=2, dtype=dtype)
        self.head = nn.Linear(8 * 2 * 2, 5, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = AF.max_pool2d(self.bn(self.conv1(x)).relu(), 2)
        return self.head(AF.silu(self.conv2(x)).flatten(1))


class TorchConvNet(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1)
        self.bn = tnn.BatchNorm2d(8)
        self.conv2 = tnn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.head = tnn.Linear(8 * 2 * 2, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = TF.max_pool2d(self.bn(self.conv1(x)).relu(), 2)
        return self.head(TF.silu(self.conv2(x)).flatten(1))


class Block(nn.Module):
    """A pre-norm transformer block: attention and MLP, each with a residual."""

    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).chunk(3, 2)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in qkv)
        a = AF.scaled_dot_product_attention(q, k, v, is_causal=self.causal).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        return x + self.mlp(self.ln2(x))


class TorchBlock(tnn.Module):
    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
        self.qkv, self.proj = tnn.Linear(dim, 3 * dim), tnn.Linear(dim, dim)
        self.mlp = tnn.Sequential(tnn.Linear(dim, 2 * dim), tnn.GELU(), tnn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.ln1(x)).chunk(3, 2)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in qkv)
        a = TF.scaled_dot_product_attention(q, k, v, is_causal=self.causal).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        return x + self.mlp(self.ln2(x))


# ---- whole modules against torch ----


def test_mlp_matches_torch() -> None:
    compare(*mlp(), rnd(5, 6))


def test_conv_net_matches_torch_in_train_mode() -> None:
    model, tmodel = ConvNet(), TorchConvNet()
    compare(model, tmodel, rnd(3, 3, 10, 10, seed=1))
    # the forward also moved the running statistics, as torch's did (unbiased variance)
    realize_all(list(model.buffers()))
    np.testing.assert_allclose(model.bn.running_mean.numpy(), tmodel.bn.running_mean.numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(model.bn.running_var.numpy(), tmodel.bn.running_var.numpy(), rtol=RTOL, atol=1e-6)
    assert int(model.bn.num_batches_tracked.item()) == int(tmodel.bn.num_batches_tracked) == 1


def test_conv_net_matches_torch_in_eval_mode() -> None:
    model, tmodel = ConvNet(), TorchConvNet()
    tmodel.train()
    tmodel(torch.tensor(rnd(4, 3, 10, 10, seed=2)))  # non-trivial running statistics
    model.eval()
    tmodel.eval()
    assert not model.bn.training and not model.training
    compare(model, tmodel, rnd(2, 3, 10, 10, seed=3))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_block_matches_torch(causal: bool) -> None:
    compare(Block(16, 4, causal), TorchBlock(16, 4, causal), rnd(2, 5, 16, seed=4))


def test_layernorm_and_rmsnorm_match_torch() -> None:
    x = rnd(3, 4, 6, seed=5)
    ln, tln = nn.LayerNorm((4, 6)), tnn.LayerNorm((4, 6))
    with torch.no_grad():
        tln.weight.copy_(torch.tensor(rnd(4, 6, seed=6)))
        tln.bias.copy_(torch.tensor(rnd(4, 6, seed=7)))
    compare(ln, tln, x)
    rms, trms = nn.RMSNorm(6), tnn.RMSNorm(6)
    with torch.no_grad():
        trms.weight.copy_(torch.tensor(rnd(6, seed=8)))
    compare(rms, trms, x)
    compare(nn.RMSNorm(6, eps=1e-2), tnn.RMSNorm(6, eps=1e-2), x * 0.01)  # eps matters at this scale


@pytest.mark.parametrize("mode, padding", [("reflect", 1), ("circular", (2, 1)), ("replicate", "same")])
def test_conv2d_padding_modes_match_torch(mode: str, padding: Any) -> None:
    conv = nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode, dilation=(1, 2) if padding == "same" else 1)
    tconv = tnn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode, dilation=(1, 2) if padding == "same" else 1)
    compare(conv, tconv, rnd(2, 2, 6, 7, seed=9))


def test_embedding_matches_torch() -> None:
    emb, temb = nn.Embedding(7, 4, padding_idx=2), tnn.Embedding(7, 4, padding_idx=2)
    idx = np.array([[0, 2, 6], [2, 3, 3]], np.int64)
    compare(emb, temb, idx)
    np.testing.assert_array_equal(nn.Embedding(5, 3, padding_idx=1).weight.numpy()[1], np.zeros(3))


@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_batchnorm_running_stats_over_several_batches(momentum: float | None) -> None:
    """momentum=None is torch's cumulative average (factor 1/num_batches_tracked); stats realized each batch."""
    bn, tbn = nn.BatchNorm2d(3, momentum=momentum), tnn.BatchNorm2d(3, momentum=momentum)
    rm = bn.running_mean
    for seed in range(3):
        x = rnd(2, 3, 4, 4, seed=seed)
        bn(Tensor(x))
        tbn(torch.tensor(x))
        realize_all(list(bn.buffers()))
    assert bn.running_mean is rm  # updated in place
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=RTOL, atol=1e-6)
    assert int(bn.num_batches_tracked.item()) == 3


@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_batchnorm_several_forwards_before_realizing(momentum: float | None) -> None:
    """Gradient accumulation: several training forwards whose running-stat updates are realized together."""
    bn, tbn = nn.BatchNorm2d(3, momentum=momentum), tnn.BatchNorm2d(3, momentum=momentum)
    for seed in range(2):
        x = rnd(2, 3, 4, 4, seed=seed)
        bn(Tensor(x))
        tbn(torch.tensor(x))
    realize_all(list(bn.buffers()))
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=RTOL, atol=1e-6)


def test_batchnorm_running_stats_realize_with_the_optimizer_step() -> None:
    """The in-place running-stat update keeps the tensor objects and is realized by step(), before the update."""
    model = ConvNet()
    rm = model.bn.running_mean
    opt = SGD(model.parameters(), lr=0.1)
    for seed in range(2):
        opt.zero_grad()
        model(Tensor(rnd(2, 3, 10, 10, seed=seed))).square().mean().backward()
        opt.step()
        assert model.bn.running_mean is rm
        assert all(b.uop.op.name in ("BUFFER", "RESHAPE") for b in model.buffers())
    assert int(model.bn.num_batches_tracked.item()) == 2


# ---- finite differences (float64) ----


def directional_check(model: nn.Module, loss_fn: Any, eps: float = 1e-6, seed: int = 0) -> None:
    """<grad, d> against (L(p + eps d) - L(p - eps d)) / 2eps for a random direction d over all parameters."""
    params = list(model.parameters())
    model.zero_grad()
    loss = loss_fn()
    loss.backward()
    rng = np.random.default_rng(seed)
    dirs = [rng.standard_normal(p.shape) for p in params]
    analytic = sum(float((p.grad.numpy() * d).sum()) for p, d in zip(params, dirs) if p.grad is not None)
    base = [p.numpy().copy() for p in params]

    def loss_at(sign: float) -> float:
        model.load_state_dict({n: b + sign * eps * d for (n, _), b, d in zip(model.named_parameters(), base, dirs)},
                              strict=False)  # fmt: skip
        return float(loss_fn().item())

    numeric = (loss_at(1.0) - loss_at(-1.0)) / (2 * eps)
    assert math.isclose(analytic, numeric, rel_tol=1e-6, abs_tol=1e-9), (analytic, numeric)


def test_finite_differences_mlp_float64() -> None:
    model = nn.Sequential(nn.Linear(4, 8, dtype="float64"), nn.GELU(), nn.Linear(8, 2, dtype="float64"))
    x = Tensor(np.random.default_rng(1).standard_normal((5, 4)), dtype=dtypes.float64)
    target = Tensor(np.random.default_rng(2).standard_normal((5, 2)), dtype=dtypes.float64)
    directional_check(model, lambda: (model(x) - target).square().mean())


def test_finite_differences_conv_net_float64() -> None:
    model = ConvNet(dtype="float64")  # BatchNorm in train mode: the batch statistics are differentiated too
    x = Tensor(np.random.default_rng(3).standard_normal((2, 3, 10, 10)), dtype=dtypes.float64)
    directional_check(model, lambda: model(x).sin().sum(), seed=1)


def test_finite_differences_attention_block_float64() -> None:
    block = Block(8, 2, causal=False).to(dtypes.float64)
    assert all(p.dtype == dtypes.float64 for p in block.parameters())
    x = Tensor(np.random.default_rng(4).standard_normal((2, 3, 8)), dtype=dtypes.float64)
    directional_check(block, lambda: block(x).tanh().sum(), seed=2)


# ---- module structure ----


def test_names_and_structure_match_torch() -> None:
    model, tmodel = ConvNet(), TorchConvNet()
    assert list(model.state_dict()) == list(tmodel.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in tmodel.named_buffers()]
    assert [n for n, _ in model.named_modules()] == [n for n, _ in tmodel.named_modules()]
    seq, tseq = mlp()
    assert list(seq.state_dict()) == list(tseq.state_dict())
    assert isinstance(seq[2], nn.Linear) and len(seq) == 5


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.emb.weight  # tied, as language models do
        self.layers = [nn.Linear(4, 4), {"gate": nn.Linear(4, 1)}]
        self._private = Tensor(np.zeros(3, np.float32))


def test_parameters_walk_lists_dicts_and_dedupe_tied_weights() -> None:
    m = Tied()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["emb.weight", "layers.0.weight", "layers.0.bias", "layers.1.gate.weight", "layers.1.gate.bias"]
    assert "out.weight" in m.state_dict() and len(m.state_dict()) == 6  # state_dict keeps every name, as torch
    assert len(st.get_parameters(m)) == 5


def test_get_parameters_of_plain_objects_and_buffers_excluded() -> None:
    class Plain:
        def __init__(self) -> None:
            self.w = Tensor(np.ones(3, np.float32))
            self.blocks = [nn.BatchNorm2d(2)]

    p = Plain()
    params = st.get_parameters(p)
    assert len(params) == 3 and params[0] is p.w  # w, weight, bias; no running statistics
    assert list(st.get_state_dict(p)) == ["w", "blocks.0.weight", "blocks.0.bias", "blocks.0.running_mean",
                                          "blocks.0.running_var", "blocks.0.num_batches_tracked"]  # fmt: skip


def test_train_eval_propagate() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5), nn.BatchNorm2d(2)))
    model.eval()
    assert all(not m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_linear_and_conv_init_bounds_and_seed() -> None:
    anneal.manual_seed(123)
    a = nn.Linear(50, 40)
    anneal.manual_seed(123)
    b = nn.Linear(50, 40)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    w, bound = a.weight.numpy(), 1 / math.sqrt(50)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(np.abs(w).mean() - bound / 2) < 0.05 * bound  # uniform on [-bound, bound]
    assert np.abs(a.bias.numpy()).max() <= bound
    c = nn.Conv2d(4, 6, 3, groups=2)
    assert c.weight.shape == (6, 2, 3, 3) and np.abs(c.weight.numpy()).max() <= 1 / math.sqrt(2 * 9)
    assert all(p.requires_grad for p in c.parameters())


def test_dropout_train_and_eval() -> None:
    x = Tensor(np.ones((200, 50), np.float32))
    d = nn.Dropout(0.3)
    anneal.manual_seed(7)
    y1 = d(x).numpy()
    anneal.manual_seed(7)
    y2 = d(x).numpy()
    np.testing.assert_array_equal(y1, y2)  # the mask comes from anneal's generator
    kept = y1 != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y1[kept], 1 / 0.7, rtol=1e-6)
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())
    assert np.all(nn.Dropout(1.0)(x).numpy() == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_dropout_gradient_uses_the_same_mask() -> None:
    x = Tensor(np.ones((4, 8), np.float32), requires_grad=True)
    y = nn.Dropout(0.5)(x)
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())  # d(mask * x / (1-p))/dx == mask / (1-p)


# ---- state dicts ----


def test_load_state_dict_errors_name_keys_and_shapes() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    good = {k: v.numpy() for k, v in model.state_dict().items()}
    missing = {k: v for k, v in good.items() if k != "1.bias"}
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "1.bias"'):
        model.load_state_dict(missing)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "extra.weight"'):
        st.load_state_dict(model, {**good, "extra.weight": np.zeros(2)})
    bad = {**good, "0.weight": np.zeros((5, 3), np.float32)}
    with pytest.raises(RuntimeError, match=r"size mismatch for 0\.weight: .*shape \(5, 3\) from checkpoint.*"
                                           r"current model is \(4, 3\)"):  # fmt: skip
        model.load_state_dict(bad)
    with pytest.raises(RuntimeError, match="size mismatch"):  # shape errors are raised even when not strict
        model.load_state_dict(bad, strict=False)


def test_failed_load_changes_nothing_and_non_strict_reports_keys() -> None:
    model = nn.Linear(3, 2)
    before = model.weight.numpy().copy()
    with pytest.raises(RuntimeError):
        model.load_state_dict({"weight": np.ones((2, 3), np.float32), "bias": np.ones(5, np.float32)})
    np.testing.assert_array_equal(model.weight.numpy(), before)
    res = model.load_state_dict({"weight": np.ones((2, 3)), "junk": np.ones(1)}, strict=False)
    assert res.missing_keys == ["bias"] and res.unexpected_keys == ["junk"]
    np.testing.assert_array_equal(model.weight.numpy(), np.ones((2, 3)))
    assert model.weight.dtype == dtypes.float32 and model.weight.requires_grad  # cast to the model's dtype


def test_load_state_dict_keeps_tensor_objects() -> None:
    model = nn.Linear(3, 2)
    w = model.weight
    opt = SGD(model.parameters(), lr=1.0)
    model.load_state_dict({"weight": np.full((2, 3), 2.0), "bias": np.zeros(2)})
    assert model.weight is w
    (model(Tensor(np.ones((1, 3), np.float32)))).sum().backward()
    opt.step()
    np.testing.assert_allclose(model.weight.numpy(), np.full((2, 3), 1.0))


# ---- safetensors ----


def test_safe_save_load_roundtrip_all_dtypes(tmp_path: Path) -> None:
    tensors = {
        "f32": Tensor(rnd(3, 4)),
        "f64": Tensor(np.arange(3, dtype=np.float64)),
        "f16": Tensor(rnd(5), dtype=dtypes.float16),
        "bf16": Tensor(rnd(2, 3), dtype=dtypes.bfloat16),
        "i64": Tensor(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "i32": Tensor(np.array([-1, 7], np.int32)),
        "u8": Tensor(np.array([0, 255], np.uint8)),
        "bool": Tensor(np.array([True, False])),
        "scalar": Tensor(np.float32(2.5)),
        "lazy": Tensor(rnd(3)) * 2 + 1,
    }
    path = tmp_path / "ckpt.safetensors"
    st.safe_save(tensors, path, metadata={"step": "3"})
    back = st.safe_load(path)
    assert set(back) == set(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape, k
        np.testing.assert_array_equal(back[k].numpy(), t.numpy(), err_msg=k)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]  # no temporary file left behind


def test_safetensors_files_interoperate_with_torch(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    model, tmodel = mlp()
    path = tmp_path / "from_torch.safetensors"
    save_file({k: v.contiguous() for k, v in tmodel.state_dict().items()}, str(path))
    model.load_state_dict(st.safe_load(path))
    x = rnd(2, 6)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), tmodel(torch.tensor(x)).detach().numpy(), rtol=RTOL,
                               atol=ATOL)  # fmt: skip
    out = tmp_path / "from_anneal.safetensors"
    st.safe_save({**model.state_dict(), "half": Tensor(rnd(3), dtype=dtypes.bfloat16)}, out)
    loaded = load_file(str(out))
    assert loaded["half"].dtype == torch.bfloat16
    np.testing.assert_array_equal(loaded["half"].float().numpy(), Tensor(rnd(3), dtype=dtypes.bfloat16).numpy())
    tmodel.load_state_dict({k: v for k, v in loaded.items() if k != "half"})


def test_safe_save_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.safetensors"
    st.safe_save({"w": Tensor(np.ones(4, np.float32))}, path)
    good = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        st.safe_save({"w": Tensor(np.zeros(1000, np.float32))}, path)
    monkeypatch.undo()
    assert path.read_bytes() == good  # the old checkpoint is intact
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]  # and no partial temporary file

    fresh = tmp_path / "never.safetensors"
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("rename failed")))
    with pytest.raises(OSError, match="rename failed"):
        st.safe_save({"w": Tensor(np.zeros(3, np.float32))}, fresh)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_safe_save_bad_input_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="names must be strings"):
        st.safe_save({1: Tensor(np.ones(2, np.float32))}, tmp_path / "x.safetensors")  # type: ignore[dict-item]
    assert list(tmp_path.iterdir()) == []
