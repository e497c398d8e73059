// `gpe inr-spiral`, `gpe inr-image FILE` (and the main job's INR table): Zheng et al.'s
// separable set-up (Table 1) on one image. A complex (Kronecker) shifted-basis encoding
// (Gaussian and triangle, two K each) and one linear layer solved in closed form per
// channel (inr/closed_form.h, ridge 1e-6), trained on the [::2] x [::2] grid and tested
// on the other three quarters of the pixels; prints PSNR and fit time, writes PNGs.
#ifndef TOOLS_GPE_SEPARABLE_FITS_H_
#define TOOLS_GPE_SEPARABLE_FITS_H_

#include <string>

namespace gpe {
namespace tools {

// Lim et al.'s analytic Spiral image (appendix D.1), 256 x 256; PNGs spiral_*.png in
// out_dir. Returns 0, or 1 when out_dir cannot be written (message on stderr).
int RunInrSpiral(const std::string& out_dir);

// A PNG file (per colour channel; grayscale first when `gray`); PNGs <stem>_*.png in
// out_dir. Returns 0, or 1 when the file cannot be read, is smaller than 4 x 4, or
// out_dir cannot be written (message on stderr).
int RunInrImage(const std::string& path, bool gray, const std::string& out_dir);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_SEPARABLE_FITS_H_
