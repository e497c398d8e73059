// `gpe inr zheng-table1`: Zheng et al.'s Table 1 (section 6.2) on this machine. A simple
// embedder + MLP (Adam) against a complex (Kronecker) embedder + one linear layer, trained
// by Adam and solved in closed form (inr/closed_form.h), on the [::2] x [::2] grid of the
// images given (else the analytic Radial and Spiral images); test PSNR on the other
// pixels and time. Writes table1.md and PNGs.
#ifndef TOOLS_GPE_INR_ZHENG_TABLE1_H_
#define TOOLS_GPE_INR_ZHENG_TABLE1_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpe {
namespace tools {

// args: the words after "zheng-table1". Returns the exit code: 0 done, 1 a run failed
// (message on stderr), 2 bad arguments (message and usage on stderr). A run whose simple
// + MLP rows would need more memory than the process may use (ZhengMlpBytes against
// AvailableMemoryBytes) is refused before it starts (exit 1, naming --no-mlp); a fit that
// still runs out of memory is a failed cell, as a fit that fails otherwise.
int RunZhengTable1(const std::vector<std::string>& args);

// The peak bytes of the simple + MLP rows (float32 network of 4 hidden layers of `width`,
// 2 k inputs) on an n x n image of `channels` channels: the larger of the training (the
// [::2] grid's embedding and targets, the activations Adam's steps keep, a final forward
// pass beside them) and the prediction (the embedding of all n^2 pixels and the
// activations of its forward pass, beside the training embedding). A model of the
// allocations, not a measurement; at n = 2048, k = width = 256: about 34 GiB.
int64_t ZhengMlpBytes(int64_t n, int64_t k, int64_t width, int64_t channels);

// The bytes this process may still allocate: the least of the kernel's MemAvailable
// (/proc/meminfo, the host's, in a container too), the room left under its cgroup's
// memory limit (CgroupMemoryRoomBytes) and under RLIMIT_AS and RLIMIT_DATA; -1 where none
// of them is known.
int64_t AvailableMemoryBytes();

// The room left under the memory limit of the cgroup `proc_cgroup` (a /proc/<pid>/cgroup
// file) names, under the hierarchy mounted at `root`: cgroup v2's memory.max minus
// memory.current ("0::<path>" lines), else v1's memory.limit_in_bytes minus
// memory.usage_in_bytes (the line listing the memory controller); -1 without a limit
// (v2's "max", v1's near 2^63) or where the files are not there.
int64_t CgroupMemoryRoomBytes(const std::string& proc_cgroup = "/proc/self/cgroup",
                              const std::string& root = "/sys/fs/cgroup");

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_ZHENG_TABLE1_H_
