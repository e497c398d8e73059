/* GroupPE's C ABI: sequence encodings of int64 token positions (encodings/sequence/):
 * the sinusoidal and learned absolute encodings and GRAPE-M. The conventions stated
 * under "Sequence encodings" below also hold for the algebraic encodings
 * (gpe/algebraic.h) and the relative terms (gpe/relative.h). One part of gpe/gpe.h
 * (include that); valid C99 on its own.
 */
#ifndef GPE_SEQUENCE_H_
#define GPE_SEQUENCE_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Sequence encodings ---------------------------------------------------------
 *
 * Encodings of int64 token positions from encodings/sequence/. Batches are [N, dim]
 * float32 or float64 tensors (any strides) with one int64 position per row; all
 * arithmetic is in double and outputs are rounded once to the output dtype. Learned
 * parameters are passed and returned as float64. Parameter gradients are summed over
 * the batch. Backward functions take dL/d(output) and never modify their inputs.
 */

/* -- Sinusoidal absolute encoding (Vaswani et al., sec. 3.5) --
 * out[n, 2i] = sin(p theta_i), out[n, 2i + 1] = cos(p theta_i), p = positions[n],
 * theta_i = base^(-2i / dim), dim = out's second size (>= 1; odd dim ends with a sin
 * column). p theta_i is reduced exactly mod 2 pi (any int64 position). */
typedef struct gpe_sinusoidal_options {
  uint32_t struct_size; /* sizeof(gpe_sinusoidal_options) */
  double base;          /* finite, > 0 */
} gpe_sinusoidal_options;
#define GPE_SINUSOIDAL_OPTIONS_INIT { (uint32_t)sizeof(gpe_sinusoidal_options), 10000.0 }

/* positions: int64 [N]; out: float32 or float64 [N, dim]. */
GPE_API GPE_NODISCARD gpe_status gpe_sinusoidal_encode(const gpe_sinusoidal_options* options,
                                                       const DLTensor* positions, DLTensor* out);

/* -- Learned absolute position table (Gehring et al.) --
 * A [max_positions, dim] table, copied at creation; position p reads row p for
 * 0 <= p < max_positions (anything else is GPE_ERROR_INVALID_ARGUMENT, never clamped).
 * After an optimiser step, create a new handle from the updated table. */
typedef struct gpe_learned_positions gpe_learned_positions;

/* table: float32 or float64 [max_positions, dim], both >= 1, finite, any strides. */
GPE_API GPE_NODISCARD gpe_status gpe_learned_positions_create(const DLTensor* table,
                                                              gpe_learned_positions** out);
GPE_API void gpe_learned_positions_destroy(gpe_learned_positions* table);
GPE_API GPE_NODISCARD gpe_status gpe_learned_positions_shape(const gpe_learned_positions* table,
                                                             int64_t* max_positions,
                                                             int64_t* dim);
/* out[n, :] = table[positions[n], :]. out: float32 or float64 [N, dim]. */
GPE_API GPE_NODISCARD gpe_status gpe_learned_positions_lookup(
    const gpe_learned_positions* table, const DLTensor* positions, DLTensor* out);
/* grad_table[positions[n], :] += grad_out[n, :] for every n (repeated positions
 * accumulate; grad_table is NOT cleared). grad_out: float32 or float64 [N, dim];
 * grad_table: float32 or float64 [max_positions, dim], disjoint from grad_out. All
 * positions are checked before anything is written. */
GPE_API GPE_NODISCARD gpe_status gpe_learned_positions_backward(
    const gpe_learned_positions* table, const DLTensor* positions, const DLTensor* grad_out,
    DLTensor* grad_table);

/* -- GRAPE-M product of rank-2 generators (Zhang et al., GRAPE, arXiv 2512.07805, "Multiplicative GRAPE") --
 * G(p) = G_1(p) G_2(p) ... G_m(p), G_k(p) = exp(p omega_k (a_k b_k^T - b_k a_k^T)).
 * Orthogonal; a homomorphism of Z (relative scores) only when the generators commute
 * (m = 1, or mutually orthogonal planes). */
typedef struct gpe_grape_m gpe_grape_m;

typedef struct gpe_grape_m_options {
  uint32_t struct_size;   /* sizeof(gpe_grape_m_options) */
  int64_t dim;            /* vector length, >= 2 */
  int64_t num_generators; /* m >= 1 */
  const double* a;        /* m * dim finite values, row-major: a_k = a + k * dim */
  const double* b;        /* m * dim finite values, row-major */
  const double* omega;    /* m finite values */
} gpe_grape_m_options;
#define GPE_GRAPE_M_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_grape_m_options), 0, 1, NULL, NULL, NULL }

/* Parameters are copied at creation. */
GPE_API GPE_NODISCARD gpe_status gpe_grape_m_create(const gpe_grape_m_options* options,
                                                    gpe_grape_m** out);
GPE_API void gpe_grape_m_destroy(gpe_grape_m* grape);
GPE_API GPE_NODISCARD gpe_status gpe_grape_m_shape(const gpe_grape_m* grape, int64_t* dim,
                                                   int64_t* num_generators);
/* out[n, :] = G(positions[n]) x[n, :]; the rules of gpe_so_rep_apply (out may be x). */
GPE_API GPE_NODISCARD gpe_status gpe_grape_m_apply(const gpe_grape_m* grape,
                                                   const DLTensor* positions, const DLTensor* x,
                                                   DLTensor* out);
/* G(position) as float64 [dim, dim]. */
GPE_API GPE_NODISCARD gpe_status gpe_grape_m_matrix(const gpe_grape_m* grape, int64_t position,
                                                    DLTensor* out);
/* Backward of gpe_grape_m_apply given grad_out = dL/dout ([N, dim], x's dtype).
 * grad_x (x's dtype and shape, or NULL to skip) receives G(p_n)^T grad_out[n]; it may
 * be grad_out itself, and must not otherwise overlap x or grad_out. grad_a, grad_b
 * (float64 [m, dim]) and grad_omega (float64 [m]) are overwritten with dL/da_k, dL/db_k,
 * dL/domega_k summed over the batch; each may be NULL to skip, and must not overlap any
 * other argument. */
GPE_API GPE_NODISCARD gpe_status gpe_grape_m_backward(const gpe_grape_m* grape,
                                                      const DLTensor* positions,
                                                      const DLTensor* x, const DLTensor* grad_out,
                                                      DLTensor* grad_x, DLTensor* grad_a,
                                                      DLTensor* grad_b, DLTensor* grad_omega);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_SEQUENCE_H_ */
