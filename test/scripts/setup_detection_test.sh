#!/usr/bin/env bash
# Checks scripts/setup.sh's detection of what the build needs, with fake tools on the PATH
# (nothing is installed: FUSEJIT_SETUP_DRY_RUN, or a fake apt-get that fails):
#   - cmake and ninja from a Python-style environment (not /usr/bin) count as present;
#   - a cmake older than CMakeLists.txt requires, or a ninja that does not run, is missing;
#   - a library counts as present through a CMake package config under such an environment;
#   - when apt-get cannot install, the set-up stops with a message naming what is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

venv=$work/venv/bin
mkdir -p "$venv" "$work/old/bin" "$work/badninja/bin" "$work/apt/bin"
fake() {  # fake PATH_TO_TOOL OUTPUT_OF_--version [EXIT]
  printf '#!/bin/sh\necho "%s"\nexit %s\n' "$2" "${3:-0}" >"$1"
  chmod +x "$1"
}
fake "$venv/cmake" "cmake version 4.4.0"
fake "$venv/ninja" "1.13.0"
fake "$work/old/bin/cmake" "cmake version 3.10.2"
fake "$work/badninja/bin/ninja" "ninja: cannot execute" 126
fake "$work/apt/bin/apt-get" "E: Could not resolve 'deb.debian.org' (fake apt-get)" 100

detect() {  # detect PATH -> the missing-package report
  PATH="$1" FUSEJIT_SETUP_DRY_RUN=1 bash -c "source '$ROOT/scripts/setup.sh'; fusejit_missing_packages"
}

# 1. Tools from the environment: nothing missing (the libraries are what this build used).
out=$(detect "$venv:$PATH")
[ -z "$out" ] || fail "fake cmake 4.4 and ninja on the PATH, yet reported missing:"$'\n'"$out"
out=$(PATH="$venv:$PATH" FUSEJIT_SETUP_DRY_RUN=1 bash -c "source '$ROOT/scripts/setup.sh'; fusejit_install_packages; echo ok")
[ "$out" = ok ] || fail "dry-run set-up with nothing missing printed: $out"
echo "ok: cmake 4.4 and ninja from $venv are enough"

# 2. A too-old cmake and a broken ninja are missing, with the reason.
out=$(detect "$work/old/bin:$venv:$PATH")
grep -q '^cmake	.*cmake 3.10.2, older than the 3\.[0-9]*' <<<"$out" || fail "cmake 3.10.2 not reported: $out"
grep -q '^ninja-build' <<<"$out" && fail "ninja reported missing: $out"
echo "ok: cmake 3.10.2 reported: $(grep '^cmake' <<<"$out" | cut -f2)"
out=$(detect "$work/badninja/bin:$venv:$PATH")
grep -q '^ninja-build	' <<<"$out" || fail "a ninja that fails not reported: $out"
[ "$(wc -l <<<"$out")" -eq 1 ] || fail "more than ninja reported: $out"
echo "ok: a broken ninja reported"

# 3. Libraries: found through a CMake package config under a PATH prefix, not without one.
found() {
  PATH="$1" bash -c "source '$ROOT/scripts/setup.sh'; fusejit_library_found 'no/such/header.h' FakeLib"
}
found "$venv:$PATH" && fail "FakeLib found before its package config exists"
mkdir -p "$work/venv/lib/cmake/FakeLib-1.2"
found "$venv:$PATH" || fail "FakeLib's config under $work/venv/lib/cmake not found"
mkdir -p "$work/venv/include/no/such" && touch "$work/venv/include/no/such/header.h"
rm -r "$work/venv/lib/cmake/FakeLib-1.2"
found "$venv:$PATH" || fail "a header under $work/venv/include not found"
echo "ok: libraries found through a package config or a header under a PATH prefix"

# 4. apt-get failing (no network): the set-up stops and says what is missing and how to get it.
set +e
msg=$(PATH="$work/apt/bin:$work/old/bin:$venv:$PATH" \
  bash -c "source '$ROOT/scripts/setup.sh'; fusejit_install_packages" 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "set-up went on although cmake is too old and apt-get fails: $msg"
grep -q 'could not be installed here' <<<"$msg" || fail "no explanation: $msg"
grep -q '^  cmake: .*pip install "cmake>=' <<<"$msg" || fail "cmake and how to get it not named: $msg"
grep -q 'apt-get install -y cmake' <<<"$msg" || fail "no apt-get line: $msg"
echo "ok: without apt the set-up stops with:"
sed 's/^/    /' <<<"$msg"
