"""anneal.nn: neural-network building blocks, under torch.nn's names.

``anneal.nn.functional`` mirrors ``torch.nn.functional`` (same names, argument order and
defaults) and is built only from Tensor ops, so every function compiles into the graph;
the module classes (``nn.Linear``, ``nn.ModuleList``, the losses, ...) are exported here.
"""

from anneal.nn import functional
from anneal.nn.loss_modules import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from anneal.nn.modules import (
    GELU,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    Module,
    ModuleDict,
    ModuleList,
    ReLU,
    RMSNorm,
    Sequential,
    Sigmoid,
    SiLU,
    Tanh,
)

__all__ = [
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "L1Loss",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "NLLLoss",
    "RMSNorm",
    "ReLU",
    "SiLU",
    "Sequential",
    "Sigmoid",
    "SmoothL1Loss",
    "Tanh",
    "functional",
]
