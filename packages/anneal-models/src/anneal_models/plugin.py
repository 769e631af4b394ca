"""Registers the built-in models, through the same hook a third party uses."""

from __future__ import annotations

from collections.abc import Callable

from anneal.registry import hookimpl


@hookimpl
def register_models(register: Callable[..., None]) -> None:
    from anneal_models import bert, conv, diffusion, dit, dynmlp, gpt2, llama, meanflow, mlp, moe, nanogpt, resnet9, vit

    for name, module, summary, samples in (
        ("mlp", mlp, "small MLP regression on a synthetic 2-D function", ""),
        ("dynmlp", dynmlp, "the mlp task compiled once for a symbolic batch: any --batch without recompiling", ""),
        ("conv", conv, "small ConvNet (im2col + one matmul) on synthetic oriented bars", ""),
        ("nanogpt", nanogpt, "char GPT on tinyshakespeare: learned positions, LayerNorm, MHA, GELU, tied head", "text"),
        ("llama", llama, "char Llama on tinyshakespeare: RMSNorm, GQA + RoPE, SwiGLU, tied embeddings", "text"),
        ("moe", moe, "nanogpt with soft-routed expert FFNs and a load-balance loss, on tinyshakespeare", "text"),
        ("bert", bert, "bidirectional char encoder, masked-LM on tinyshakespeare", "text"),
        ("gpt2", gpt2, "GPT-2 small from the real weights, fine-tuned on tinyshakespeare in GPT-2's BPE", "text"),
    ):
        register(name, build=module.build, summary=summary, defaults=module.DEFAULTS, presets=module.PRESETS,
                 samples=samples)  # fmt: skip
    for name, module, summary, datasets, samples in (
        (
            "vit",
            vit,
            "patch-4 ViT, 2 pre-LayerNorm blocks, 4 heads, mean pool",
            ("synthetic10", "digits", "cifar10"),
            "",
        ),
        (
            "resnet9",
            resnet9,
            "David Page's ResNet-9 with BatchNorm; his CIFAR-10 recipe in full",
            ("digits", "cifar10", "synthetic10"),
            "",
        ),
        (
            "diffusion",
            diffusion,
            "tiny DDPM: conv stack, sinusoidal time embedding, DDPM/DDIM sampling",
            ("synthetic8", "digits"),
            "images",
        ),
        (
            "dit",
            dit,
            "class-conditional Diffusion Transformer, adaLN-zero, classifier-free guidance",
            ("digits", "cifar10"),
            "images",
        ),
        (
            "meanflow",
            meanflow,
            "MeanFlow one-step generator on the DiT backbone, trained through anneal.jvp",
            ("digits", "cifar10"),
            "images",
        ),
    ):
        register(name, build=module.build, summary=summary, defaults=module.DEFAULTS, presets=module.PRESETS,
                 datasets=datasets, samples=samples)  # fmt: skip


@hookimpl
def register_datasets(register: Callable[..., None]) -> None:
    from anneal_models import datasets, images

    register("tinyshakespeare", load=datasets.tinyshakespeare, summary="karpathy's tinyshakespeare, char level")
    for name, load in images.LOADERS.items():
        register(name, load=load, summary=images.SUMMARIES[name])
