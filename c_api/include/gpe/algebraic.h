/* GroupPE's C ABI: Kogkalidis et al.'s algebraic positional encodings
 * (encodings/sequence/algebraic.h): sequences, trees, grids, periodic domains and
 * locality scaling. Batches and gradients follow the conventions of gpe/sequence.h
 * ("Sequence encodings"). One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_ALGEBRAIC_H_
#define GPE_ALGEBRAIC_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -- Algebraic sequence encoding (Kogkalidis et al., "Algebraic Positional Encodings", sec. 3.1) --
 * Position p acts by W^p = exp(p S) for a learned skew-symmetric S (dim x dim): an
 * orthogonal homomorphism of Z, so <W^i q, W^j k> = <q, W^(j - i) k>. */
typedef struct gpe_algebraic_sequence gpe_algebraic_sequence;

typedef struct gpe_algebraic_sequence_options {
  uint32_t struct_size; /* sizeof(gpe_algebraic_sequence_options) */
  int64_t dim;          /* >= 1 */
  /* dim * dim finite values, row-major, skew-symmetric: |S + S^T|_max <= 1e-12 *
   * max(1, |S|_max). Copied at creation. */
  const double* skew;
} gpe_algebraic_sequence_options;
#define GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_algebraic_sequence_options), 0, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_algebraic_sequence_create(
    const gpe_algebraic_sequence_options* options, gpe_algebraic_sequence** out);
GPE_API void gpe_algebraic_sequence_destroy(gpe_algebraic_sequence* seq);
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_sequence_dim(const gpe_algebraic_sequence* seq,
                                                            int64_t* dim);
/* out[n, :] = W^positions[n] x[n, :]; the rules of gpe_so_rep_apply (out may be x). */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_sequence_apply(const gpe_algebraic_sequence* seq,
                                                              const DLTensor* positions,
                                                              const DLTensor* x, DLTensor* out);
/* W^position as float64 [dim, dim]. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_sequence_matrix(const gpe_algebraic_sequence* seq,
                                                               int64_t position, DLTensor* out);
/* Backward of apply given grad_out. grad_x: as in gpe_grape_m_backward (W^-p_n grad_out[n]).
 * grad_skew (float64 [dim, dim], or NULL) is overwritten with dL/dS entrywise,
 * unprojected (for S = A - A^T, dL/dA = X - X^T with X = grad_skew). */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_sequence_backward(
    const gpe_algebraic_sequence* seq, const DLTensor* positions, const DLTensor* x,
    const DLTensor* grad_out, DLTensor* grad_x, DLTensor* grad_skew);

/* ---- Algebraic trees, grids, periodic domains and locality (since 0.3.0) -------------
 *
 * Kogkalidis et al. ("Algebraic Positional Encodings"; encodings/sequence/
 * algebraic.h). Batches are float32 or float64 [N, dim] (any strides, out may be x
 * itself); arithmetic in double, one rounding to the output dtype. Parameter gradients
 * are float64, overwritten, summed over the batch, entrywise and unprojected (for a
 * skew parametrisation S = A - A^T, dL/dA = X - X^T with X the returned gradient).
 */

/* -- Trees (sec. 3.2): branch c of a k-ary tree is W_c = exp(S_c); the node at address
 * (c_1, ..., c_m) (0-based child indices from the root) acts by W_{c_1} ... W_{c_m}, so
 * <rho(a) q, rho(b) k> = <q, rho(a^-1 b) k> (free-group relativity). */
typedef struct gpe_algebraic_tree gpe_algebraic_tree;

typedef struct gpe_algebraic_tree_options {
  uint32_t struct_size;  /* sizeof(gpe_algebraic_tree_options) */
  int64_t dim;           /* d in [1, 4096] */
  int64_t num_branches;  /* k in [1, 1024] */
  /* k * d * d finite values, row-major [branch, row, col], each S_c skew-symmetric
   * (|S + S^T|_max <= 1e-12 max(1, |S|_max)). Copied at creation. */
  const double* skews;
} gpe_algebraic_tree_options;
#define GPE_ALGEBRAIC_TREE_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_algebraic_tree_options), 0, 2, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_create(
    const gpe_algebraic_tree_options* options, gpe_algebraic_tree** out);
GPE_API void gpe_algebraic_tree_destroy(gpe_algebraic_tree* tree);
/* dim and num_branches (each may be NULL). */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_shape(const gpe_algebraic_tree* tree,
                                                          int64_t* dim, int64_t* num_branches);
/* Addresses are int64 [N, L]: row n holds node n's child indices (each in
 * [0, num_branches)) followed by -1 padding (nothing but -1 after the first -1; a row
 * of -1 is the root). out[n, :] = rho(address n) x[n, :]; the rules of
 * gpe_so_rep_apply. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_apply(const gpe_algebraic_tree* tree,
                                                          const DLTensor* addresses,
                                                          const DLTensor* x, DLTensor* out);
/* rho(address) as float64 [dim, dim]; address: depth child indices (NULL when 0). */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_matrix(const gpe_algebraic_tree* tree,
                                                           const int64_t* address,
                                                           int64_t depth, DLTensor* out);
/* Every node of depth <= max_depth, built one depth at a time (level t + 1 = level t
 * times each W_c: one d x d product per node; Kogkalidis et al., sec. 3.2.3), in level
 * order (root first; within a depth, addresses as base-k numbers). out: float64
 * [count, dim, dim] with count = sum_{t <= max_depth} k^t (the message names it when the
 * shape differs); at most 2^27 doubles in all. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_node_matrices(const gpe_algebraic_tree* tree,
                                                                  int64_t max_depth,
                                                                  DLTensor* out);
/* Backward of apply given grad_out. grad_x: as in gpe_grape_m_backward (rho^T
 * grad_out[n]). grad_skews (float64 [num_branches, dim, dim], or NULL) receives dL/dS_c. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_tree_backward(
    const gpe_algebraic_tree* tree, const DLTensor* addresses, const DLTensor* x,
    const DLTensor* grad_out, DLTensor* grad_x, DLTensor* grad_skews);

/* -- Grids (sec. 3.3): axis a has a learned skew S_a of size d_a; a grid point
 * (p_1, ..., p_A) acts by blockdiag(exp(p_1 S_1), ..., exp(p_A S_A)) on dim = sum d_a
 * coordinates (axis 1 first), so scores are sums of per-axis relative terms. */
typedef struct gpe_algebraic_grid gpe_algebraic_grid;

typedef struct gpe_algebraic_grid_options {
  uint32_t struct_size;  /* sizeof(gpe_algebraic_grid_options) */
  int64_t num_axes;      /* A in [1, 8] */
  const int64_t* dims;   /* A sizes d_a in [1, 4096] */
  /* sum_a d_a^2 finite values: S_1 row-major, then S_2, ...; each skew-symmetric. */
  const double* skews;
} gpe_algebraic_grid_options;
#define GPE_ALGEBRAIC_GRID_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_algebraic_grid_options), 2, NULL, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_algebraic_grid_create(
    const gpe_algebraic_grid_options* options, gpe_algebraic_grid** out);
GPE_API void gpe_algebraic_grid_destroy(gpe_algebraic_grid* grid);
/* dim (= sum d_a) and num_axes (each may be NULL). */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_grid_shape(const gpe_algebraic_grid* grid,
                                                          int64_t* dim, int64_t* num_axes);
/* positions: int64 [N, num_axes] (any int64 coordinates). out[n, :] = rho(p_n) x[n, :];
 * the rules of gpe_so_rep_apply. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_grid_apply(const gpe_algebraic_grid* grid,
                                                          const DLTensor* positions,
                                                          const DLTensor* x, DLTensor* out);
/* Backward of apply. grad_x as in gpe_grape_m_backward. grad_skews (float64
 * [sum_a d_a^2], laid out as options.skews, or NULL) receives dL/dS_a. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_grid_backward(
    const gpe_algebraic_grid* grid, const DLTensor* positions, const DLTensor* x,
    const DLTensor* grad_out, DLTensor* grad_x, DLTensor* grad_skews);

/* -- Periodic domains (sec. 3.4.2): plane i (coordinates 2i, 2i + 1) rotates by
 * 2 pi multipliers[i] p / period, formed from the exact residue of multipliers[i] p mod
 * period, so W^period = I and p, p + period encode identically. No learned parameters;
 * the backward pass is apply at -p (W^-p = W^T). */
typedef struct gpe_algebraic_periodic_options {
  uint32_t struct_size;         /* sizeof(gpe_algebraic_periodic_options) */
  int64_t dim;                  /* even, >= 2 */
  int64_t period;               /* n >= 1 */
  const int64_t* multipliers;   /* dim / 2 integers */
} gpe_algebraic_periodic_options;
#define GPE_ALGEBRAIC_PERIODIC_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_algebraic_periodic_options), 0, 1, NULL }

/* positions: int64 [N]; x, out: [N, dim]; the rules of gpe_so_rep_apply. */
GPE_API GPE_NODISCARD gpe_status gpe_algebraic_periodic_apply(
    const gpe_algebraic_periodic_options* options, const DLTensor* positions,
    const DLTensor* x, DLTensor* out);

/* -- Locality scaling (sec. 4): scores[r, c] *= c^|q_positions[r] - k_positions[c]|,
 * c in (0, 1] (0.98 in the paper), |i - j| formed exactly. scores: float32 or float64
 * [M, N], any strides, modified in place, disjoint from the positions. The backward pass
 * is the same scaling applied to dL/dscores. */
GPE_API GPE_NODISCARD gpe_status gpe_locality_scale(double c, const DLTensor* q_positions,
                                                    const DLTensor* k_positions,
                                                    DLTensor* scores);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_ALGEBRAIC_H_ */
