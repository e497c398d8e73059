// Wall-clock timing shared by the tools' measurements (gpe bench, bench_attention).
#ifndef GPE_MEASURE_TIMING_H_
#define GPE_MEASURE_TIMING_H_

#include <algorithm>
#include <chrono>
#include <limits>

namespace gpe {
namespace measure {

// Best wall time of `reps` runs of fn, in seconds. reps < 1 runs nothing and returns NaN:
// no run, no time (a sentinel such as 1e300 read as a time passed every check downstream).
template <class Fn>
double BestSeconds(int reps, Fn fn) {
  if (reps < 1) return std::numeric_limits<double>::quiet_NaN();
  double best = std::numeric_limits<double>::infinity();
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
