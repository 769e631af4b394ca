"""anneal_autodiff: reverse-mode (VJP) and forward-mode (JVP) rule sets over UOps."""

from anneal_autodiff.jvp import compute_tangents, jvp_rule, jvp_rules
from anneal_autodiff.vjp import compute_gradient, vjp_rule, vjp_rules

__version__ = "0.1.0"

__all__ = ["compute_gradient", "compute_tangents", "jvp_rule", "jvp_rules", "vjp_rule", "vjp_rules"]
