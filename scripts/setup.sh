# Shared set-up for scripts/demo and scripts/test (sourced, not run).
# Finds what the build needs; installs the Debian packages of what is missing (as root, through
# apt-get); when that cannot be done (not root, no apt-get, apt-get failing e.g. without a
# network) it says exactly what is missing and how to get it, and stops. Then configures and
# builds into $BUILD_DIR.
#
# What counts as present (so that a machine whose tools come from elsewhere, e.g. cmake and
# ninja from a Python environment on the PATH, needs no apt-get):
#   tools      on the PATH (`command -v`): cmake at least the version CMakeLists.txt requires,
#              ninja (any version), g++ (or $CXX);
#   libraries  a header of theirs in a standard include dir (/usr/include, /usr/local/include,
#              $CPATH, PREFIX/include for PREFIX in $CMAKE_PREFIX_PATH or the parent of a bin
#              dir on the PATH), or a CMake package config under one of those prefixes (as
#              find_package looks: PREFIX/lib*/cmake/NAME*, PREFIX/share/cmake/NAME*, ...).
# FUSEJIT_SETUP_DRY_RUN=1: report what is missing, install nothing, go on.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BUILD_TYPE=${BUILD_TYPE:-Release}

# Debian package -> "headers (one suffices)|CMake package names (one suffices)|how else to get it".
declare -A FUSEJIT_LIBRARIES=(
  [catch2]="catch2/catch.hpp catch2/catch_all.hpp|Catch2|Catch2 v2 or v3 from github.com/catchorg/Catch2, installed where CMake finds it"
  [libspdlog-dev]="spdlog/spdlog.h|spdlog|spdlog from github.com/gabime/spdlog"
  [libfmt-dev]="fmt/format.h|fmt|fmt from github.com/fmtlib/fmt"
  [libdlpack-dev]="dlpack/dlpack.h|dlpack|the header dlpack/dlpack.h from github.com/dmlc/dlpack"
  [libcli11-dev]="CLI/CLI.hpp|CLI11|CLI11 from github.com/CLIUtils/CLI11"
  [libxxhash-dev]="xxhash.h|xxHash|xxHash from github.com/Cyan4973/xxHash"
  [nlohmann-json3-dev]="nlohmann/json.hpp|nlohmann_json|nlohmann-json from github.com/nlohmann/json"
)

# The cmake version CMakeLists.txt requires (cmake_minimum_required).
fusejit_cmake_required() {
  sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt" | head -n 1
}

# True when version $1 >= version $2.
fusejit_version_at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

# Install prefixes to look under: $CMAKE_PREFIX_PATH, the parents of bin dirs on the PATH (as
# find_package does), /usr/local, /usr.
fusejit_prefixes() {
  local p
  local IFS=:
  for p in ${CMAKE_PREFIX_PATH:-}; do [ -n "$p" ] && echo "$p"; done
  for p in ${PATH:-}; do
    case "$p" in */bin) echo "${p%/bin}" ;; esac
  done
  echo /usr/local
  echo /usr
}

# True when one of the headers (space-separated) or CMake packages (space-separated) is found.
fusejit_library_found() {
  local headers=$1 packages=$2 dir h prefix name d
  local dirs=()
  local IFS=:
  for dir in ${CPATH:-}; do [ -n "$dir" ] && dirs+=("$dir"); done
  IFS=$'\n'
  for prefix in $(fusejit_prefixes); do dirs+=("$prefix/include"); done
  IFS=' '
  for dir in "${dirs[@]}"; do
    for h in $headers; do [ -f "$dir/$h" ] && return 0; done
  done
  IFS=$'\n'
  for prefix in $(fusejit_prefixes); do
    IFS=' '
    for name in $packages; do
      for d in "$prefix"/lib*/cmake/"$name"* "$prefix"/lib*/*/cmake/"$name"* \
               "$prefix"/share/cmake/"$name"* "$prefix"/share/"$name"*/cmake "$prefix"/"$name"*/cmake; do
        [ -d "$d" ] && return 0
      done
    done
    IFS=$'\n'
  done
  return 1
}

# Prints one line per missing Debian package: "PACKAGE<TAB>what is wrong; how else to get it".
fusejit_missing_packages() {
  local need have cxx pkg headers packages rest hint
  need=$(fusejit_cmake_required)
  if ! command -v cmake >/dev/null; then
    printf 'cmake\tno cmake on the PATH; or: pip install "cmake>=%s"\n' "$need"
  else
    have=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p' | head -n 1)
    if [ -z "$have" ] || ! fusejit_version_at_least "$have" "$need"; then
      printf 'cmake\t%s is cmake %s, older than the %s CMakeLists.txt requires; or: pip install "cmake>=%s"\n' \
        "$(command -v cmake)" "${have:-of unknown version}" "$need" "$need"
    fi
  fi
  if ! command -v ninja >/dev/null || ! ninja --version >/dev/null 2>&1; then
    printf 'ninja-build\tno working ninja on the PATH; or: pip install ninja\n'
  fi
  cxx=${CXX:-g++}
  if ! command -v "$cxx" >/dev/null; then
    printf 'g++\tno C++ compiler %s on the PATH (C++20: g++ 12 or clang 14 and later)\n' "$cxx"
  fi
  for pkg in $(printf '%s\n' "${!FUSEJIT_LIBRARIES[@]}" | sort); do
    IFS='|' read -r headers packages hint <<<"${FUSEJIT_LIBRARIES[$pkg]}"
    if ! fusejit_library_found "$headers" "$packages"; then
      printf '%s\tnone of %s in the include dirs, no CMake package %s; or: %s\n' \
        "$pkg" "$headers" "$packages" "$hint"
    fi
  done
}

fusejit_install_packages() {
  local report wanted=()
  report=$(fusejit_missing_packages)
  if [ -n "$report" ]; then
    mapfile -t wanted < <(cut -f1 <<<"$report")
    if [ -n "${FUSEJIT_SETUP_DRY_RUN:-}" ]; then
      echo "fusejit: missing (dry run, nothing installed):"
      sed 's/^\([^\t]*\)\t/  \1: /' <<<"$report"
    elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null &&
         { echo "fusejit: installing ${wanted[*]}"
           apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}" >/dev/null; }; then
      :
    else
      echo "fusejit: the build needs what follows, and it could not be installed here" >&2
      if [ "$(id -u)" -ne 0 ]; then echo "  (not root, so apt-get was not tried)" >&2
      elif ! command -v apt-get >/dev/null; then echo "  (no apt-get on this machine)" >&2
      else echo "  (apt-get failed, above: no network, or no such package?)" >&2
      fi
      sed 's/^\([^\t]*\)\t/  \1: /' <<<"$report" >&2
      echo "Install them (Debian/Ubuntu, as root):" >&2
      echo "  apt-get update && apt-get install -y ${wanted[*]}" >&2
      echo "or get each the other way named above, then run this again." >&2
      exit 1
    fi
  fi
  fusejit_optional_tools
  if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "fusejit: the CUDA Toolkit (12.x or 13.x, with NVRTC and cuBLASLt) is required;" >&2
    echo "  install it from NVIDIA's packages so that /usr/local/cuda exists" >&2
    exit 1
  fi
}

# Optional tools, installed when missing and possible (root, apt-get), else gone without:
#   ccache      every build of scripts/demo, scripts/test and the sanitizer and fuzz builds
#               they start compiles through it (FUSEJIT_CCACHE=0 turns it off). The compile
#               commands are rewritten relative to the checkout (CCACHE_BASEDIR) and the
#               working directory is left out of the key (CCACHE_NOHASHDIR; only the sanitizer
#               builds carry debug info, whose paths may then name an earlier checkout), so that
#               a fresh clone in another folder, as CI makes, reuses the objects of the last
#               build of the same sources. The cache is fusejit's own, outside the clone
#               ($CCACHE_DIR, else $XDG_CACHE_HOME/fusejit-ccache or ~/.cache/fusejit-ccache);
#               without it, or cold, the build is the same, only slower.
#               CMAKE_CXX_COMPILER_LAUNCHER in the environment is what CMake reads when it
#               configures a new build directory.
#   pkg-config  the package test builds a consumer through fusejit.pc too.
fusejit_optional_tools() {
  local missing=() tool
  for tool in ccache pkg-config; do
    [ "$tool" = ccache ] && [ "${FUSEJIT_CCACHE:-1}" = 0 ] && continue
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ] && [ -z "${FUSEJIT_SETUP_DRY_RUN:-}" ] &&
     [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "fusejit: installing ${missing[*]} (optional)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
      echo "fusejit: ${missing[*]} could not be installed; going on without" >&2
  fi
  if [ "${FUSEJIT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=true
    export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fusejit-ccache}
    export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  fi
}

fusejit_build() {
  local extra=("$@")
  local cuda_root=/usr/local/cuda
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCUDAToolkit_ROOT="$cuda_root" "${extra[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# The Python package's environment (docs/python.md): a virtualenv at $FUSEJIT_VENV (default
# $BUILD_DIR-py/venv, ignored by git as every build dir) holding what building and testing the
# package need, from PyPI through pip: nanobind and scikit-build-core (the build, run without
# build isolation so that it downloads nothing), pytest, numpy and torch. Python's venv module
# and headers come from Debian (python3-venv, python3-dev) when the python3 on the PATH lacks
# them.
#
# PyPI's Linux x86-64 torch is its CUDA build: about 3 GB of wheels, 5.4 GB installed with its
# nvidia-* wheels (PyPI has no CPU-only torch for Linux x86-64; it runs on the CPU here). Its
# tests (DLPack with torch, the torch.compile backend) skip without it, so FUSEJIT_PY_TORCH
# decides: `auto` (the default) installs it when the venv's disk has room for the wheels and the
# install together (FUSEJIT_TORCH_FREE_GB, default 10) and otherwise goes on without it, saying
# so; `1` installs it whatever the room; `0` never does. The wheels are not kept in pip's cache
# (--no-cache-dir): a machine that runs CI once would carry 3 GB it never reads again.
# Sets FUSEJIT_PY_TORCH_NOTE to a few words when torch is missing, for the step's summary line.
FUSEJIT_PY_PACKAGES=(nanobind scikit-build-core pytest numpy)
fusejit_python_env() {
  FUSEJIT_VENV=${FUSEJIT_VENV:-$BUILD_DIR-py/venv}
  FUSEJIT_PY_TORCH_NOTE=
  local include
  include=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null || [ ! -f "$include/Python.h" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      echo "fusejit: installing python3-venv python3-dev (the Python package's build)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null
    else
      echo "fusejit: the Python step needs python3 with its venv module and headers" \
           "(Debian: apt-get install python3-venv python3-dev); or skip it: FUSEJIT_SKIP_PYTHON=1" >&2
      exit 1
    fi
  fi
  [ -x "$FUSEJIT_VENV/bin/python" ] || python3 -m venv "$FUSEJIT_VENV"
  local pip=("$FUSEJIT_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir)
  "${pip[@]}" "${FUSEJIT_PY_PACKAGES[@]}"

  local want=${FUSEJIT_PY_TORCH:-auto}
  case "$want" in
    auto | 0 | 1) ;;
    *) echo "fusejit: FUSEJIT_PY_TORCH is '$want'; use auto, 1 (always install torch) or 0 (never)" >&2
       exit 1 ;;
  esac
  if "$FUSEJIT_VENV/bin/python" -c 'import torch' 2>/dev/null; then
    return
  fi
  if [ "$want" = 0 ]; then
    FUSEJIT_PY_TORCH_NOTE="without torch (FUSEJIT_PY_TORCH=0)"
  else
    local need_gb=${FUSEJIT_TORCH_FREE_GB:-10} free_gb
    # pip unpacks the wheels in $TMPDIR; count the smaller of the two disks.
    free_gb=$(df -Pk "$FUSEJIT_VENV" "${TMPDIR:-/tmp}" | awk 'NR > 1 { if (min == "" || $4 < min) min = $4 }
                                                           END { printf "%d", min / 1048576 }')
    if [ "$want" = auto ] && [ "$free_gb" -lt "$need_gb" ]; then
      FUSEJIT_PY_TORCH_NOTE="without torch: ${free_gb} GB free, it needs ${need_gb}"
      echo "fusejit: not installing torch: ${free_gb} GB of disk free where it goes, and PyPI's torch" \
           "needs about ${need_gb} GB to download and install; its tests will skip." \
           "Free some disk, or set FUSEJIT_PY_TORCH=1 to install it anyway" \
           "(FUSEJIT_TORCH_FREE_GB sets the bar)" >&2
    elif ! "${pip[@]}" torch; then
      [ "$want" = auto ] || exit 1
      # A partial install would make `import torch` fail with something other than ImportError,
      # which pytest.importorskip does not skip; take it out and go on without it.
      "$FUSEJIT_VENV/bin/python" -m pip uninstall -q -y torch >/dev/null 2>&1 || true
      FUSEJIT_PY_TORCH_NOTE="without torch: its install failed"
      echo "fusejit: installing torch failed (above); going on without it, its tests will skip" >&2
    fi
  fi
}

# Builds the package into the venv: scikit-build-core runs CMake in $BUILD_DIR-py/build (kept, so
# that a second build is incremental), ccache as the other builds.
fusejit_python_install() {
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$FUSEJIT_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall -C build-dir="$BUILD_DIR-py/build" \
    -C cmake.define.CUDAToolkit_ROOT=/usr/local/cuda "$ROOT"
}
