/* GroupPE's C ABI: relative position terms (encodings/sequence/relative.h): Shaw et al.'s
 * relative key scores and value terms, and Transformer-XL's relative score terms.
 * Batches and gradients follow the conventions of gpe/sequence.h ("Sequence
 * encodings"). One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_RELATIVE_H_
#define GPE_RELATIVE_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -- Shaw et al. relative key scores ("Self-Attention with Relative Position
 * Representations") --
 *   scores[a, b] = q[a, :] . label_table[clip(kp[b] - qp[a], -k, k) + k, :]
 * with qp = query_positions, kp = key_positions and k = (label_table rows - 1) / 2: row r
 * of the table holds label r - k. kp[b] - qp[a] is formed exactly for any int64 values.
 * q: float32 or float64 [Lq, d]; label_table: float32 or float64 [2k + 1, d] (an odd
 * number of rows, d >= 1, finite); query_positions: int64 [Lq]; key_positions: int64
 * [Lk]; scores: float32 or float64 [Lq, Lk], disjoint from every input. Stateless: the
 * table is read on every call. */
GPE_API GPE_NODISCARD gpe_status gpe_shaw_key_scores(const DLTensor* q,
                                                     const DLTensor* label_table,
                                                     const DLTensor* query_positions,
                                                     const DLTensor* key_positions,
                                                     DLTensor* scores);
/* Backward given grad_scores = dL/dscores (float32 or float64 [Lq, Lk]). grad_q (float32 or
 * float64 [Lq, d], or NULL) is overwritten with dL/dq; dL/dlabel_table is ADDED to
 * grad_label_table (float32 or float64 [2k + 1, d], or NULL; not cleared). Outputs must
 * be disjoint from the inputs and from each other. */
GPE_API GPE_NODISCARD gpe_status gpe_shaw_key_scores_backward(
    const DLTensor* q, const DLTensor* label_table, const DLTensor* query_positions,
    const DLTensor* key_positions, const DLTensor* grad_scores, DLTensor* grad_q,
    DLTensor* grad_label_table);

/* -- Shaw et al. relative value terms (eq. 3) --
 *   out[a, :] = sum_b probabilities[a, b] label_table[clip(kp[b] - qp[a], -k, k) + k, :]
 * (the term attention adds to output row a; k = (label_table rows - 1) / 2).
 * probabilities: float32 or float64 [Lq, Lk]; label_table: float32 or float64 [2k + 1, dv]
 * (finite); positions int64; out: float32 or float64 [Lq, dv], disjoint from the inputs. */
GPE_API GPE_NODISCARD gpe_status gpe_shaw_value_output(const DLTensor* probabilities,
                                                       const DLTensor* label_table,
                                                       const DLTensor* query_positions,
                                                       const DLTensor* key_positions,
                                                       DLTensor* out);
/* Backward given grad_out (float32 or float64 [Lq, dv]): grad_probabilities ([Lq, Lk], or
 * NULL) is overwritten with dL/dprobabilities; dL/dlabel_table is ADDED to
 * grad_label_table ([2k + 1, dv], or NULL). Outputs disjoint from inputs and each other. */
GPE_API GPE_NODISCARD gpe_status gpe_shaw_value_output_backward(
    const DLTensor* probabilities, const DLTensor* label_table, const DLTensor* query_positions,
    const DLTensor* key_positions, const DLTensor* grad_out, DLTensor* grad_probabilities,
    DLTensor* grad_label_table);

/* -- Transformer-XL relative terms (Dai et al., sec. 3.3) --
 *   terms[a, b] = q_a^T W_R R_{i_a - j_b} + u^T k_b + v^T W_R R_{i_a - j_b}
 * with R_t the sinusoidal encoding of t (gpe_sinusoidal_encode's layout, d_r columns) and
 * i = query_positions, j = key_positions (the content term q_a^T k_b is attention's own).
 * q: [Lq, d]; k: [Lk, d]; w_r: [d, d_r]; u, v: [d]; all float32 or float64, finite; terms:
 * float32 or float64 [Lq, Lk], disjoint from the inputs. Reference-grade: O(Lq Lk d). */
typedef struct gpe_transformer_xl_options {
  uint32_t struct_size; /* sizeof(gpe_transformer_xl_options) */
  double base;          /* R's frequency base, finite > 0 (10000) */
} gpe_transformer_xl_options;
#define GPE_TRANSFORMER_XL_OPTIONS_INIT { (uint32_t)sizeof(gpe_transformer_xl_options), 10000.0 }

GPE_API GPE_NODISCARD gpe_status gpe_transformer_xl_score_terms(
    const gpe_transformer_xl_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* query_positions, const DLTensor* key_positions, const DLTensor* w_r,
    const DLTensor* u, const DLTensor* v, DLTensor* terms);
/* Backward given grad_terms ([Lq, Lk]): each of grad_q, grad_k, grad_w_r, grad_u, grad_v
 * (shaped like its input, float32 or float64, or NULL) is overwritten with its gradient.
 * Outputs disjoint from the inputs and from each other. */
GPE_API GPE_NODISCARD gpe_status gpe_transformer_xl_score_terms_backward(
    const gpe_transformer_xl_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* query_positions, const DLTensor* key_positions, const DLTensor* w_r,
    const DLTensor* u, const DLTensor* v, const DLTensor* grad_terms, DLTensor* grad_q,
    DLTensor* grad_k, DLTensor* grad_w_r, DLTensor* grad_u, DLTensor* grad_v);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_RELATIVE_H_ */
