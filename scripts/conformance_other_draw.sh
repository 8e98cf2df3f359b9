#!/usr/bin/env bash
# Runs the peer-conformance tests against a draw of the reference vectors made with
# another seed, so that the suite is never tuned to the draw tests/reference ships
# (seed 1). The generators are the team's (../shared/refgen, see its README); they run
# the peers' own code, read from bare git mirrors of veRL, TRL and NeMo-RL. The draw and
# its build live under a scratch directory, never in the repository.
#
#   scripts/conformance_other_draw.sh --refgen <refgen dir> --verl <bare verl git dir> \
#       --trl <bare trl git dir> --nemo <bare NeMo-RL git dir> --seed <N> [--work <dir>]
#
# Needs Debian's python3-torch (run by /usr/bin/python3). Prints each test's verdict and
# the coverage lines of branches this draw does not exercise; exits non-zero on any
# value mismatch.
set -euo pipefail

refgen="" verl="" trl="" nemo="" seed="" work=""
while (($#)); do
  case "$1" in
    --refgen) refgen="$2"; shift 2 ;;
    --verl) verl="$2"; shift 2 ;;
    --trl) trl="$2"; shift 2 ;;
    --nemo) nemo="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) echo "conformance_other_draw: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for name in refgen verl trl nemo seed; do
  if [[ -z "${!name}" ]]; then
    echo "conformance_other_draw: --$name is required" >&2
    exit 2
  fi
done
if [[ "$seed" == 1 ]]; then
  echo "conformance_other_draw: seed 1 is the shipped draw; pick another" >&2
  exit 2
fi

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${work:-$(mktemp -d "${TMPDIR:-/tmp}/cascade_rl_draw.XXXXXX")}
draw="$work/reference_seed_$seed"
mkdir -p "$draw"

/usr/bin/python3 "$refgen/gen_v2.py" --repo "$verl" --work "$work/verl_work" --seed "$seed" \
  --out "$draw/verl_core_algos_v2.json"
/usr/bin/python3 "$refgen/gen_trl_nemo.py" --trl "$trl" --nemo "$nemo" --seed "$seed" \
  --out "$draw/trl_nemo_rl.json"
# The first veRL file has no generator of its own; it is the shipped one.
cp "$source_dir/tests/reference/verl_core_algos.json" "$draw/"

build="$work/build"
cmake -S "$source_dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCASCADE_RL_REFERENCE_DIR="$draw" -DCASCADE_RL_BUILD_BENCHMARKS=OFF \
  -DCASCADE_RL_BUILD_EXAMPLES=OFF -DCASCADE_RL_WITH_CUDA=OFF -DCASCADE_RL_WITH_MPI=OFF \
  -DCASCADE_RL_WITH_NCCL=OFF >/dev/null

# Every test file that reads a reference file (tests/support/reference.hpp), by the
# ctest names of its cases: tests/algorithms/test_<stem>.cpp -> algorithms_<stem>.*
mapfile -t readers < <(grep -l -E 'support/(reference|verl_v2_case|peer_loss_case)\.hpp' \
  "$source_dir"/tests/algorithms/test_*.cpp)
stems=()
for file in "${readers[@]}"; do
  stem=$(basename "$file" .cpp)
  stems+=("${stem#test_}")
done
pattern="^algorithms_($(IFS='|'; echo "${stems[*]}"))\\."
# The algorithms area's test executable (one per area), or one per file where a build
# tree still makes them.
if cmake --build "$build" --target help | grep -q '^algorithms_tests:'; then
  cmake --build "$build" --target algorithms_tests
else
  cmake --build "$build" --target "${stems[@]/#/algorithms_}"
fi

status=0
ctest --test-dir "$build" -R "$pattern" --output-on-failure -j "$(nproc)" || status=1
grep -h '^\[ COVERAGE \]' "$build/Testing/Temporary/LastTest.log" | sort -u || true
echo "draw: $draw"
exit "$status"
