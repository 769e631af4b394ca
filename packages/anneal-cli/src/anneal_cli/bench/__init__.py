"""`anneal bench`: the benchmark suite as a command (cases, timing, the command)."""
