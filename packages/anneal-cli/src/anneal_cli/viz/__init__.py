"""`anneal viz`: one training step as the compiler built it, drawn in the browser."""
