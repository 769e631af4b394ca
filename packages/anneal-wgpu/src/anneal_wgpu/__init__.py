"""anneal_wgpu: the WebGPU backend (WGSL renderer, wgpu runtime) and adapter discovery."""

__version__ = "0.1.0"
