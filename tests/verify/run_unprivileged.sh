#!/bin/sh
# Runs sandbox test binaries as a user that is not root (issue 18), so that the sandbox
# takes its unprivileged path: an unprivileged user namespace instead of a uid change.
#
#   run_unprivileged.sh <uid> <with-cgroups|no-cgroups> <gtest filter> <test binary>...
#
# Only the binaries' cases that the --gtest_filter selects run (tests/verify/tests.cmake
# passes the suites of the sandbox's test files).
# As root (CI): the tests run as <uid> (no passwd entry needed) with no supplementary
# groups, through setpriv. with-cgroups first delegates a cgroup directory to <uid>, as
# an administrator would for a trainer that is not root (cgroup v1: one under each of
# memory, cpuacct and pids; v2: one under the unified hierarchy, the tests in a leaf of
# it since v2 moves a process only within a subtree its owner may write), and passes it
# as CASCADE_RL_TEST_CGROUP_PARENT; no-cgroups leaves the user without any, the common
# case on a v1 machine. Binaries and a private TMPDIR go to a directory <uid> can enter.
# Everything made here is removed on exit. Not root: the binaries run as they are.
# Each test case runs in a process of its own, as ctest runs them (support.hpp's
# watchdog is per process). Exit status 77 (ctest: skipped): no setpriv, or no
# unprivileged user namespaces on this machine.
set -eu
uid=$1
mode=$2
filter=$3
shift 3

work=$(mktemp -d "${TMPDIR:-/tmp}/cascade_rl_unprivileged_XXXXXX")
cgroup_name=""
cleanup() {
  status=$?
  if [ -n "$cgroup_name" ]; then
    if [ -d "/sys/fs/cgroup/$cgroup_name/tests" ]; then  # v2: out of the leaf first
      echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null || true
      rmdir "/sys/fs/cgroup/$cgroup_name/tests" 2>/dev/null || true
    fi
    for dir in "/sys/fs/cgroup/$cgroup_name" /sys/fs/cgroup/memory/"$cgroup_name" \
               /sys/fs/cgroup/cpuacct/"$cgroup_name" /sys/fs/cgroup/pids/"$cgroup_name"; do
      if [ -d "$dir" ]; then rmdir "$dir" || { echo "run_unprivileged: $dir left behind"; status=1; }; fi
    done
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT INT TERM

as_user=""
if [ "$(id -u)" -eq 0 ]; then
  if ! command -v setpriv >/dev/null; then echo "run_unprivileged: no setpriv"; exit 77; fi
  as_user="setpriv --reuid=$uid --regid=$uid --clear-groups"
  mkdir "$work/bin" "$work/tmp"
  for binary in "$@"; do cp "$binary" "$work/bin/"; done
  chmod 755 "$work" "$work/bin" "$work/bin/"*
  chown "$uid:$uid" "$work/tmp"
  chmod 700 "$work/tmp"
  if command -v unshare >/dev/null && ! $as_user unshare --user true 2>/dev/null; then
    echo "run_unprivileged: unprivileged user namespaces are off here"
    exit 77
  fi
  if [ "$mode" = with-cgroups ]; then
    cgroup_name=cascade_rl_unprivileged_$$
    if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
      echo "+memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
      mkdir "/sys/fs/cgroup/$cgroup_name"
      echo "+memory +pids" > "/sys/fs/cgroup/$cgroup_name/cgroup.subtree_control"
      mkdir "/sys/fs/cgroup/$cgroup_name/tests"
      chown "$uid:$uid" "/sys/fs/cgroup/$cgroup_name" "/sys/fs/cgroup/$cgroup_name/cgroup.procs" \
        "/sys/fs/cgroup/$cgroup_name/cgroup.subtree_control" "/sys/fs/cgroup/$cgroup_name/cgroup.threads"
      chown -R "$uid:$uid" "/sys/fs/cgroup/$cgroup_name/tests"
      echo $$ > "/sys/fs/cgroup/$cgroup_name/tests/cgroup.procs"
    else
      for controller in memory cpuacct pids; do
        if [ -d "/sys/fs/cgroup/$controller" ]; then
          mkdir "/sys/fs/cgroup/$controller/$cgroup_name"
          chown -R "$uid:$uid" "/sys/fs/cgroup/$controller/$cgroup_name"
        fi
      done
    fi
    export CASCADE_RL_TEST_CGROUP_PARENT="$cgroup_name"
  fi
  export TMPDIR="$work/tmp" HOME="$work/tmp"
  # A sanitizer build's LSan suppressions, where <uid> can read them.
  supp=$(printf '%s\n' "${LSAN_OPTIONS:-}" | tr ':' '\n' | sed -n 's/^suppressions=//p' | head -n 1)
  if [ -n "$supp" ] && [ -r "$supp" ]; then
    cp "$supp" "$work/lsan.supp"
    chmod 644 "$work/lsan.supp"
    LSAN_OPTIONS=$(printf '%s' "$LSAN_OPTIONS" | sed "s#suppressions=$supp#suppressions=$work/lsan.supp#")
    export LSAN_OPTIONS
  fi
  set -- "$work"/bin/*
fi

failed=0
passed=0
skipped=0
for binary in "$@"; do
  cases=$($as_user "$binary" --gtest_list_tests --gtest_filter="$filter" | while IFS= read -r line; do
    case "$line" in
      "  "*) name=${line#  }; echo "$suite${name%%  #*}" ;;
      *.) suite=$line ;;
    esac
  done)
  for case_name in $cases; do
    if output=$($as_user "$binary" --gtest_filter="$case_name" 2>&1); then
      if echo "$output" | grep -q "\[  SKIPPED \]"; then
        skipped=$((skipped + 1))
        echo "skipped $case_name: $(echo "$output" | grep -A1 ": Skipped" | tail -1 | cut -c1-160)"
      else
        passed=$((passed + 1))
        # What the tests print (times, sizes), without the sandbox's warnings.
        echo "$output" | grep -vE "^(Running main|Note: Google Test filter|\[|$)|WARNING" || true
      fi
    else
      failed=$((failed + 1))
      echo "FAILED $case_name (as uid $(if [ -n "$as_user" ]; then echo "$uid"; else id -u; fi)):"
      echo "$output"
    fi
  done
done
echo "run_unprivileged ($mode): $passed passed, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
