#!/usr/bin/env bash
# Installs the built fusejit into a temporary prefix, then checks the package as a user meets it:
#   - a separate C++17 project finds it with find_package(fusejit), builds and runs;
#   - the same program builds with pkg-config alone (when pkg-config is there) and runs;
#   - libfusejit.so exports no fmt or spdlog symbol, and the consumer links it (not archives);
#   - the installed CMake package and .pc file name no path of the machine they were built on;
#   - LICENSE is installed.
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")" && pwd)
project_dir=$(cd "$source_dir/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "consumer: $*" >&2; exit 1; }
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
prefix=$work/prefix
lib=$(find "$prefix" -name 'libfusejit.so' | head -n 1)
[ -n "$lib" ] || fail "no libfusejit.so installed under $prefix (FUSEJIT_SHARED=OFF?)"

# The library exports the public API alone.
exported=$(nm -DC --defined-only "$lib")
leaks=$(grep -E ' (spdlog|fmt|XXH|nlohmann|CLI)::|XXH3?_' <<<"$exported" | head -n 5 || true)
[ -z "$leaks" ] || fail "libfusejit.so exports its dependencies' symbols, e.g.:"$'\n'"$leaks"
internal=$(grep -cE ' fusejit::(ir|fusion|templates|cache|jit)::' <<<"$exported" || true)
[ "$internal" -eq 0 ] || fail "libfusejit.so exports $internal symbols of the internal layers"
grep -q ' fusejit::Context::' <<<"$exported" || fail "libfusejit.so does not export fusejit::Context"
echo "consumer: libfusejit.so exports $(wc -l <<<"$exported") symbols, none of fmt, spdlog, xxHash or the layers"

# Nothing of this machine's layout in the package files.
if grep -rlE "$build_dir|$project_dir|/usr/lib/x86_64-linux-gnu|/usr/local/cuda" \
     "$prefix"/lib*/cmake "$prefix"/lib*/pkgconfig 2>/dev/null; then
  fail "the installed package names paths of the build machine (files above)"
fi
[ -f "$prefix/share/doc/fusejit/LICENSE" ] || fail "LICENSE not installed"

cmake -S "$source_dir" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build "$work/build" >/dev/null
# Consumer hygiene: the package gives the consumer's compile nothing its public headers do not
# need: no fmt/spdlog definitions, no CUDA or system include paths.
if grep -E 'FMT_|SPDLOG_|cuda/include|targets/[^ ]*/include|-isystem /usr/include' \
    "$work/build/compile_commands.json"; then
  fail "the installed package leaks compile flags into its consumer (above)"
fi
# (ldd's output is read whole first: grep -q stopping early would fail the pipe under pipefail.)
needed=$(ldd "$work/build/consumer")
grep -q 'libfusejit\.so' <<<"$needed" || fail "the consumer does not link libfusejit.so:"$'\n'"$needed"
"$work/build/consumer"

if command -v pkg-config >/dev/null; then
  pc_dir=$(dirname "$(find "$prefix" -name fusejit.pc | head -n 1)")
  flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs fusejit)
  # shellcheck disable=SC2086
  "${CXX:-c++}" -std=c++17 "$source_dir/main.cpp" -o "$work/consumer-pc" $flags
  "$work/consumer-pc" | sed 's/^consumer:/consumer (pkg-config):/'
else
  echo "consumer: pkg-config missing: the pkg-config build was not tried"
fi
