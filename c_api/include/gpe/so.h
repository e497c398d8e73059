/* GroupPE's C ABI: SO(n) representations of the integers (gpe_so_rep), over group/.
 * One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_SO_H_
#define GPE_SO_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- SO(n) representations of the integers --------------------------------------
 *
 * rho(p) = exp(p S) for a skew-symmetric generator S of size dim x dim, applied to
 * batches of vectors at per-vector int64 positions. rho is orthogonal and
 * rho(p + q) = rho(p) rho(q), so <rho(i) q, rho(j) k> = <q, rho(j - i) k>.
 */
typedef struct gpe_so_rep gpe_so_rep;

/* Commuting plane rotations (RoPE): S = sum_i theta_i L_i over rotary_dim / 2 planes;
 * features rotary_dim..dim-1 pass through unchanged. */
typedef struct gpe_so_planes_options {
  uint32_t struct_size;  /* sizeof(gpe_so_planes_options) */
  int32_t pairing;       /* GPE_PAIRING_* */
  int64_t dim;           /* vector length, >= 2 */
  int64_t rotary_dim;    /* even, 2 <= rotary_dim <= dim; 0 means dim */
  double base;           /* theta_i = base^(-2i / rotary_dim) when thetas is NULL */
  const double* thetas;  /* rotary_dim / 2 finite frequencies, or NULL */
} gpe_so_planes_options;
#define GPE_SO_PLANES_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_so_planes_options), GPE_PAIRING_INTERLEAVED, 0, 0, 10000.0, NULL }

/* One rank-2 generator (GRAPE-M): S = omega (a b^T - b a^T), applied in O(dim) per
 * vector by the closed-form exponential. a and b are copied at creation. */
typedef struct gpe_so_rank2_options {
  uint32_t struct_size; /* sizeof(gpe_so_rank2_options) */
  int64_t dim;          /* vector length, >= 2 */
  const double* a;      /* dim finite values */
  const double* b;      /* dim finite values */
  double omega;         /* finite */
} gpe_so_rank2_options;
#define GPE_SO_RANK2_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_so_rank2_options), 0, NULL, NULL, 1.0 }

GPE_API GPE_NODISCARD gpe_status gpe_so_rep_create_planes(const gpe_so_planes_options* options,
                                                          gpe_so_rep** out);
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_create_rank2(const gpe_so_rank2_options* options,
                                                         gpe_so_rep** out);
GPE_API void gpe_so_rep_destroy(gpe_so_rep* rep);

/* The vector length the representation acts on. */
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_dim(const gpe_so_rep* rep, int64_t* dim);

/* out[n, :] = rho(positions[n]) x[n, :].
 * positions: int64, shape [N]. x and out: float32 or float64 (the same dtype), shape
 * [N, dim], any strides. out may be x itself (same data, offset and strides: in place);
 * any other overlap between out and x, out overlapping itself, and out overlapping
 * positions are rejected (GPE_ERROR_INVALID_ARGUMENT). N may be 0. */
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_apply(const gpe_so_rep* rep, const DLTensor* positions,
                                                  const DLTensor* x, DLTensor* out);

/* The dense matrix rho(position), float64, shape [dim, dim], row-major or strided. */
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_matrix(const gpe_so_rep* rep, int64_t position,
                                                   DLTensor* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_SO_H_ */
