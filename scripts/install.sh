#!/usr/bin/env bash
# Set up a development checkout: system packages (Vulkan driver), then .venv with all
# eight packages installed editable. Usage: bash scripts/install.sh  (PYTHON=python3.12 ...)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || { echo "install: $PYTHON not found (set PYTHON=...)" >&2; exit 1; }
PYTHON="$PYTHON" bash scripts/system-deps.sh

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# hatchling + editables in the venv let every package build without its own isolated env.
.venv/bin/python -m pip install -q hatchling editables
packages=(anneal-ir anneal-autodiff anneal-schedule anneal-cpu anneal-wgpu anneal-core anneal-models anneal-cli)
args=()
for p in "${packages[@]}"; do args+=(-e "packages/$p"); done
.venv/bin/python -m pip install -q --no-build-isolation "${args[@]}"
# MPI for data-parallel training (anneal train --nproc N): mpi4py and MPICH's wheel, which brings mpiexec.
.venv/bin/python -m pip install -q "mpi4py==4.1.2" "mpich==5.0.2"
echo "install: done; try .venv/bin/anneal train mlp (or .venv/bin/anneal doctor)" >&2
