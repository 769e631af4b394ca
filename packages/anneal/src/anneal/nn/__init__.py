"""anneal.nn: neural-network building blocks.

``anneal.nn.functional`` mirrors ``torch.nn.functional`` (same names, argument order and
defaults) and is built only from Tensor ops, so every function compiles into the graph.
"""

from anneal.nn import functional

__all__ = ["functional"]
