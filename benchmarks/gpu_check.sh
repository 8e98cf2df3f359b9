#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: configure (the test preset's settings, in its own
# build dir), build the CUDA tests and GPU benchmarks, run every `gpu`-labelled test,
# compare the device's loss results with the host's bit for bit, then run the GPU
# benchmarks, which print each kernel's achieved bandwidth as a fraction of the
# device's peak. Exits non-zero when the build or a gpu test fails.
#
#   benchmarks/gpu_check.sh [build-dir]     (default: build/gpu-check)
#   CASCADE_RL_PEAK_GBPS=4800 overrides the peak; JOBS=N sets the build parallelism.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${1:-build/gpu-check}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
start=$SECONDS

say() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - start))"; }
die() { printf 'gpu_check: %s\n' "$*" >&2; exit 1; }

command -v cmake >/dev/null || die "cmake not found"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
  echo "gpu_check: nvidia-smi not found (continuing; the tests ask the CUDA runtime)"
fi

say "configure ${build_dir}"
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Werror" \
  -DCASCADE_RL_WITH_CUDA=ON -DCASCADE_RL_BUILD_EXAMPLES=OFF \
  || die "configure failed (is nvcc on PATH or CMAKE_CUDA_COMPILER set?)"

say "build the CUDA tests and GPU benchmarks"
cmake --build "$build_dir" -j "$jobs" --target cuda_executors cascade_rl_gpu_benchmarks \
  || die "build failed"

say "gpu tests"
# A skipped test means no usable device: treat that as a failure here.
log="$build_dir/gpu_check_ctest.log"
if ! ctest --test-dir "$build_dir" -L '^gpu$' -LE '^bitwise$' --no-tests=error --output-on-failure --timeout 120 | tee "$log"; then
  die "a gpu test failed (see $log)"
fi
if grep -q "Skipped" "$log"; then
  die "gpu tests were skipped: no CUDA device visible to the runtime"
fi

say "bitwise: the device's losses, advantages, returns and whitening against the host's bits"
log="$build_dir/gpu_check_bitwise.log"
if ! ctest --test-dir "$build_dir" -R '^bitwise\.cuda_executors$' --no-tests=error --output-on-failure --timeout 120 | tee "$log"; then
  die "the device's bits differ from the host's (see $log)"
fi
if grep -q "Skipped" "$log"; then
  die "the bitwise device test was skipped: no CUDA device visible to the runtime"
fi

say "gpu benchmarks"
bench_status=0
timeout 180 "$build_dir/benchmarks/gpu/cascade_rl_gpu_benchmarks" || bench_status=$?
if [[ $bench_status -ne 0 ]]; then
  die "the GPU benchmarks failed (exit $bench_status)"
fi

say "done"
