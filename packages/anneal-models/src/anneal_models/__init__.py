"""anneal_models: the model zoo, datasets and tokenizer, registered through the plugin hooks."""

__version__ = "0.1.0"
