"""anneal_cpu: the CPU backend, each kernel rendered to numpy or compiled to C."""
