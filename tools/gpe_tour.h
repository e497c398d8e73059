// The parts of `gpe`'s main job that go beyond the group laws and the closed-form fits:
//
// - RunMainMlpFits: the analytic Spiral image (Lim et al., appendix D.1), 128 x 128,
//   fitted by a small MLP (3 hidden layers of 128, ReLU, 300 full-batch Adam steps) on the
//   [::2] training grid, as the closed-form fits are, with no encoding, Lim et al.'s T x T Fourier encoding
//   and their SO(2) Bessel encoding; prints train/test PSNR and time, writes PNGs.
// - RunMainAttention: a short attention benchmark through the C ABI
//   (gpe_attention_forward, float32, causal): no encoding, RoPE, ALiBi and GRAPE-M applied
//   inside the kernel; time, GFLOP/s and the fraction of the machine's FMA peak measured
//   in the same run, and each encoding's cost relative to plain attention.
//
// `quick` shrinks the sizes (for tests): the same code paths, a few seconds in all.
#ifndef TOOLS_GPE_TOUR_H_
#define TOOLS_GPE_TOUR_H_

#include <string>

namespace gpe {
namespace tools {

// Returns 0 on success, 1 when a fit fails or a PNG cannot be written (message on stderr).
int RunMainMlpFits(const std::string& out_dir, bool quick);

// Returns 0 on success, 1 when a call fails (message on stderr).
int RunMainAttention(bool quick);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_TOUR_H_
