// The buffers each thread holds while it runs items (aligned for the kernels' vector
// loads): the forward's packed keys and values, query block, score tile and
// online-softmax state; the backward's group queries, dO, key block and gradient tiles.
#ifndef ATTENTION_CPU_WORKSPACE_H_
#define ATTENTION_CPU_WORKSPACE_H_

#include <cstdint>
#include <vector>

#include "attention/cpu/plan.h"
#include "attention/cpu/tile_encodings.h"
#include "hwy/aligned_allocator.h"

namespace gpe {
namespace attention {
namespace cpu {

// Per-thread buffers (aligned for the kernels' vector loads).
struct Workspace {
  hwy::AlignedFreeUniquePtr<float[]> panels, values, rows, qblk, s, bias, oacc, m, l, alpha;
  // Shaw labels per query row: key-label dot products (stride ldl) and value-label
  // probability mass (stride nlv); ones for the accumulation.
  std::vector<float> qlab, vmass, lab_ones;
  // The bf16 dot-product path's packed keys, value pairs, query rows and probabilities
  // (the split-bf16 path's: each split into concatenated parts, SplitWidths).
  hwy::AlignedFreeUniquePtr<uint16_t[]> panels16, pairs16, q16, p16;
  std::vector<char> packed;
  std::vector<int64_t> kmin, kmax;
  std::vector<char> ksorted;  // key positions non-decreasing within the block
  std::vector<char> vfinite;  // the packed block's values are all finite (nonfinite.h)
  std::vector<char> kfinite;  // the packed block's (float) key panels are all finite
  bool q_finite = true;       // the loaded query rows (LoadQueries) are all finite
  // Split-bf16 float32 (plan.split_terms, split_bf16.h): per block 0 (not yet packed),
  // 1 (its split keys and values are in panels16 / pairs16) or 2 (a part would not be
  // finite: the float path); whether the loaded query rows split (their parts in q16);
  // one block's split key rows or value parts before packing.
  std::vector<char> split;
  bool q_split = false;
  hwy::AlignedFreeUniquePtr<uint16_t[]> split_rows;
  BiasScratch bias_scratch;
  // False when an aligned buffer could not be allocated: RunItems then returns
  // ResourceExhausted instead of running the item.
  bool allocated = true;

  // Floats one workspace holds (CpuForwardWorkspaceBytes). decode: split-key decoding's
  // (RunDecode), whose blocks are scored from key rows and never packed: no key panels,
  // bf16 panels or value pairs (at 32768 keys and d 128, 16 MiB of float panels per
  // thread, and as much again in bf16), and values for one block (a block's widened or
  // copied value rows are used before the next block's are copied), not the longest
  // sequence's.
  static int64_t Floats(const Plan& p, bool decode = false);
  explicit Workspace(const Plan& p, bool decode = false);
};

// The split-bf16 path's row lengths (bf16 elements): a split query or key row (terms x
// split_width), and the pitch of one block's split probability rows and value pairs per
// key (terms x bk and terms x dvp).
struct SplitWidths {
  int64_t qk = 0, p = 0, v = 0;
};
inline SplitWidths SplitWidthsOf(const Plan& p) {
  return {p.split_terms * p.split_width, p.split_terms * p.bk, p.split_terms * p.dvp};
}

// Whether the backward runs its products on the bf16 dot products (kernels_bf16.h):
// bf16 inputs, plan.bf16_dot, and query tiles of even length (the transposed rows pair
// queries from a tile's first one).
inline bool BackwardDotProducts(const Plan& p) { return p.bf16_dot && p.bq % 2 == 0; }

// Per-thread buffers of the backward.
struct BackwardWorkspace {
  // Per item: the sequence's queries of the group, transformed and scaled (Qs), dO, the
  // base-2 log-sum-exp and D, each [lq][group][.]; per key block: key rows, key and value
  // panels, dK and dV accumulators; per tile: S/P, dP (then dS in place), bias, locality,
  // the softcap's derivative.
  hwy::AlignedFreeUniquePtr<float[]> qs, dout, lse2, dsum, krows, kpanels, vpanels, dk, dv,
      s, dp, bias, loc, capd, shift;
  std::vector<double> grad;  // bias-gradient tile for the sink
  BiasScratch bias_scratch;
  bool kv_finite = true;  // the key block's keys and values are all finite (nonfinite.h)
  // Shaw labels per query row of the item ([lq][group][labels]): key-label dots of Qs and
  // value-label dots of dO (stride ldl), the per-label sums of dS (keys) and P (values).
  std::vector<float> qlab, dolab, kmass, pmass, lab_ones;
  // The bf16 dot-product path (BackwardDotProducts): per item, Qs and dO rounded to bf16
  // as rows ([lq][group][pitch], for S = Qs K^T and dP = dO V^T) and transposed per
  // query tile ([group][tile][d or dv][bq], for dK^T += Qs^T dS and dV^T += dO^T P);
  // per key block, the rounded key rows, their panels and pairs, the value panels; per
  // tile, P and dS rounded (rows) and as row pairs; dK^T and dV^T accumulated as
  // [d][bk] and [dv][bk] (added to dk and dv at the block's end); ones (the kernels'
  // alpha).
  hwy::AlignedFreeUniquePtr<uint16_t[]> qs16, do16, qst16, dot16, krows16, kpanels16,
      kpairs16, vpanels16, p16, ppairs16, ds16, dspairs16;
  hwy::AlignedFreeUniquePtr<float[]> dkt, dvt, ones;
  int64_t lqt = 0;  // the current item's lq rounded up to whole tiles (qst16 / dot16)
  bool allocated = true;  // as Workspace::allocated

  static int64_t Floats(const Plan& p, int64_t max_lq, int64_t group);
  BackwardWorkspace(const Plan& p, int64_t max_lq, int64_t group);
};

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_WORKSPACE_H_
