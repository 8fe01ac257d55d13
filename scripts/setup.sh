# Shared set-up for scripts/demo and scripts/test (sourced, not run).
# Installs the Debian packages the build needs when they are missing (as root; otherwise prints
# the exact apt-get line and stops), then configures and builds into $BUILD_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BUILD_TYPE=${BUILD_TYPE:-Release}

# Debian package -> a file it installs, to tell whether it is there.
declare -A FUSEJIT_PACKAGES=(
  [cmake]=/usr/bin/cmake
  [ninja-build]=/usr/bin/ninja
  [g++]=/usr/bin/g++
  [catch2]=/usr/include/catch2/catch.hpp
  [libspdlog-dev]=/usr/include/spdlog/spdlog.h
  [libfmt-dev]=/usr/include/fmt/format.h
  [libdlpack-dev]=/usr/include/dlpack/dlpack.h
  [libcli11-dev]=/usr/include/CLI/CLI.hpp
  [libxxhash-dev]=/usr/include/xxhash.h
  [nlohmann-json3-dev]=/usr/include/nlohmann/json.hpp
)

fusejit_install_packages() {
  local missing=()
  for pkg in "${!FUSEJIT_PACKAGES[@]}"; do
    [ -e "${FUSEJIT_PACKAGES[$pkg]}" ] || missing+=("$pkg")
  done
  # Catch2 v3 from elsewhere (e.g. the GPU machine) also does.
  if [[ " ${missing[*]} " == *" catch2 "* ]] && ls /usr/local/lib*/cmake/Catch2 /usr/lib*/cmake/Catch2 >/dev/null 2>&1; then
    missing=("${missing[@]/catch2}")
  fi
  local wanted=()
  for m in "${missing[@]}"; do [ -n "$m" ] && wanted+=("$m"); done
  if [ ${#wanted[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      echo "fusejit: installing ${wanted[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}" >/dev/null
    else
      echo "fusejit: missing packages. Run as root:" >&2
      echo "  apt-get update && apt-get install -y ${wanted[*]}" >&2
      exit 1
    fi
  fi
  if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "fusejit: the CUDA Toolkit (12.x or 13.x, with NVRTC and cuBLASLt) is required;" >&2
    echo "  install it from NVIDIA's packages so that /usr/local/cuda exists" >&2
    exit 1
  fi
}

fusejit_build() {
  local extra=("$@")
  local cuda_root=/usr/local/cuda
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCUDAToolkit_ROOT="$cuda_root" "${extra[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}
