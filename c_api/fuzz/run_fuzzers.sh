#!/usr/bin/env bash
# Builds the C ABI's fuzz targets (c_api/fuzz/*_fuzzer.cc) with clang's libFuzzer
# (coverage-guided, with AddressSanitizer and UndefinedBehaviorSanitizer) and runs each
# for a bounded time:
#
#   c_api/fuzz/run_fuzzers.sh [seconds per target, default 20]
#
# Needs clang-14 and libclang-rt-14-dev (Debian 12; the runtime holds libFuzzer and the
# sanitizers); exits 0 with a SKIPPED message where they are missing. The library's
# sources are those of //c_api:gpe_impl (asked of Bazel), compiled here with clang, two
# at a time; objects and corpora live in $GPE_FUZZ_DIR (default: a temporary directory,
# removed at the end unless a target found something; a kept directory makes later runs
# recompile only changed sources). A crash, leak or
# slow input (over 25 s) leaves its input there as <target>-crash-* (or -leak-,
# -timeout-, -oom-) and fails the script. Inputs under c_api/fuzz/corpus/<target>/ (past
# findings, each named for what it found, and seeds of formats the harness parses, e.g.
# small PNG and JPEG files for inr) run first on every run; c_api/fuzz/<target>.dict, where
# it exists, is the target's libFuzzer dictionary.
#
# GPE_FUZZ_SEED fixes libFuzzer's random seed. CI sets it (.ci/run), so a submission meets
# the same mutation sequence a developer's seeded run met before it: CI's short runs are a
# regression check, not a lottery. Exploration is the unseeded long run, e.g.
# `c_api/fuzz/run_fuzzers.sh 300`, whose findings go into c_api/fuzz/corpus/ with the fix.
#
# Prints one line per target, "FUZZ PASSED: <target> ..." or "FUZZ FAILED: <target> ...",
# which .ci/run counts, then a summary.
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
  rm -rf "$probe"
  echo "SKIPPED: $cxx cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
  exit 0
fi
rm -rf "$probe"

dir="${GPE_FUZZ_DIR:-}"
if [[ -z "$dir" ]]; then
  # A temporary directory (objects and five ~140 MiB targets: about 1 GiB) is removed on
  # every exit except a finding, whose input it keeps.
  dir="$(mktemp -d)"
  keep_dir=0
  trap '[[ $keep_dir == 1 ]] || rm -rf "$dir"' EXIT
fi
mkdir -p "$dir/obj"
# The library's own sources (not the system libraries'): //pkg:file.cc -> pkg/file.cc.
mapfile -t srcs < <(./bazelw query 'kind("source file", deps(//c_api:gpe_impl))' 2>/dev/null |
  grep '^//' | grep '\.cc$' | sed 's|^//||; s|:|/|')
[[ ${#srcs[@]} -gt 0 ]] || { echo "FUZZ FAILED: no library sources from bazel query" >&2; exit 1; }
mapfile -t targets < <(ls c_api/fuzz/*_fuzzer.cc | sed 's|.*/||; s|_fuzzer\.cc$||')
absl=(absl_status absl_statusor absl_strings absl_str_format absl_span absl_synchronization absl_time)
# HWY_COMPILE_ONLY_STATIC: the Highway kernels for one instruction set only (the baseline
# the flags allow), not once per target: the fuzzers look for validation and indexing
# faults, which do not depend on the vector width, and every target runs under the
# sanitizers in the Bazel suite (--config=sanitize). attention/cpu/kernels.cc alone takes
# 427 s to compile for all targets with clang -O1 and ASan, 106 s for one.
# -gline-tables-only: a report needs file:line (symbolised stacks), not variables; full
# -g made the Eigen-heavy sources compile ~1.3x longer (as under --config=sanitize).
# -O0: CI's fuzzing is a seeded regression run (past findings and seeds first, then 20 s
# of mutation), so compile time counts more than executions per second: on a quiet
# 2-core host the 70 sources and 5 targets compile and link in 159 s at -O0 against
# ~430 s at -O1, while a 20 s run executes 3-8x fewer inputs (inr 4,239 against 33,176).
# Exploration belongs to the long unseeded runs, which may pass -O1 in GPE_FUZZ_CFLAGS.
cflags=(-std=c++17 ${GPE_FUZZ_CFLAGS:--O0} -gline-tables-only -fno-omit-frame-pointer -DEIGEN_MPL2_ONLY -DHWY_COMPILE_ONLY_STATIC=1
        -I. -Ic_api/include
        -I/usr/include/eigen3 -I/usr/include/x86_64-linux-gnu/openblas-pthread
        $(pkg-config --cflags "${absl[@]}"))
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
libs=($(pkg-config --libs "${absl[@]}" openblas libhwy libpng libjpeg) -lpthread)

start=$(date +%s)
echo "compiling ${#srcs[@]} library sources and ${#targets[@]} fuzz targets with $cxx into $dir/obj"
objs=()
commands=()
compile() {  # compile <source> <object>: queued unless the object is newer than the source
  if [[ ! -f "$2" || "$1" -nt "$2" || c_api/fuzz/fuzz_input.h -nt "$2" ]]; then
    commands+=("$cxx ${cflags[*]} ${san[*]} -fsanitize=fuzzer-no-link -c $1 -o $2")
  fi
}
for s in "${srcs[@]}"; do
  o="$dir/obj/$(echo "$s" | tr / _).o"
  objs+=("$o")
  compile "$s" "$o"
done
for t in "${targets[@]}"; do compile "c_api/fuzz/${t}_fuzzer.cc" "$dir/obj/fuzzer_$t.o"; done
# Two at a time (the machine's cores); a failed compile fails the script.
if ((${#commands[@]})); then
  if ! printf '%s\n' "${commands[@]}" | xargs -P 2 -I{} sh -c '{}'; then
    echo "FUZZ FAILED: compilation"
    exit 1
  fi
fi
printf '%s\n' "${targets[@]}" | xargs -P 2 -I{} "$cxx" "${san[@]}" -fsanitize=fuzzer \
  "$dir/obj/fuzzer_{}.o" "${objs[@]}" "${libs[@]}" -o "$dir/{}_fuzzer" ||
  { echo "FUZZ FAILED: linking"; exit 1; }
echo "compiled and linked in $(( $(date +%s) - start )) s"

# One target's run: its log in $dir/<target>.log, its exit status in $dir/<target>.rc.
fuzz_one() {
  local target="$1" rc=0
  mkdir -p "$dir/corpus_$target"
  rm -f "$dir/$target"-{crash,leak,timeout,oom}-*
  # Committed inputs (c_api/fuzz/corpus/<target>/: past findings, kept as regressions)
  # are read as a second corpus; new inputs go to the first.
  local seeds=()
  [[ -d "$root/c_api/fuzz/corpus/$target" ]] && seeds=("$root/c_api/fuzz/corpus/$target")
  # A dictionary of the format's tokens (c_api/fuzz/<target>.dict), where one exists.
  local dict=()
  [[ -f "$root/c_api/fuzz/$target.dict" ]] && dict=(-dict="$root/c_api/fuzz/$target.dict")
  (cd "$dir" && OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 \
     "./${target}_fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
     ${GPE_FUZZ_SEED:+-seed="$GPE_FUZZ_SEED"} ${dict[@]+"${dict[@]}"} \
     -artifact_prefix="$dir/$target-" -print_final_stats=1 "corpus_$target" \
     ${seeds[@]+"${seeds[@]}"} \
     >"$dir/$target.log" 2>&1) || rc=$?
  echo "$rc" >"$dir/$target.rc"
}

# Two targets at a time (each libFuzzer process is one thread; the machine has two
# cores): 5 x 20 s takes ~60 s instead of 100. Each target's fixed seed makes its run
# the same whichever target runs beside it.
echo "=== ${#targets[@]} targets, ${seconds} s of libFuzzer each, two at a time ==="
for target in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= 2 )); do wait -n || true; done
  fuzz_one "$target" &
done
wait

failed=()
for target in "${targets[@]}"; do
  echo "=== $target: ${seconds} s of libFuzzer ==="
  rc="$(cat "$dir/$target.rc" 2>/dev/null || echo missing)"
  grep -E '^#|DONE|ERROR|SUMMARY|stat::number_of_executed_units|stat::new_units_added|Test unit written' \
    "$dir/$target.log" | tail -8 || true
  runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$dir/$target.log" | grep -oE '[0-9]+$' || echo '?')"
  findings="$(ls "$dir/$target"-{crash,leak,timeout,oom}-* 2>/dev/null | tr '\n' ' ' || true)"
  if [[ $rc != 0 || -n "$findings" ]]; then
    tail -40 "$dir/$target.log"
    echo "FUZZ FAILED: $target (exit $rc) ${findings:+left $findings}"
    failed+=("$target")
  else
    echo "FUZZ PASSED: $target ($runs inputs in ${seconds} s)"
  fi
done
echo "fuzzing wall time: $(( $(date +%s) - start )) s"
if ((${#failed[@]})); then
  keep_dir=1
  echo "FAILED: ${failed[*]} (inputs kept in $dir)"
  exit 1
fi
echo "PASS: ${#targets[@]} fuzz targets ran ${seconds} s each without a finding"
