"""anneal_schedule: rangeify, fuse and cut a step graph into kernels, then lower and optimize each one."""
