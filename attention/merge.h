// Exact merge of partial attention results over disjoint key sets (the log-sum-exp
// combination behind flash-decoding's split-K and ring / context-parallel attention).
//
// If the keys of a query row are split into disjoint sets K_1..K_n and part i holds
//   lse_i = ln sum_{j in K_i} exp(s_j),   o_i = sum_{j in K_i} exp(s_j - lse_i) v_j
// (what ReferenceForward / CpuForward return when run on the keys K_i alone, with the
// keys' GLOBAL positions so that encodings and causal masks are unchanged), then the
// attention over the union K is
//   lse = ln sum_i exp(lse_i),   o = sum_i exp(lse_i - lse) o_i
// (the softmax normaliser splits as a sum over parts; Milakov & Gimelshein 2018, online
// softmax, eq. 4, applied to whole blocks as in flash attention's rescaling, Dao et al. 2022
// Alg. 1 line 10). A part whose row saw no allowed key has lse_i = -inf and contributes
// nothing; a row with lse_i = -inf in every part gets o = 0, lse = -inf (descriptor.h's
// convention for rows with no allowed key). Evaluated with the largest lse_i subtracted,
// so no exp overflows.
//
// LAYOUT: `rows` rows of `head_dim` values, row-major and compact: o[r * head_dim + d],
// lse[r]. Attention outputs [tokens, heads, head_dim] with lse [tokens, heads] (the C ABI's
// compact layouts) are rows = tokens * heads.
#ifndef ATTENTION_MERGE_H_
#define ATTENTION_MERGE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace gpe {
namespace attention {

// o_parts[i] and lse_parts[i] hold part i (same number of parts, >= 1, non-null). o and lse
// receive the merge; o may be the same pointer as one of o_parts (and lse as one of
// lse_parts): each row is formed in a scratch row before it is stored. Other partial
// overlaps are not allowed. lse_parts values must be finite, -inf or NaN (+inf is
// InvalidArgument, checked before anything is written: no attention gives it). A NaN
// lse_i, what a part gives for a row whose scores held NaN (descriptor.h, "Non-finite
// values"), makes the merged row NaN, o and lse, as that row would be unsplit. T is
// float or double; sums are formed in double either way.
template <class T>
absl::Status MergeAttention(int64_t rows, int64_t head_dim, absl::Span<const T* const> o_parts,
                            absl::Span<const T* const> lse_parts, T* o, T* lse);

}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_MERGE_H_
