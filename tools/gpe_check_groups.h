// `gpe check-groups` (and the main job's first table): the group laws of every
// representation in group/, checked on random elements. For a representation rho of Z:
// rho(0) = I, rho(p + q) = rho(p) rho(q), rho(-p) rho(p) = I and, for orthogonal rho,
// rho(p)^T rho(p) = I and relativity; Z_n's period; the free group's homomorphism law
// and non-commutativity.
#ifndef TOOLS_GPE_CHECK_GROUPS_H_
#define TOOLS_GPE_CHECK_GROUPS_H_

#include <cstdint>

namespace gpe {
namespace tools {

// Prints one row per law (worst value over `trials` random elements from `seed`, its
// bound, ok or FAIL) and a verdict. Returns 0 when every law holds, else 1.
int RunCheckGroups(uint64_t seed, int trials);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_CHECK_GROUPS_H_
