// `gpe inr ...`: the INR experiments of the papers, reproduced on this machine.
//
//   gpe inr lim-table2 [options]      Lim et al., Table 2 (MLP with no encoding, T x T and
//                                     SO(2) encodings; images and vector fields)
//   gpe inr zheng-table1 [FILE...]    Zheng et al., Table 1 (simple vs complex embedders,
//                                     gradient descent vs closed form; PSNR and time)
//   gpe inr volume [options]          closed form 3D vs blended fit of an analytic volume
//   gpe inr --help
#ifndef TOOLS_GPE_INR_H_
#define TOOLS_GPE_INR_H_

#include <string>
#include <vector>

namespace gpe {
namespace tools {

// args: the words after "inr". Returns the exit code: 0 done, 1 a run failed (message on
// stderr), 2 bad arguments (message and usage on stderr).
int RunInrCommand(const std::vector<std::string>& args);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_H_
