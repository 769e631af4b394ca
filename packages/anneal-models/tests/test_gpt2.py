"""GPT-2 against its oracles: Hugging Face `transformers` (a random tiny GPT2LMHeadModel with the real 50257-token
vocabulary, saved with save_pretrained) for weights, logits, greedy generation and a fine-tune step's gradients;
tiktoken (built offline from the same two files) for the BPE."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from torch.nn import functional as tf

from anneal import Tensor
from anneal.data.testing import shared_data_dir
from anneal.realize import realize_all
from anneal_models import gpt2
from anneal_models.bpe import BPE

GPT2_DATA = shared_data_dir(__file__) / "gpt2"
HARD = ["héllo wörld 🤗🤗  ", "it's  \n\n  x's   y'S 'll", "e\u0301\u0302 combining marks", "   \t\n\n\n  ",
        "<|endoftext|>after", "ﬁ ŉ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "1234567 3.14159", "\u200b\ufeffzero width", "Hello, world!"]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer GPT-2 with the real vocabulary, in the Hugging Face layout (save_pretrained)."""
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("gpt2")
    config = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(GPT2_DATA / name, out)
    return out


def hf_model(folder: Path) -> torch.nn.Module:
    return transformers.GPT2LMHeadModel.from_pretrained(folder).eval()


@pytest.fixture(scope="module")
def bpe() -> BPE:
    return BPE(GPT2_DATA / "vocab.json", GPT2_DATA / "merges.txt")


def test_bpe_matches_tiktoken(bpe: BPE, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the two files, cache nothing
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    ranks = data_gym_to_mergeable_bpe_ranks(str(GPT2_DATA / "merges.txt"), str(GPT2_DATA / "vocab.json"))
    pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
    enc = tiktoken.Encoding("gpt2", pat_str=pattern, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    text = (shared_data_dir(__file__) / "tinyshakespeare" / "input.txt").read_text()
    assert bpe.encode(text) == enc.encode_ordinary(text)
    for s in HARD:
        assert bpe.encode(s) == enc.encode(s, allowed_special="all"), s
    data = gpt2.BPEText(text, bpe)
    assert (len(data.train), len(data.val)) == (301_966, 36_059)  # nanoGPT's shakespeare split


def test_bpe_round_trips_bytes_even_split_characters(bpe: BPE) -> None:
    for s in HARD:
        assert bpe.decode(bpe.encode(s)) == s.encode()
    pieces = [bpe.decode([i]) for i in bpe.encode("🤗")]
    assert len(pieces) > 1 and b"".join(pieces) == "🤗".encode()  # one character over several tokens
    with pytest.raises(UnicodeDecodeError):
        pieces[0].decode()  # the first token alone is not valid UTF-8: decode gives bytes, not text
    assert bpe.eot == 50256 and bpe.encode("<|endoftext|>") == [50256]
    with pytest.raises(ValueError, match="token id 50257 is out of range"):
        bpe.decode([50257])


def test_logits_match_transformers(folder: Path, bpe: BPE) -> None:
    net, tok = gpt2.load(folder, "cpu")
    net.eval()
    ids = tok.encode("Hello, my dog is cute, and the weather in Paris is")
    with torch.no_grad():
        expected = hf_model(folder)(torch.tensor([ids])).logits.numpy()
    np.testing.assert_allclose(net(Tensor(np.array([ids]))).numpy(), expected, atol=1e-4, rtol=1e-4)


def test_kv_cache_greedy_generation_is_generate(folder: Path) -> None:
    net, tok = gpt2.load(folder, "cpu")
    ids = tok.encode("The meaning of life is")
    with torch.no_grad():
        expected = hf_model(folder).generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False,
                                             pad_token_id=50256)[0, len(ids):].tolist()  # fmt: skip
    generator = gpt2.Generator(net, "cpu")
    assert list(generator.stream(ids, 20, temperature=0.0)) == expected
    assert generator.decode.replays >= 18  # one captured decode step, replayed for every position


def test_fine_tune_step_gradients_match_torch(folder: Path) -> None:
    net, _ = gpt2.load(folder, "cpu")
    rng = np.random.default_rng(0)
    window = rng.integers(0, 50257, (2, 17))
    x, y = window[:, :-1], window[:, 1:]
    loss, _ = net.loss(Tensor(x), Tensor(y))
    hf = hf_model(folder)  # eval mode: its dropout (0.1 by default) off, gradients still computed
    logits = hf(torch.tensor(x)).logits
    tloss = tf.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-5)
    loss.backward()
    tloss.backward()
    ours = dict(net.named_parameters())
    realize_all([p.grad for p in ours.values()])
    theirs = gpt2.anneal_names({k: v.grad.numpy() for k, v in hf.named_parameters()})
    for name, p in ours.items():
        expected = theirs[name]
        np.testing.assert_allclose(p.grad.numpy(), expected, rtol=1e-3, atol=1e-6 + 1e-4 * np.abs(expected).max(),
                                   err_msg=name)  # fmt: skip


def test_low_precision_storage(folder: Path) -> None:
    full, tok = gpt2.load(folder, "cpu")
    half, _ = gpt2.load(folder, "cpu", "float16")
    assert half.transformer["h"][0].attn.c_attn.weight.dtype.name == "float16"
    ids = np.array([tok.encode("storage dtypes")])
    a, b = full(Tensor(ids)).numpy(), half(Tensor(ids)).numpy()
    assert b.dtype == np.float32 and np.abs(a - b).max() < 2e-2


def test_bad_weights_are_named(folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "llama"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(gpt2.WeightsError, match="holds a llama model, not GPT-2"):
        gpt2.load(other, "cpu")
    cut = tmp_path / "cut"
    shutil.copytree(folder, cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(gpt2.WeightsError, match="is truncated or not a safetensors file"):
        gpt2.load(cut, "cpu")
    small = tmp_path / "small"
    shutil.copytree(folder, small)
    config = json.loads((small / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "n_embd": 48, "n_head": 2}))
    with pytest.raises(gpt2.WeightsError, match=r"misshapen: transformer.wte.weight: \(50257, 32\) in the file, "
                                                 r"\(50257, 48\) in the model; .*; and 22 more\)"):  # fmt: skip
        gpt2.load(small, "cpu")
    extra = tmp_path / "extra"
    shutil.copytree(folder, extra)
    (extra / "config.json").write_text(json.dumps({**config, "n_layer": 1}))
    with pytest.raises(gpt2.WeightsError, match=r"unexpected: transformer.h.1.attn.c_attn.bias, .*, and 6 more\)"):
        gpt2.load(extra, "cpu")


def test_nucleus_sampling_keeps_the_top_mass() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)
    draws = {gpt2.choose_token(logits, 1.0, None, 0.7, rng) for _ in range(200)}
    assert draws == {0, 1}  # 0.5 + 0.3 reaches 0.7; the tail is cut
    assert {gpt2.choose_token(logits, 1.0, None, 0.4, rng) for _ in range(50)} == {0}


def test_tiny_preset_fine_tunes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = (shared_data_dir(__file__) / "tinyshakespeare" / "input.txt").read_text()[:20_000]
    (tmp_path / "input.txt").write_text(text)
    monkeypatch.setattr(gpt2, "tokenizer", lambda folder: BPE(GPT2_DATA / "vocab.json", GPT2_DATA / "merges.txt"))
    config = {**gpt2.DEFAULTS, **gpt2.PRESETS["tiny"], "data": str(tmp_path / "input.txt"), "steps": 12}
    trainer = gpt2.build(config, "cpu")
    losses = [trainer.step(i) for i in range(12)]
    assert np.mean(losses[-3:]) < losses[0] - 0.1
    assert (tmp_path / "input.gpt2-bpe.npz").exists()  # the token arrays are cached beside the text
    again = gpt2.build(config, "cpu")
    np.testing.assert_array_equal(again.data.train, trainer.data.train)
    assert trainer.sample("ROMEO:", 5, 0).startswith("ROMEO:")
