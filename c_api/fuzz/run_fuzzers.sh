#!/usr/bin/env bash
# Builds the C ABI's fuzz targets with clang's libFuzzer (coverage-guided, with
# AddressSanitizer and UndefinedBehaviorSanitizer) and runs each for a bounded time:
#
#   c_api/fuzz/run_fuzzers.sh [seconds per target, default 20]
#
# Needs clang-14 and libclang-rt-14-dev (Debian 12; the runtime holds libFuzzer and the
# sanitizers); exits 0 with a message where they are missing. The library's sources are
# those of //c_api:gpe_impl (asked of Bazel), compiled here with clang; objects and the
# corpus live in $GPE_FUZZ_DIR (default: a temporary directory). A crash leaves its input
# in that directory and fails the script.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
seconds="${1:-20}"
cxx="$(command -v clang++-14 || command -v clang++ || true)"
if [[ -z "$cxx" ]]; then
  echo "SKIPPED: clang++ not found (apt-get install clang-14 libclang-rt-14-dev)"
  exit 0
fi
probe="$(mktemp -d)"
printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe/p.cc"
if ! "$cxx" -fsanitize=fuzzer,address "$probe/p.cc" -o "$probe/p" 2>/dev/null; then
  echo "SKIPPED: $cxx cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
  exit 0
fi
rm -rf "$probe"

dir="${GPE_FUZZ_DIR:-$(mktemp -d)}"
mkdir -p "$dir/obj"
# The library's own sources (not the system libraries'): //pkg:file.cc -> pkg/file.cc.
mapfile -t srcs < <(./bazelw query 'kind("source file", deps(//c_api:gpe_impl))' 2>/dev/null |
  grep '^//' | grep '\.cc$' | sed 's|^//||; s|:|/|')
[[ ${#srcs[@]} -gt 0 ]] || { echo "no sources from bazel query" >&2; exit 1; }
absl=(absl_status absl_statusor absl_strings absl_str_format absl_span absl_synchronization absl_time)
cflags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -DEIGEN_MPL2_ONLY -I. -Ic_api/include
        -I/usr/include/eigen3 -I/usr/include/x86_64-linux-gnu/openblas-pthread
        $(pkg-config --cflags "${absl[@]}"))
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
libs=($(pkg-config --libs "${absl[@]}" openblas) -lpthread)

echo "compiling ${#srcs[@]} library sources with $cxx into $dir/obj"
objs=()
commands=()
for s in "${srcs[@]}"; do
  o="$dir/obj/$(echo "$s" | tr / _).o"
  objs+=("$o")
  if [[ ! -f "$o" || "$s" -nt "$o" ]]; then
    commands+=("$cxx ${cflags[*]} ${san[*]} -fsanitize=fuzzer-no-link -c $s -o $o")
  fi
done
# Two at a time (the machine's cores); a failed compile fails the script.
if ((${#commands[@]})); then
  printf '%s\n' "${commands[@]}" | xargs -P 2 -I{} sh -c '{}'
fi

status=0
for target in attention options tensor; do
  bin="$dir/${target}_fuzzer"
  "$cxx" "${cflags[@]}" "${san[@]}" -fsanitize=fuzzer "c_api/fuzz/${target}_fuzzer.cc" "${objs[@]}" \
    "${libs[@]}" -o "$bin"
  mkdir -p "$dir/corpus_$target"
  echo "=== $target: ${seconds} s of libFuzzer ==="
  if ! (cd "$dir" && OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 \
        "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
        "corpus_$target" 2>&1 | grep -E '^#|DONE|ERROR|SUMMARY|stat::number_of_executed_units|stat::new_units_added|Test unit written' | tail -8); then
    status=1
  fi
  if ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* >/dev/null 2>&1; then
    echo "FAILED: $target left $(ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* 2>/dev/null | tr '\n' ' ')"
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "PASS: both fuzz targets ran ${seconds} s each without a finding"
exit $status
