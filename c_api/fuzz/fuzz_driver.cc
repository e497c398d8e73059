// A bounded stand-in for libFuzzer's driver, so the fuzz targets run under `bazel test`
// (and under the sanitizer configuration) with the project's GCC toolchain: it feeds
// LLVMFuzzerTestOneInput a fixed number of pseudo-random inputs from a fixed seed, biased
// like libFuzzer's early corpus (short inputs, runs of equal bytes, extreme values). No
// coverage feedback: c_api/fuzz/run_fuzzers.sh runs the real libFuzzer (clang).
//
// Usage: fuzz_driver [iterations]   (default 20000)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 20000;
  std::mt19937_64 rng(0x6770655f66757a7aULL);
  std::vector<uint8_t> input;
  for (long i = 0; i < iterations; ++i) {
    input.resize(rng() % 256);
    const uint64_t style = rng() % 4;
    for (size_t j = 0; j < input.size(); ++j) {
      switch (style) {
        case 0: input[j] = static_cast<uint8_t>(rng()); break;
        case 1: input[j] = (j % 8 == 0) ? static_cast<uint8_t>(rng()) : 0; break;  // small ints
        case 2: input[j] = (rng() % 2) ? 0xff : 0x00; break;                      // extremes
        default: input[j] = static_cast<uint8_t>(rng() % 16); break;              // small bytes
      }
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("%ld inputs, no failure\n", iterations);
  return 0;
}
