"""`anneal gpt2 sample` on a random tiny GPT-2 in the Hugging Face layout (transformers' save_pretrained), greedy
tokens against transformers' generate, and its bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import transformers
from click.testing import CliRunner

from anneal.data.testing import shared_data_dir
from anneal_cli.main import AnnealGroup


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    out = tmp_path_factory.mktemp("gpt2")
    config = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(shared_data_dir(__file__) / "gpt2" / name, out)
    return out


def test_greedy_sample_is_transformers_generate(cli: AnnealGroup, runner: CliRunner, folder: Path) -> None:
    prompt = "Once upon a time"
    result = runner.invoke(cli, ["gpt2", "sample", prompt, "--weights", str(folder), "--greedy", "--max-tokens", "20",
                                 "--device", "cpu"])  # fmt: skip
    assert result.exit_code == 0, result.output
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok(prompt, return_tensors="pt").input_ids
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=50256)[0].tolist()
    expected = tok.convert_tokens_to_string(tok.convert_ids_to_tokens(out)).encode()  # bytes where UTF-8 is whole
    assert result.stdout_bytes.rstrip(b"\n") == expected


def test_seeded_sampling_is_reproducible(cli: AnnealGroup, runner: CliRunner, folder: Path) -> None:
    args = ["gpt2", "sample", "Hello", "--weights", str(folder), "--max-tokens", "12", "--device", "cpu",
            "--top-k", "50", "--top-p", "0.9", "--temperature", "0.8"]  # fmt: skip
    first, again = runner.invoke(cli, [*args, "--seed", "3"]), runner.invoke(cli, [*args, "--seed", "3"])
    other = runner.invoke(cli, [*args, "--seed", "4"])
    assert first.exit_code == 0, first.output
    assert first.stdout_bytes == again.stdout_bytes != other.stdout_bytes


def test_bad_input(cli: AnnealGroup, runner: CliRunner, folder: Path, tmp_path: Path) -> None:
    def run(*args: str) -> tuple[int, str]:
        r = runner.invoke(cli, ["gpt2", "sample", *args, "--device", "cpu"])
        return r.exit_code, " ".join(r.output.split())

    code, text = run("", "--weights", str(folder))
    assert code == 2 and "the prompt is empty" in text
    code, text = run("hi", "--weights", str(folder), "--top-p", "1.5")
    assert code == 2 and "--top-p" in text
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert"}')
    code, text = run("hi", "--weights", str(other))
    assert code == 2 and "holds a bert model, not GPT-2" in text
    cut = tmp_path / "cut"
    shutil.copytree(folder, cut)
    (cut / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    code, text = run("hi", "--weights", str(cut))
    assert code == 1 and "is truncated or not a safetensors file" in text
    code, text = run("hi", "--weights", str(folder), "--max-tokens", "100")
    assert code == 2 and "exceed the model's 64 positions" in text


def test_offline_without_the_weights_names_the_download(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("ANNEAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")
    result = runner.invoke(cli, ["gpt2", "sample", "hi", "--device", "cpu"])
    assert result.exit_code == 1 and "anneal download gpt2" in result.output
    assert "or pass `anneal gpt2 sample --weights DIR` (a Hugging Face GPT-2 folder" in result.stderr  # its own flag
    assert "--data" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_fine_tune_run_folder_sample_and_resume(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                                offline_data: None) -> None:  # fmt: skip
    """gpt2 through `anneal train` as the other language models: a run folder, `anneal sample gpt2 --checkpoint`,
    `--resume` (the tiny preset: a random 2-layer GPT-2 in the real layout, GPT-2's BPE on tinyshakespeare)."""
    run = tmp_path / "run"
    trained = runner.invoke(cli, ["train", "gpt2", "--preset", "tiny", "--steps", "4", "--device", "cpu", "--plain",
                                  "--out", str(run)])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    assert "gpt2: 3.32M parameters (random)" in trained.output and "BPE vocabulary 50257" in trained.output
    args = ["sample", "gpt2", "--checkpoint", str(run), "--device", "cpu", "--max-tokens", "6", "--prompt", "ROMEO:"]
    first, again = runner.invoke(cli, args), runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout and first.stdout.startswith("ROMEO:")
    resumed = runner.invoke(cli, ["train", "gpt2", "--resume", str(run), "--steps", "6", "--device", "cpu", "--plain"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming" in resumed.output and "step 6/6" in resumed.output
