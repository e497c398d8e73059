// Wall-clock timing shared by the tools' measurements (gpe bench, bench_attention).
#ifndef GPE_MEASURE_TIMING_H_
#define GPE_MEASURE_TIMING_H_

#include <algorithm>
#include <chrono>

namespace gpe {
namespace measure {

// Best wall time of `reps` runs of fn, in seconds.
template <class Fn>
double BestSeconds(int reps, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

}  // namespace measure
}  // namespace gpe

#endif  // GPE_MEASURE_TIMING_H_
