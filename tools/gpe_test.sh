#!/usr/bin/env bash
# Runs the gpe tool as a user would and checks its exit codes and output.
set -uo pipefail
gpe="$(realpath "$1")"
fail() { echo "FAIL: $*"; exit 1; }
# The main job writes its pictures under ./gpe_out: keep them in the test's scratch space.
cd "${TEST_TMPDIR:-$(mktemp -d)}" || fail "no scratch directory"

# The main job at --quick sizes (the same code paths as the full run, in seconds).
out="$("$gpe" --quick)" || fail "the main job exited $?: $out"
grep -q "All group laws hold." <<<"$out" || fail "main job output lacks the verdict: $out"
grep -q "^GroupPE 0\." <<<"$out" || fail "main job output lacks the version: $out"
# gpe version, --version and -V print one line, the same.
v="$("$gpe" version)" || fail "gpe version exited $?"
grep -qE "^GroupPE [0-9]+\.[0-9]+\.[0-9]+ \(header [0-9]+\.[0-9]+\.[0-9]+\)$" <<<"$v" ||
  fail "gpe version printed '$v'"
[[ "$("$gpe" --version)" == "$v" && "$("$gpe" -V)" == "$v" ]] || fail "gpe --version / -V differ from gpe version"
# Every law row passed; a FAIL row would also have made the exit code non-zero.
if grep -q "FAIL" <<<"$out"; then fail "a law failed: $out"; fi

# The closed-form INR fits ran and wrote their pictures.
grep -qE "^\| gaussian \| 128 \|" <<<"$out" || fail "main job lacks the INR table: $out"
[[ -s gpe_out/spiral_truth.png && -s gpe_out/spiral_gaussian_k128.png ]] || fail "no PNGs written"
# The MLP fits (one row per encoding, finite PSNRs) and their pictures.
for row in "none \(x, y\)" "T x T Fourier" "SO\(2\) Bessel"; do
  grep -qE "^\| $row[^|]* \| [0-9]+ \| -?[0-9.]+ \| -?[0-9.]+ \| [0-9.]+ \| spiral_mlp_[0-9].png \|$" <<<"$out" \
    || fail "main job lacks the MLP row '$row': $out"
done
[[ -s gpe_out/spiral_mlp_2.png ]] || fail "no MLP picture written"
# The short attention benchmark: a row per encoding inside the kernel, with a time.
for row in "no positional encoding" "RoPE" "ALiBi" "GRAPE-M"; do
  grep -qE "^\| $row[^|]* \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [-+][0-9.]+% \|$" <<<"$out" \
    || fail "main job lacks the attention row '$row': $out"
done
"$gpe" --quick extra >/dev/null 2>&1 && fail "the main job accepted an extra argument"
"$gpe" inr-spiral --out "$PWD/elsewhere" >/dev/null || fail "inr-spiral --out failed"
[[ -s elsewhere/spiral_triangle_k64.png ]] || fail "inr-spiral ignored --out"
# A reconstruction that cannot be written (a directory in its place) fails the command;
# it printed "(not written)" and exited 0.
mkdir -p blocked/spiral_gaussian_k64.png
"$gpe" inr-spiral --out "$PWD/blocked" >/dev/null 2>&1; rc=$?
[[ $rc -eq 1 ]] || fail "inr-spiral with an unwritable picture exited $rc, expected 1"

# A user's PNG: the Spiral truth written above, read back as an RGB image.
out="$("$gpe" inr-image gpe_out/spiral_truth.png --out "$PWD/img")" || fail "inr-image failed: $out"
grep -q "3 channel(s)" <<<"$out" || fail "inr-image did not read RGB: $out"
[[ -s img/spiral_truth_triangle_k64.png ]] || fail "inr-image wrote no reconstruction"
"$gpe" inr-image missing.png >/dev/null 2>&1 && fail "inr-image accepted a missing file"
# A missing image is a failed run (exit 1), not a crash.
"$gpe" inr lim-table2 --quick --cameraman missing.png >/dev/null 2>&1; rc=$?
[[ $rc -eq 1 ]] || fail "lim-table2 with a missing image exited $rc, expected 1"

# The papers' tables at --quick sizes: tables and pictures written, a user's image used.
out="$("$gpe" inr lim-table2 --quick --seeds 2 --cameraman gpe_out/spiral_truth.png \
        --tasks cameraman,radial_field --out "$PWD/lim")" || fail "lim-table2 failed: $out"
grep -qE "^\| SO\(2\) \| [0-9.]+ \+- [0-9.]+ \| [0-9.]+ \+- [0-9.]+ \|$" <<<"$out" \
  || fail "lim-table2 lacks the SO(2) row: $out"
grep -q "seed 1: test MSE" <<<"$out" || fail "lim-table2 printed no progress: $out"
[[ -s lim/table2.md && -s lim/cameraman_so2.png && -s lim/radial_field_txt.png ]] \
  || fail "lim-table2 wrote no table or pictures"
out="$("$gpe" inr zheng-table1 --quick --no-mlp --out "$PWD/zheng")" || fail "zheng-table1 failed: $out"
grep -qE "^\| complex \+ linear \(closed form\) \| Gau \| [0-9.]+ \+- [0-9.]+ \|" <<<"$out" \
  || fail "zheng-table1 lacks the closed-form row: $out"
[[ -s zheng/table1.md && -s zheng/radial_complex_gd_Tri.png ]] || fail "zheng-table1 wrote nothing"
out="$("$gpe" inr zheng-table1 gpe_out/spiral_truth.png --quick --out "$PWD/zheng_file")" \
  || fail "zheng-table1 on a file failed: $out"
grep -q "simple + MLP (Adam) | RFF" <<<"$out" || fail "zheng-table1 lacks the MLP rows: $out"
out="$("$gpe" inr volume --quick --out "$PWD/vol" 2>/dev/null)" || fail "volume failed: $out"
grep -qE "^\| closed form 3D .*\| [0-9.]+ \| [0-9.]+ \|$" <<<"$out" || fail "volume lacks its rows: $out"
grep -qE "^\| blended, per z-slice .*\| [0-9.]+ \| [0-9.]+ \|$" <<<"$out" || fail "volume lacks its rows: $out"
[[ -s vol/closed_form_midz.png && -s vol/blended_midz.png ]] || fail "volume wrote no slices"
for sub in "" "lim-table2" "zheng-table1" "volume"; do
  # shellcheck disable=SC2086
  "$gpe" inr $sub --help | grep -q "usage: gpe inr" || fail "'gpe inr $sub --help' prints no usage"
done

out="$("$gpe" bench --quick --no-peers)" || fail "bench --quick failed: $out"
grep -q "| RoPE in place" <<<"$out" || fail "bench lacks the RoPE row: $out"
grep -q "| INR closed form" <<<"$out" || fail "bench lacks the INR row: $out"
# The attention harness (tools/bench_attention.h): every row with its time, peers marked
# as not run, and the sweeps' JSON for the plots. ('|' escaped: a table cell boundary.)
for row in "attention fwd f32 [^|]* d64 \\| [0-9.]+ ms" "attention fwd f32 [^|]* causal \\| [0-9.]+ ms" \
           "attention fwd f32 [^|]*, RoPE in kernel \\| [0-9.]+ ms" \
           "attention bwd f32 [^|]* \\| [0-9.]+ ms" "attention fwd bf16 [^|]* \\| [0-9.]+ ms" \
           "decode f32 [^|]*\\(GQA, bshd cache\\) \\| [0-9.]+ ms" \
           "decode f32 [^|]*\\(GQA, bhsd cache\\) \\| [0-9.]+ ms" \
           "decode bf16 q, paged bf16 cache [^|]* \\| [0-9.]+ ms" \
           "memory: attention [^|]* causal \\| .* floats per token x d" \
           "scaling: attention [^|]* threads vs 1 \\| [0-9.]+ ms vs [0-9.]+ ms" \
           "RoPE on q and k, [^|]* \\| [0-9.]+ ms, [0-9.]+ GB/s"; do
  grep -qE "^\| $row" <<<"$out" || fail "bench lacks the row '$row': $out"
done
grep -q "not run (--no-peers)" <<<"$out" || fail "bench ran the peers under --no-peers: $out"
[[ $(grep -c "^| [0-9]* | \(yes\|no\) | [0-9.]* |" <<<"$out") -eq 6 ]] || fail "bench lacks the sweep: $out"
grep -q '"attention_sweep": \[' gpe_out/bench.json || fail "bench wrote no bench.json"
grep -q "plot_bench: " <<<"$out" || fail "bench says nothing about its plots: $out"

out="$("$gpe" check-groups --seed 7 --trials 5)" || fail "check-groups exited $?"
grep -q "seed 7, 5 trials" <<<"$out" || fail "check-groups ignored its options: $out"

"$gpe" --help | grep -q "usage: gpe" || fail "--help prints no usage"

for bad in "frobnicate" "check-groups --trials 0" "check-groups --trials x" "check-groups --seed" \
           "inr-spiral --out" "inr-spiral --bogus" "inr-image" "inr-image a.png --bogus" "bench --slow" \
           "inr" "inr frobnicate" "inr lim-table2 --seeds 0" "inr lim-table2 --seeds x" \
           "inr lim-table2 --steps" "inr lim-table2 --tasks nothing" "inr lim-table2 --lr -1" \
           "inr zheng-table1 --size 15" "inr zheng-table1 --lambda nan" "inr zheng-table1 --rcond 1" "inr zheng-table1 --bogus" \
           "inr volume --size 9" "inr volume --fraction 0" "inr volume --fraction 2" "inr volume x" \
           "machine --threads 1" "version --bogus"; do
  # shellcheck disable=SC2086
  err="$("$gpe" $bad 2>&1)"; rc=$?
  [[ $rc -eq 2 ]] || fail "'gpe $bad' exited $rc, expected 2"
  [[ -n "$err" ]] || fail "'gpe $bad' printed no message"
done
# Empty words (an unset shell variable): not the main job, not the default directory.
"$gpe" "" >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] || fail "'gpe \"\"' exited $rc, expected 2"
for cmd in "inr-spiral" "inr-image gpe_out/spiral_truth.png" "inr volume" "inr zheng-table1" \
           "inr lim-table2"; do
  # shellcheck disable=SC2086
  "$gpe" $cmd --out "" >/dev/null 2>&1; rc=$?
  [[ $rc -eq 2 ]] || fail "'gpe $cmd --out \"\"' exited $rc, expected 2"
done
echo "PASS"
