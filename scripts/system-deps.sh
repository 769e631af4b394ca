#!/usr/bin/env bash
# System packages anneal's tests and WebGPU backend need on Debian/Ubuntu:
#   mesa-vulkan-drivers  -- lavapipe, a software Vulkan adapter, so WebGPU runs without a GPU
#   python3-venv         -- `python3 -m venv` (Debian splits ensurepip out of python3)
#   tmux                 -- a real terminal for the test of `anneal train`'s live dashboard
#   gcc                  -- the C compiler the cpu backend builds its kernels with (numpy without one)
#   chromium             -- a real browser for the tests of `anneal viz` (driven by Playwright)
# Installs only what is missing, and only where apt-get can run (root, or sudo without a
# password); elsewhere it says what to install and carries on.
set -euo pipefail

PYTHON="${PYTHON:-python3.11}"
missing=()
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ! dpkg -s mesa-vulkan-drivers >/dev/null 2>&1; then
    missing+=(mesa-vulkan-drivers)
fi
if command -v "$PYTHON" >/dev/null 2>&1 && ! "$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1; then
    missing+=("$(basename "$PYTHON")-venv")
fi
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: not a Debian-like system; please install: ${missing[*]} (or your GPU's Vulkan driver)" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "system-deps: run as root to install: apt-get install ${missing[*]}" >&2
    exit 0
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
