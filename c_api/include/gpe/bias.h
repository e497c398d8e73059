/* GroupPE's C ABI: additive attention biases (encodings/sequence/bias.h, grape_a.h):
 * ALiBi, T5, FoX, GRAPE-AP and GRAPE-A, filled and differentiated one tile at a time.
 * One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_BIAS_H_
#define GPE_BIAS_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Additive attention biases (since 0.3.0) ---------------------------------------
 *
 * b_h(i, j) added to the score of query position i and key position j in head h
 * (encodings/sequence/bias.h), one tile at a time: kernels never form the s x s matrix.
 * Positions are explicit int64 ids. Causal biases (ALiBi causal, FoX, GRAPE-AP) return
 * the closed form continued above the diagonal (j > i); masking is the caller's job.
 *   ALiBi (Press et al.): causal -m_h (i - j), symmetric -m_h |i - j|.
 *   T5 (Raffel et al.): table[bucket(j - i), h].
 *   FoX (Lin et al.): c_i - c_j, c_t = sum_{l <= t} ln sigmoid(x_{l,h}).
 *   GRAPE-AP: sum_{l = j+1..i} psi_h(i, l), psi_h(t, l) = -softplus(<w_{t,h}, u_{l,h}>).
 * Parameters are copied at creation; a handle is immutable.
 */
typedef struct gpe_bias gpe_bias;

enum { GPE_BIAS_ALIBI = 0, GPE_BIAS_T5 = 1, GPE_BIAS_FOX = 2, GPE_BIAS_GRAPE_AP = 3 };
enum { GPE_ALIBI_CAUSAL = 0, GPE_ALIBI_SYMMETRIC = 1 };

typedef struct gpe_alibi_options {
  uint32_t struct_size; /* sizeof(gpe_alibi_options) */
  int32_t form;         /* GPE_ALIBI_* */
  int64_t num_heads;    /* >= 1 */
  /* num_heads finite slopes, or NULL for Press et al.'s: 2^(-8h/n) for n a power of two;
   * otherwise the c = 2^floor(log2 n) slopes of c heads, then every other slope of 2c. */
  const double* slopes;
} gpe_alibi_options;
#define GPE_ALIBI_OPTIONS_INIT { (uint32_t)sizeof(gpe_alibi_options), GPE_ALIBI_CAUSAL, 0, NULL }

typedef struct gpe_t5_options {
  uint32_t struct_size;  /* sizeof(gpe_t5_options) */
  int32_t bidirectional; /* nonzero: buckets for both signs of j - i */
  int64_t num_heads;     /* >= 1 */
  int64_t num_buckets;   /* >= 2 (>= 4 when bidirectional) */
  int64_t max_distance;  /* > max_exact = nb / 2, nb = num_buckets (/ 2 when bidirectional) */
  const double* table;   /* num_buckets * num_heads finite values, row-major [bucket, head] */
} gpe_t5_options;
#define GPE_T5_OPTIONS_INIT { (uint32_t)sizeof(gpe_t5_options), 1, 0, 32, 128, NULL }

typedef struct gpe_fox_options {
  uint32_t struct_size;   /* sizeof(gpe_fox_options) */
  int64_t length;         /* tokens, >= 1 */
  int64_t num_heads;      /* >= 1 */
  int64_t first_position; /* token t has position first_position + t */
  const double* gate_logits; /* length * num_heads finite values, row-major [token, head] */
} gpe_fox_options;
#define GPE_FOX_OPTIONS_INIT { (uint32_t)sizeof(gpe_fox_options), 0, 0, 0, NULL }

typedef struct gpe_grape_ap_options {
  uint32_t struct_size;   /* sizeof(gpe_grape_ap_options) */
  int64_t length;         /* tokens, >= 1 */
  int64_t num_heads;      /* >= 1 */
  int64_t rank;           /* >= 1 */
  int64_t first_position; /* token t has position first_position + t */
  const double* w;        /* length * num_heads * rank finite values, row-major */
  const double* u;        /* the same shape */
} gpe_grape_ap_options;
#define GPE_GRAPE_AP_OPTIONS_INIT { (uint32_t)sizeof(gpe_grape_ap_options), 0, 0, 1, 0, NULL, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_bias_create_alibi(const gpe_alibi_options* options,
                                                       gpe_bias** out);
GPE_API GPE_NODISCARD gpe_status gpe_bias_create_t5(const gpe_t5_options* options, gpe_bias** out);
GPE_API GPE_NODISCARD gpe_status gpe_bias_create_fox(const gpe_fox_options* options,
                                                     gpe_bias** out);
GPE_API GPE_NODISCARD gpe_status gpe_bias_create_grape_ap(const gpe_grape_ap_options* options,
                                                          gpe_bias** out);
GPE_API void gpe_bias_destroy(gpe_bias* bias);
/* kind (GPE_BIAS_*), num_heads, and whether the bias is causal (only j <= i meaningful);
 * each may be NULL. */
GPE_API GPE_NODISCARD gpe_status gpe_bias_info(const gpe_bias* bias, int32_t* kind,
                                               int64_t* num_heads, int32_t* causal);
/* ALiBi's slopes: num_heads doubles into slopes (num_slopes must equal num_heads). */
GPE_API GPE_NODISCARD gpe_status gpe_bias_alibi_slopes(const gpe_bias* bias, double* slopes,
                                                       int64_t num_slopes);
/* out[r, c] = b_head(q_positions[r], k_positions[c]). q_positions: int64 [M];
 * k_positions: int64 [N]; out: float32 or float64 [M, N], any strides (the row stride
 * is the tile's leading dimension), disjoint from the positions. Values are formed in
 * double and rounded once. FoX and GRAPE-AP positions must lie in
 * [first_position, first_position + length). */
GPE_API GPE_NODISCARD gpe_status gpe_bias_fill_tile(const gpe_bias* bias, int64_t head,
                                                    const DLTensor* q_positions,
                                                    const DLTensor* k_positions, DLTensor* out);
/* Tiled backward: given grad_tile = dL/db for a tile (float32 or float64 [M, N]), ADDS
 * this tile's contribution to float64 parameter gradients (not cleared; sum over tiles):
 *   ALiBi:    grad_a = dL/dslopes [num_heads]; grad_b NULL.
 *   T5:       grad_a = dL/dtable [num_buckets, num_heads]; grad_b NULL.
 *   FoX:      grad_a = dL/dc, the prefix sums [length, num_heads]; grad_b NULL. Turn it
 *             into dL/dgate_logits with gpe_bias_fox_logit_gradient after all tiles.
 *   GRAPE-AP: grad_a = dL/dw, grad_b = dL/du [length, num_heads, rank].
 * Gradients must not overlap the inputs or each other. */
GPE_API GPE_NODISCARD gpe_status gpe_bias_accumulate_gradient(
    const gpe_bias* bias, int64_t head, const DLTensor* q_positions,
    const DLTensor* k_positions, const DLTensor* grad_tile, DLTensor* grad_a, DLTensor* grad_b);
/* FoX only: grad_logits[l, h] = sigmoid(-x_{l,h}) * sum_{t >= l} grad_prefix[t, h].
 * grad_prefix, grad_logits: float64 [length, num_heads] (grad_logits overwritten). */
GPE_API GPE_NODISCARD gpe_status gpe_bias_fox_logit_gradient(const gpe_bias* bias,
                                                             const DLTensor* grad_prefix,
                                                             DLTensor* grad_logits);

/* ---- GRAPE-A as an additive bias (since 0.3.0) --------------------------------------
 *
 * Additive GRAPE (Zhang et al., GRAPE, arXiv 2512.07805, "Additive GRAPE"): rows of q and k are lifted to
 * head_dim + 2 dimensions, q~ = [q; 1; 0], k~ = [k; 0; 1], and moved by the unipotent
 * action G(p) = I + p m_h A, A = E_{d, d+1} (A^2 = 0): queries by G(i)^-T, keys by G(j).
 * The lifted score is <q, k> + b_h(i, j) with
 *   b_h(i, j) = m_h (j - i) = -m_h (i - j)   (exactly causal ALiBi with slopes m_h), or,
 *   content-gated, c_i - c_j with FoX's c_t = sum_{l <= t} ln sigmoid(x_{l,h})
 * (the clock m p replaced by the prefix sums of log forget gates).
 * The handle is a gpe_bias of kind GPE_BIAS_GRAPE_A: gpe_bias_fill_tile,
 * gpe_bias_accumulate_gradient (ALiBi-like: grad_a = dL/dslopes [num_heads]; gated:
 * dL/dc [length, num_heads]), gpe_bias_fox_logit_gradient (gated),
 * gpe_bias_alibi_slopes (ALiBi-like) and gpe_attention_* accept it.
 * path chooses how tiles are filled: GPE_GRAPE_A_CLOSED_FORM (the fast path: the closed
 * form above, O(1) per score) or GPE_GRAPE_A_LIFTED (the general path: lifted rows of
 * zero content and their head_dim + 2 term dot products; the definition, for checks).
 * Both agree bit for bit for power-of-two slopes, and otherwise to the lift's rounding:
 * of m j - m i (~1e-16 m max(|i|, |j|)) for slopes, of each prefix sum (2^-52 max |c|)
 * for gated biases, which the closed form subtracts in double-double.
 */
enum { GPE_BIAS_GRAPE_A = 4 };
enum { GPE_GRAPE_A_CLOSED_FORM = 0, GPE_GRAPE_A_LIFTED = 1 };
enum { GPE_GRAPE_A_QUERY = 0, GPE_GRAPE_A_KEY = 1 };

typedef struct gpe_grape_a_options {
  uint32_t struct_size; /* sizeof(gpe_grape_a_options) */
  int32_t path;         /* GPE_GRAPE_A_CLOSED_FORM or GPE_GRAPE_A_LIFTED */
  int64_t num_heads;    /* >= 1 */
  int64_t head_dim;     /* d >= 1: lifted rows have d + 2 entries */
  /* ALiBi-like (gated == 0): num_heads finite slopes m_h, or NULL for Press et al.'s
   * (as gpe_alibi_options). */
  const double* slopes;
  /* Content-gated (gated != 0): FoX's gates as in gpe_fox_options; slopes must be NULL. */
  int32_t gated;
  int64_t length;            /* tokens, >= 1 (gated) */
  int64_t first_position;    /* token t has position first_position + t */
  const double* gate_logits; /* length * num_heads finite values, row-major [token, head] */
} gpe_grape_a_options;
#define GPE_GRAPE_A_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_grape_a_options), GPE_GRAPE_A_CLOSED_FORM, 0, 0, NULL, 0, 0, 0, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_bias_create_grape_a(const gpe_grape_a_options* options,
                                                         gpe_bias** out);
/* The lifted rows of one head: role GPE_GRAPE_A_QUERY gives G(i)^-T [q; 1; 0] (=
 * [q; 1; -m i], gated [q; 1; c_i]), GPE_GRAPE_A_KEY gives G(j) [k; 0; 1] (= [k; m j; 1],
 * gated [k; -c_j; 1]), so <lift_q(i), lift_k(j)> = <q, k> + b_head(i, j).
 * positions: int64 [N] (gated: inside the gates' range); x: float32 or float64
 * [N, head_dim]; out: x's dtype, [N, head_dim + 2], disjoint from x and positions. Values
 * are formed in double and rounded once. */
GPE_API GPE_NODISCARD gpe_status gpe_bias_grape_a_lift(const gpe_bias* bias, int64_t head,
                                                       int32_t role, const DLTensor* positions,
                                                       const DLTensor* x, DLTensor* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_BIAS_H_ */
