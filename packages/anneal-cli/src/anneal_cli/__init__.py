"""anneal_cli: the thin click CLI (`anneal doctor`, `devices`, `plugins`, `train`, ...)."""

__version__ = "0.1.0"
