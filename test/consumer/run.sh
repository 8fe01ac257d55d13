#!/usr/bin/env bash
# Installs the built fusejit into a temporary prefix, then configures, builds and runs a
# separate project that finds it with find_package(fusejit).
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build "$work/build" >/dev/null
# Consumer hygiene: the package gives the consumer's compile nothing its public headers do not
# need: no fmt/spdlog definitions, no CUDA or system include paths.
if grep -E 'FMT_|SPDLOG_|cuda/include|targets/[^ ]*/include|-isystem /usr/include' \
    "$work/build/compile_commands.json"; then
  echo "consumer: the installed package leaks compile flags into its consumer (above)" >&2
  exit 1
fi
"$work/build/consumer"
