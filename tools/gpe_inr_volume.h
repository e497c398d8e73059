// `gpe inr volume`: an analytic volume (Lim et al.'s Radial image, eq. 30, in 3D) fitted
// by the complex Gaussian embedder in closed form (3D mode-n products, inr/closed_form.h)
// on the [::2]^3 grid and, slice by slice, by the blended fit of random voxels
// (inr/blended.h); test PSNR and time, mid-z slices as PNGs.
#ifndef TOOLS_GPE_INR_VOLUME_H_
#define TOOLS_GPE_INR_VOLUME_H_

#include <string>
#include <vector>

namespace gpe {
namespace tools {

// args: the words after "volume". Returns the exit code: 0 done, 1 a run failed
// (message on stderr), 2 bad arguments (message and usage on stderr).
int RunVolume(const std::vector<std::string>& args);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_VOLUME_H_
