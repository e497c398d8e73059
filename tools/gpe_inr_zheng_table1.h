// `gpe inr zheng-table1`: Zheng et al.'s Table 1 (section 6.2) on this machine. A simple
// embedder + MLP (Adam) against a complex (Kronecker) embedder + one linear layer, trained
// by Adam and solved in closed form (inr/closed_form.h), on the [::2] x [::2] grid of the
// images given (else the analytic Radial and Spiral images); test PSNR on the other
// pixels and time. Writes table1.md and PNGs.
#ifndef TOOLS_GPE_INR_ZHENG_TABLE1_H_
#define TOOLS_GPE_INR_ZHENG_TABLE1_H_

#include <string>
#include <vector>

namespace gpe {
namespace tools {

// args: the words after "zheng-table1". Returns the exit code: 0 done, 1 a run failed
// (message on stderr), 2 bad arguments (message and usage on stderr).
int RunZhengTable1(const std::vector<std::string>& args);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_ZHENG_TABLE1_H_
