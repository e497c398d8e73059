#!/usr/bin/env bash
# Prepares the GPU check on a machine without a GPU: builds //tools/cuda_check:gpu_bundle
# (the CUDA tests and benchmarks with the shared libraries they load) and unpacks it into
# gpu_carry/ (git-ignored), ready to travel to a GPU machine, where
#   bash tools/cuda_check/run_gpu_check.sh gpu_carry
# runs it. See tools/cuda_check/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
./bazelw build //tools/cuda_check:gpu_bundle
rm -rf gpu_carry
mkdir gpu_carry
tar -xf bazel-bin/tools/cuda_check/gpu_bundle.tar -C gpu_carry
du -sh gpu_carry
