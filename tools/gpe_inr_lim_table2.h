// `gpe inr lim-table2`: Lim et al.'s Table 2 (section 5, appendix D) on this machine. An
// MLP (3 hidden ReLU layers, full-batch Adam) on 5% random pixels of a grid over
// [-1, 1]^2, with no encoding, the T x T Fourier encoding and the SO(2) Bessel encoding;
// test MSE mean and std over seeds for the Radial and Spiral images and vector fields (and
// Cameraman and Retina when given). Writes table2.md and PNGs.
#ifndef TOOLS_GPE_INR_LIM_TABLE2_H_
#define TOOLS_GPE_INR_LIM_TABLE2_H_

#include <string>
#include <vector>

namespace gpe {
namespace tools {

// args: the words after "lim-table2". Returns the exit code: 0 done, 1 a run failed
// (message on stderr), 2 bad arguments (message and usage on stderr).
int RunLimTable2(const std::vector<std::string>& args);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_LIM_TABLE2_H_
