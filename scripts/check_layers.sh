#!/usr/bin/env bash
# The layer order of DESIGN.md, checked on the sources: a file may include only its own layer and the layers below
# it. (The CMake targets enforce the same order for linking; this catches a header-only reach upwards, which links
# fine and still tangles the layers.) Prints every offending include and exits 1 when there is one.
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
cd "$root"

# layer: the top-level folders its files may include.
declare -A allowed=(
  [core]="core"
  [parallel]="core parallel"
  [losses]="core parallel losses"
  [optim]="core parallel optim"
  [distill]="core parallel losses optim distill"
  [bench]="core parallel losses optim distill bench"
  [apps]="core parallel losses optim distill bench apps"
)
project_folders="core parallel losses optim distill bench apps tests"

status=0
for layer in "${!allowed[@]}"; do
  [[ -d "$layer" ]] || continue
  while IFS= read -r line; do
    file="${line%%:*}"
    target=$(sed -E 's/.*#include "([^/"]+)\/.*/\1/' <<<"${line#*:}")
    [[ " $project_folders " == *" $target "* ]] || continue  # a third-party header
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "layering: $file includes $target/ (the $layer layer may include only: ${allowed[$layer]})"
      status=1
    fi
  done < <(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' '^#include "[^/"]+/' "$layer" |
           sed -E 's/^([^:]+):[0-9]+:/\1:/')
done
if ((status == 0)); then echo "layering: every include goes down the layer order"; fi
exit $status
