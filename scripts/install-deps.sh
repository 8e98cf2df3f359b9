#!/usr/bin/env bash
# Installs the Debian packages that cascade_rl's build, tests, benchmarks and examples
# use. A no-op (no network, no root needed) when every package is already present.
set -euo pipefail

packages=(
  cmake ninja-build g++       # the toolchain (present on a fresh machine of this kind)
  libgtest-dev                # GoogleTest, for tests/
  libbenchmark-dev            # Google Benchmark, for benchmarks/
  nlohmann-json3-dev          # JSON, for the reference-vector tests
  libeigen3-dev               # Eigen 3: the cascade demo's model, fused_linear_log_probs.hpp and its test and benchmark
  libtorch-dev                # libtorch (large, ~0.5 GB), the benchmarks' side-by-side comparison
  libopenmpi-dev openmpi-bin  # MPI, for cascade_rl::mpi and the multi-process tests
  clang-14 libclang-rt-14-dev # clang and its libFuzzer/sanitizer runtimes, for fuzz/
  libseccomp-dev              # libseccomp, the sandbox's syscall filter (cascade_rl/verify)
  python3-matplotlib          # the demo's figures (scripts/, run with /usr/bin/python3)
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  as_root=(sudo)
fi
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
