#!/usr/bin/env bash
# Installs everything retort needs from Debian's packages (run as root on Debian 12 or newer).
#   scripts/install-deps.sh          what building and running retort needs
#   scripts/install-deps.sh tests    that, and the test artifacts that are not in git: the real Llama-3 and Qwen3
#                                    tokenizer.json files (scripts/fetch-hf-tokenizers.sh, with Debian's npm)
# The CUDA toolkit, when present under /usr/local/cuda, is picked up by CMake; it is not installed here.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  cmake ninja-build g++ pkg-config
  libeigen3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev libpcre2-dev libicu-dev libgtest-dev libgloo-dev libhiredis-dev
  redis-server                   # the multi-node rendezvous test (a local server on a free port)
  fortunes fortunes-min          # the embedded default corpus: /usr/share/games/fortunes
  python3 python3-torch python3-numpy  # the PyTorch twin tests (CPU)
)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if [[ ${1:-} == tests ]]; then
  bash "$(dirname "$0")/fetch-hf-tokenizers.sh"
fi
