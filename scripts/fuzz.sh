#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: the .npy reader, the problem-string parser and its round trip,
# the suite-file parser, the tune-cache reader, the image reader) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs each for SECONDS on a copy of its seed corpus (tests/fuzz/corpus).
#
#   scripts/fuzz.sh [SECONDS]        (default 30 a target; e.g. scripts/fuzz.sh 900 for a long run)
#
# Exits non-zero on any crash, leak, timeout (10 s an input), out-of-memory (2 GiB) or sanitizer report;
# the input that caused it is kept in build-fuzz/artifacts/TARGET/ (add it to tests/fuzz/corpus/TARGET/ as a
# regression once fixed). Prints one line per target: executions, coverage, corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-30}
scripts/install_deps.sh
pkgs=(clang-14 libfuzzer-14-dev libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
B=build-fuzz
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCONVKIT_FUZZ=ON -DCONVKIT_ENABLE_CUDA=OFF -DCONVKIT_BUILD_TESTS=OFF \
  -DCONVKIT_WITH_ONEDNN=OFF >/dev/null
targets=(npy problem suite tune_cache image)
cmake --build "$B" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rc=0
for t in "${targets[@]}"; do
  work=$B/corpus/$t art=$B/artifacts/$t/
  rm -rf "$work"; mkdir -p "$work" "$art"
  cp tests/fuzz/corpus/"$t"/* "$work"/
  dict=()
  [ -f tests/fuzz/"$t".dict ] && dict=(-dict=tests/fuzz/"$t".dict)
  log=$B/fuzz_$t.log
  if "$B"/tests/fuzz/fuzz_"$t" "$work" "${dict[@]}" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 \
       -malloc_limit_mb=2048 -artifact_prefix="$art" -print_final_stats=1 >"$log" 2>&1; then
    st=ok
  else
    st=FAIL; rc=1
  fi
  execs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo "?")
  echo "fuzz $t: $st, $execs executions, coverage $cov edges, corpus $(ls "$work" | wc -l) inputs"
  if [ "$st" = FAIL ]; then
    grep -E "ERROR|SUMMARY|property failed|runtime error|Test unit written" "$log" | head -10
  fi
done
exit $rc
