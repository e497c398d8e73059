#!/usr/bin/env bash
# The AMX check (issue 20): on a CPU with AMX-BF16 (`amx_bf16` in /proc/cpuinfo), the
# opt-in tile path (CpuAttentionOptions::Bf16Arithmetic::kAmxTiles) on the hardware's
# tiles:
#  1. its tests, where TDPBF16PS itself is held bit for bit to the emulation the tests run
#     on every other CPU (kernels_amx_test's HardwareTileDotEqualsTheEmulation), and the
#     tile kernels and the forward against double sums and the reference;
#  2. the machine's limits (`gpe machine`) and BM_CpuForwardBf16 on the tiles (dot:2)
#     beside the dot products (dot:1), b1 h16 s4096 d128, 2 threads, with and without RoPE;
#     and BM_CpuForwardSplit: float32 as six or three bf16 products on the tiles
#     (Float32Arithmetic's split modes, terms:6 / terms:3) beside float32 FMAs (terms:0);
#  3. with --bench, `gpe bench` (PyTorch's SDPA beside every row; the bf16 forward gets a
#     row on the tiles where they are usable).
# Usage: tools/amx_check/run.sh [--bench]; exit 2 on a CPU without AMX-BF16.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if ! grep -qw amx_bf16 /proc/cpuinfo; then
  echo "amx_check: no amx_bf16 in /proc/cpuinfo: nothing to check on this CPU" >&2
  exit 2
fi
grep -m1 'model name' /proc/cpuinfo
./bazelw test -c opt --test_output=all //attention/cpu:kernels_amx_test \
  //attention/cpu:cpu_attention_test //attention/cpu:split_bf16_test
./bazelw run -c opt //tools:gpe -- machine
./bazelw run -c opt //attention/cpu:cpu_attention_benchmark -- \
  --benchmark_filter='BM_CpuForwardBf16/s:4096/causal:[01]/dot:[12]/threads:2/enc:[01]/|BM_CpuForwardSplit/' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
if [[ "${1:-}" == "--bench" ]]; then
  ./bazelw run -c opt //tools:gpe -- bench
fi
