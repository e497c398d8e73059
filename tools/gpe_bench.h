// `gpe bench`: GroupPE's workloads beside the machine's limits and, where installed, the
// peers users would pick instead, all measured in this one run (timings differ between
// machines; only ratios taken together compare). The machine's FMA peak and triad, RoPE
// in place, the INR closed form (beside NumPy, tools/peers/inr_closed_form.py) and blended
// fit, then attention and RoPE beside PyTorch with the sweeps and plots
// (tools/bench_attention.h).
#ifndef TOOLS_GPE_BENCH_H_
#define TOOLS_GPE_BENCH_H_

#include <string>

namespace gpe {
namespace tools {

// quick: tiny sizes (a smoke run); peers: run the NumPy and PyTorch peers; out_dir: where
// bench.json and the plots go. Returns 0, or 1 when a GroupPE call fails (message on
// stderr).
int RunBench(bool quick, bool peers, const std::string& out_dir);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_BENCH_H_
