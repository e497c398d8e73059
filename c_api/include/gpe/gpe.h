/* GroupPE: positional encodings as group representations. The stable C ABI.
 *
 * Conventions (fixed for the life of the ABI):
 * - Every function that can fail returns a gpe_status; GPE_OK (0) is success. The
 *   numeric values of the codes never change. After a failure,
 *   gpe_last_error_message() returns a message for the calling thread; it is never
 *   NULL and stays valid until the next failing call on that thread.
 * - No C++ exception crosses this boundary.
 * - Objects are opaque handles made by gpe_*_create* and released by gpe_*_destroy;
 *   destroy(NULL) does nothing. A handle is immutable after creation, so one handle
 *   may be used from many threads at once.
 * - Option structs begin with `struct_size`, which the caller sets to sizeof the
 *   struct it was compiled against (the *_INIT macros do so). Fields are only ever
 *   appended; the library accepts any size from the first version's up to its own.
 * - Tensors are DLPack DLTensors (dlpack/dlpack.h, DLPack 0.6 layout) on the CPU
 *   (kDLCPU). `strides` are in elements; strides == NULL means row-major compact.
 *   Positions are int64 ids; frequencies and scales are passed as double.
 * - Rotations: a plane pair (x1, x2) at position p with frequency theta becomes
 *   (x1 cos a - x2 sin a, x1 sin a + x2 cos a), a = p * theta, with p * theta formed
 *   exactly and reduced mod 2 pi in double before cos and sin (accurate at any int64
 *   position).
 * - Symbols are exported only through GPE_API; everything else in the shared library
 *   is hidden.
 * - Thread safety: every function may be called from any number of threads at once.
 *   The library has no global mutable state; handles are immutable, so calls may share
 *   a handle and read-only inputs, and give the same bits as when made one at a time
 *   (no work split depends on timing; the INR solvers' BLAS follows its own thread
 *   setting, e.g. OPENBLAS_NUM_THREADS). Output tensors and a handle being destroyed
 *   must not be in use by another call. The error message is per thread.
 *   Tested by c_api/thread_safety_test.cc.
 */
#ifndef GPE_GPE_H_
#define GPE_GPE_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GPE_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define GPE_API __attribute__((visibility("default")))
#else
#define GPE_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPE_NODISCARD __attribute__((warn_unused_result))
#else
#define GPE_NODISCARD
#endif

/* ---- Version ------------------------------------------------------------------- */

#define GPE_VERSION_MAJOR 0
#define GPE_VERSION_MINOR 7
#define GPE_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH; compare with gpe_version() at run time. */
#define GPE_VERSION_NUMBER \
  (GPE_VERSION_MAJOR * 10000 + GPE_VERSION_MINOR * 100 + GPE_VERSION_PATCH)

/* The GPE_VERSION_NUMBER the library was built with. */
GPE_API int gpe_version(void);
/* "MAJOR.MINOR.PATCH"; static storage, never NULL. */
GPE_API const char* gpe_version_string(void);

/* ---- Status and errors --------------------------------------------------------- */

typedef int32_t gpe_status;
enum {
  GPE_OK = 0,
  GPE_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, a bad value, mismatched shapes */
  GPE_ERROR_OUT_OF_RANGE = 2,     /* a size or index outside what is representable */
  GPE_ERROR_UNSUPPORTED = 3,      /* a dtype, device or layout this build lacks */
  GPE_ERROR_OUT_OF_MEMORY = 4,
  GPE_ERROR_INTERNAL = 5,         /* a bug in GroupPE: please report the message */
  GPE_ERROR_VERSION_MISMATCH = 6  /* an option struct newer than this library */
};

/* The message of the last failing call on this thread ("" if none). Never NULL. */
GPE_API const char* gpe_last_error_message(void);
/* "GPE_OK", "GPE_ERROR_INVALID_ARGUMENT", ...; "GPE_ERROR_UNKNOWN" otherwise. */
GPE_API const char* gpe_status_name(gpe_status status);

/* ---- SO(n) representations of the integers --------------------------------------
 *
 * rho(p) = exp(p S) for a skew-symmetric generator S of size dim x dim, applied to
 * batches of vectors at per-vector int64 positions. rho is orthogonal and
 * rho(p + q) = rho(p) rho(q), so <rho(i) q, rho(j) k> = <q, rho(j - i) k>.
 */
typedef struct gpe_so_rep gpe_so_rep;

enum {
  /* Pairs (2i, 2i + 1): RoFormer, GPT-J. */
  GPE_PAIRING_INTERLEAVED = 0,
  /* Pairs (i, i + rotary_dim / 2): GPT-NeoX, Llama. */
  GPE_PAIRING_HALF_SPLIT = 1
};

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
 * any other overlap between out and x is rejected. N may be 0. */
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_apply(const gpe_so_rep* rep, const DLTensor* positions,
                                                  const DLTensor* x, DLTensor* out);

/* The dense matrix rho(position), float64, shape [dim, dim], row-major or strided. */
GPE_API GPE_NODISCARD gpe_status gpe_so_rep_matrix(const gpe_so_rep* rep, int64_t position,
                                                   DLTensor* out);

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

/* -- GRAPE-M product of rank-2 generators (GRAPE summary 004, "Multiplicative GRAPE") --
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

/* -- Algebraic sequence encoding (Kogkalidis et al., paper 002, sec. 3.1) --
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

/* -- Shaw et al. relative key scores ("Self-Attention with Relative Position
 * Representations"; FORMULAS.md) --
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

/* -- Shaw et al. relative value terms (eq. 3; FORMULAS.md) --
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

/* -- Transformer-XL relative terms (Dai et al., sec. 3.3; FORMULAS.md) --
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

/* ---- Algebraic trees, grids, periodic domains and locality (since 0.3.0) -------------
 *
 * Kogkalidis et al. ("Algebraic Positional Encodings", paper 002; encodings/sequence/
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

/* ---- RoPE (since 0.3.0) -----------------------------------------------------------
 *
 * Rotary position embeddings as models use them (encodings/sequence/rope.h): frequency
 * schedules, interleaved or half-split pairing, partial rotary, xPos, axial 2D/3D RoPE
 * and M-RoPE sections, on bshd / sbhd / packed thd tensors, forward and backward.
 * Plane i (i < rotary_dim / 2) pairs features (2i, 2i + 1) (interleaved) or
 * (i, i + rotary_dim / 2) (half-split) and rotates them by a = p * theta_i (the rotation
 * convention above); both outputs are then multiplied by the schedule's attention
 * factor m (and by the xPos scale). Features rotary_dim .. head_dim - 1 pass through.
 * cos and sin are formed in double and rounded once to the tensor's type (float32 for
 * bfloat16 / float16 tensors, which are rotated in float32 and rounded once on store).
 */
typedef struct gpe_rope gpe_rope;

enum {
  GPE_ROPE_DEFAULT = 0,     /* theta_i = base^(-2i / rotary_dim) (Su et al., eq. 15) */
  GPE_ROPE_LINEAR = 1,      /* theta_i / factor (Chen et al., position interpolation) */
  GPE_ROPE_DYNAMIC_NTK = 2, /* base * (factor L / L0 - (factor - 1))^(r / (r - 2)) when
                               L = current_length > L0 = original_max_position */
  GPE_ROPE_YARN = 3,        /* Peng et al., NTK-by-parts ramp and attention temperature */
  GPE_ROPE_LONGROPE = 4,    /* Ding et al., per-plane rescale factors */
  GPE_ROPE_LLAMA3 = 5       /* Llama 3's wavelength-banded rule */
};

enum {
  GPE_ROPE_AXES_SINGLE = 0,            /* one position per token */
  GPE_ROPE_AXES_AXIAL = 1,             /* num_axes contiguous blocks of planes, each with
                                          default frequencies of rotary_dim / num_axes */
  GPE_ROPE_AXES_MROPE = 2,             /* Qwen2-VL: mrope_sections contiguous planes per axis */
  GPE_ROPE_AXES_MROPE_INTERLEAVED = 3  /* Qwen3-VL: plane i -> axis i % n for i < n * section */
};

typedef struct gpe_rope_options {
  uint32_t struct_size; /* sizeof(gpe_rope_options) */
  int32_t pairing;      /* GPE_PAIRING_* (default half-split) */
  int64_t head_dim;     /* >= 2 */
  int64_t rotary_dim;   /* even, 2 <= rotary_dim <= head_dim; 0 means head_dim */
  double base;          /* finite, > 1 */
  int32_t schedule;     /* GPE_ROPE_* */
  int32_t num_threads;  /* threads per apply call, 1 .. 256 */
  /* LINEAR, DYNAMIC_NTK, YARN, LLAMA3: finite > 0 (YaRN: >= 1). */
  double factor;
  /* L0: DYNAMIC_NTK (>= 1), YARN (>= 1), LONGROPE (>= 2), LLAMA3 (>= 1). */
  int64_t original_max_position;
  /* L: DYNAMIC_NTK (>= 0), LONGROPE (long_factor when L > L0, else short_factor). */
  int64_t current_length;
  /* YARN: finite, beta_fast > beta_slow > 0; yarn_truncate nonzero floors/ceils the
   * ramp's ends (the published default). */
  double beta_fast, beta_slow;
  int32_t yarn_truncate;
  /* YARN: nonzero uses mscale / mscale_all_dim (DeepSeek; both finite > 0). */
  int32_t has_mscale;
  double mscale, mscale_all_dim;
  /* YARN, LONGROPE: nonzero overrides the schedule's attention factor (finite > 0). */
  int32_t has_attention_factor;
  double attention_factor;
  /* LONGROPE: rotary_dim / 2 finite > 0 values each (copied), and max_position (>= 1). */
  const double* short_factor;
  int64_t short_factor_len;
  const double* long_factor;
  int64_t long_factor_len;
  int64_t max_position;
  /* LLAMA3: finite, 0 < low_freq_factor < high_freq_factor. */
  double low_freq_factor, high_freq_factor;
  /* xPos (Sun et al., eq. 9-10; single axis only): nonzero enables; queries are scaled
   * by zeta_i^((p - centre) / scale_base), keys by its inverse,
   * zeta_i = (2i / rotary_dim + gamma) / (1 + gamma). */
  int32_t xpos;
  double xpos_gamma;      /* finite > 0 */
  double xpos_scale_base; /* finite > 0 */
  int64_t xpos_centre;
  /* Multi-axis RoPE: GPE_ROPE_AXES_*. AXIAL takes num_axes (2 .. 8, dividing
   * rotary_dim / 2) and the DEFAULT schedule; MROPE* take mrope_sections (1 .. 8 plane
   * counts summing to rotary_dim / 2, copied) with any schedule. */
  int32_t axes;
  int32_t num_axes;
  const int64_t* mrope_sections;
  int64_t num_mrope_sections;
} gpe_rope_options;
#define GPE_ROPE_OPTIONS_INIT                                                              \
  { (uint32_t)sizeof(gpe_rope_options), GPE_PAIRING_HALF_SPLIT, 0, 0, 10000.0,            \
    GPE_ROPE_DEFAULT, 1, 1.0, 4096, 0, 32.0, 1.0, 1, 0, 1.0, 1.0, 0, 1.0, NULL, 0, NULL, 0, \
    131072, 1.0, 4.0, 0, 0.4, 512.0, 0, GPE_ROPE_AXES_SINGLE, 1, NULL, 0 }

enum { GPE_ROPE_LAYOUT_BSHD = 0, GPE_ROPE_LAYOUT_SBHD = 1, GPE_ROPE_LAYOUT_THD = 2 };
enum { GPE_ROPE_QUERY = 0, GPE_ROPE_KEY = 1 }; /* matters only for xPos */

/* Where the tokens of a q or k tensor sit. The tensor x is
 *   BSHD: [batch, seq, heads, head_dim]   SBHD: [seq, batch, heads, head_dim]
 *   THD:  [total_tokens, heads, head_dim], sequences delimited by cu_seqlens
 * with any positive strides and head_dim contiguous (stride 1). Tokens are numbered
 * t = b * seq + s (BSHD, SBHD) or by row (THD). At most one of position_ids / offsets:
 * - position_ids: int64 [num_tokens], or [num_axes, num_tokens] for multi-axis RoPE;
 * - offsets: int64 [batch], position = offsets[b] + index within sequence b;
 * - neither: offsets of 0.
 * cu_seqlens: int64 [batch + 1], 0 = cu[0] <= cu[1] <= ... <= cu[batch] = total_tokens
 * (THD only, NULL otherwise). */
typedef struct gpe_rope_tokens {
  uint32_t struct_size; /* sizeof(gpe_rope_tokens) */
  int32_t layout;       /* GPE_ROPE_LAYOUT_* */
  int32_t role;         /* GPE_ROPE_QUERY or GPE_ROPE_KEY */
  const DLTensor* position_ids;
  const DLTensor* offsets;
  const DLTensor* cu_seqlens;
} gpe_rope_tokens;
#define GPE_ROPE_TOKENS_INIT \
  { (uint32_t)sizeof(gpe_rope_tokens), GPE_ROPE_LAYOUT_BSHD, GPE_ROPE_QUERY, NULL, NULL, NULL }

/* Sets options->schedule and that schedule's parameters to the values the models
 * publish, leaving every other field as it is: LLAMA3 factor 8, low/high frequency
 * factors 1 and 4, original context 8192 (Llama 3.1); YARN beta_fast 32, beta_slow 1,
 * truncation on, factor 1 and original context 4096 (set factor and L0 for the model);
 * LONGROPE original context 4096 and max_position 131072 (Phi-3-128k; the factor lists
 * are the model's); DEFAULT, LINEAR, DYNAMIC_NTK factor 1 and original context 4096. The
 * base (rope_theta) is the model's: Llama 3 uses 500000. options->struct_size must be set
 * (GPE_ROPE_OPTIONS_INIT). */
GPE_API GPE_NODISCARD gpe_status gpe_rope_options_use_schedule(int32_t schedule,
                                                               gpe_rope_options* options);
/* Copies what it needs from options (factor lists, sections). */
GPE_API GPE_NODISCARD gpe_status gpe_rope_create(const gpe_rope_options* options, gpe_rope** out);
GPE_API void gpe_rope_destroy(gpe_rope* rope);
/* head_dim, rotary_dim, num_axes (each may be NULL). */
GPE_API GPE_NODISCARD gpe_status gpe_rope_shape(const gpe_rope* rope, int64_t* head_dim,
                                                int64_t* rotary_dim, int64_t* num_axes);
/* The schedule's frequencies (radians per position) and attention factor: thetas
 * receives rotary_dim / 2 doubles (num_thetas must be that many); attention_factor may
 * be NULL. */
GPE_API GPE_NODISCARD gpe_status gpe_rope_frequencies(const gpe_rope* rope, double* thetas,
                                                      int64_t num_thetas,
                                                      double* attention_factor);
/* out = m R(a) x per token and head. x and out: float32, float64, bfloat16 or float16
 * (the same dtype and shape). out may be x itself (in place); otherwise it must not
 * overlap x, and may have other (positive) strides. */
GPE_API GPE_NODISCARD gpe_status gpe_rope_forward(const gpe_rope* rope,
                                                  const gpe_rope_tokens* tokens,
                                                  const DLTensor* x, DLTensor* out);
/* The backward pass: dx = (m R(a))^T dy = m R(-a) dy (xPos: the same scale). The rules
 * of gpe_rope_forward; dx may be dy. */
GPE_API GPE_NODISCARD gpe_status gpe_rope_backward(const gpe_rope* rope,
                                                   const gpe_rope_tokens* tokens,
                                                   const DLTensor* dy, DLTensor* dx);

/* A cos/sin table built once for one token numbering and reused: forming the exact
 * angles costs ~0.2 us per (position, plane), while applying a table runs at memory
 * bandwidth, so build one per forward pass and apply it to q, k and every layer.
 * gpe_rope_table_create reads the layout, cu_seqlens, positions and role from tokens and
 * the shape and dtype from `like` (a tensor as gpe_rope_forward takes; its data is not
 * read). It copies everything it needs (the encoding included): rope and the position
 * tensors may be released afterwards. A table built from a float64 tensor serves float64
 * tensors; one built from float32, bfloat16 or float16 serves those three. */
typedef struct gpe_rope_table gpe_rope_table;

GPE_API GPE_NODISCARD gpe_status gpe_rope_table_create(const gpe_rope* rope,
                                                       const gpe_rope_tokens* tokens,
                                                       const DLTensor* like,
                                                       gpe_rope_table** out);
GPE_API void gpe_rope_table_destroy(gpe_rope_table* table);
/* gpe_rope_forward / gpe_rope_backward with the table's tokens: x (dy) has the table's
 * layout and token count (any number of heads, any strides as gpe_rope_forward); out (dx)
 * may be x (dy). */
GPE_API GPE_NODISCARD gpe_status gpe_rope_table_forward(const gpe_rope_table* table,
                                                        const DLTensor* x, DLTensor* out);
GPE_API GPE_NODISCARD gpe_status gpe_rope_table_backward(const gpe_rope_table* table,
                                                         const DLTensor* dy, DLTensor* dx);

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
  int64_t max_distance;  /* >= 1 */
  const double* table;   /* num_buckets * num_heads finite values, row-major [bucket, head] */
} gpe_t5_options;
#define GPE_T5_OPTIONS_INIT { (uint32_t)sizeof(gpe_t5_options), 1, 0, 32, 128, NULL }

typedef struct gpe_fox_options {
  uint32_t struct_size;   /* sizeof(gpe_fox_options) */
  int64_t length;         /* tokens, >= 0 */
  int64_t num_heads;      /* >= 1 */
  int64_t first_position; /* token t has position first_position + t */
  const double* gate_logits; /* length * num_heads finite values, row-major [token, head] */
} gpe_fox_options;
#define GPE_FOX_OPTIONS_INIT { (uint32_t)sizeof(gpe_fox_options), 0, 0, 0, NULL }

typedef struct gpe_grape_ap_options {
  uint32_t struct_size;   /* sizeof(gpe_grape_ap_options) */
  int64_t length;         /* tokens, >= 0 */
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
 * Additive GRAPE (GRAPE summary 004, "Additive GRAPE"): rows of q and k are lifted to
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
 * Both agree bit for bit for power-of-two slopes and gated biases, and otherwise to
 * the lift's rounding of m j - m i (~1e-16 m max(|i|, |j|)).
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
  int64_t length;            /* tokens, >= 0 */
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

/* ---- Coordinate encodings, analysis and INR solvers ---------------------------------
 *
 * Matrices are float64 DLTensors of any strides. Coordinates are float64 [N].
 */

/* Zheng et al.'s shifted-basis embedders: psi(t_i - x) at K shifts t_i = lo + i (hi - lo) / K. */
enum {
  GPE_SHIFTED_GAUSSIAN = 0,  /* exp(-u^2 / (2 width^2)) */
  GPE_SHIFTED_TRIANGLE = 1,  /* max(1 - |u| / (width / 2), 0) */
  GPE_SHIFTED_RECTANGLE = 2, /* 1 for |u| < width / 2 */
  GPE_SHIFTED_IMPULSE = 3,   /* one-hot at the nearest shift; width unused */
  GPE_SHIFTED_SINE = 4,      /* sin(2 pi u / width) */
  GPE_SHIFTED_SQUARE = 5     /* sgn(sin(2 pi u / width)) */
};

typedef struct gpe_shifted_basis_options {
  uint32_t struct_size; /* sizeof(gpe_shifted_basis_options) */
  int32_t kind;         /* GPE_SHIFTED_* */
  int64_t num_shifts;   /* K >= 1 */
  double width;         /* finite, > 0 (ignored for the impulse) */
  double lo, hi;        /* finite, lo < hi */
} gpe_shifted_basis_options;
#define GPE_SHIFTED_BASIS_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_shifted_basis_options), GPE_SHIFTED_GAUSSIAN, 0, 0.0, 0.0, 1.0 }

/* out[n, i] = psi(t_i - coords[n]). coords: float64 [N] finite; out: float64 [N, K]. */
GPE_API GPE_NODISCARD gpe_status gpe_shifted_basis_encode(const gpe_shifted_basis_options* options,
                                                          const DLTensor* coords, DLTensor* out);

/* Stable rank |A|_F^2 / |A|_2^2 of a finite, non-zero float64 matrix [M, F]. */
GPE_API GPE_NODISCARD gpe_status gpe_stable_rank(const DLTensor* matrix, double* out);

typedef struct gpe_separable_fit_options {
  uint32_t struct_size;           /* sizeof(gpe_separable_fit_options) */
  int32_t float32_image_products; /* nonzero: the image-sized product in float32 */
  double lambda;                  /* ridge on each factor, finite, >= 0 */
  /* Added after 0.3.0 (older callers' structs end before it and get 0): in [0, 1). 0: the
   * Cholesky route, which refuses singular factors. > 0: each factor's pseudo-inverse
   * from its SVD, singular values s <= rcond * s_max dropped and the others filtered by
   * s / (s^2 + lambda); accepts rank-deficient factors (NumPy's pinv(Psi, rcond) at
   * lambda = 0). float32_image_products is ignored on this route. */
  double rcond;
} gpe_separable_fit_options;
#define GPE_SEPARABLE_FIT_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_separable_fit_options), 0, 0.0, 0.0 }

/* The closed-form fit of a complex encoding + one linear layer on a separable grid
 * (Zheng et al. eq. 10): W = A_y S A_x^T, A = (Psi^T Psi + lambda I)^-1 Psi^T.
 * psi_y: [Ny, Ky], psi_x: [Nx, Kx], image: [Ny, Nx] (rows = y), w (out): [Ky, Kx].
 * With rcond = 0, a rank-deficient or numerically singular factor (cond(Psi^T Psi +
 * lambda I) above ~4e12) is GPE_ERROR_INVALID_ARGUMENT with a message suggesting
 * lambda > 0 or rcond > 0; no garbage is returned. A factor can be well-posed yet
 * ill-conditioned (the exact minimiser then interpolates the samples with weights that
 * explode between them): check gpe_inr_condition_number and use rcond or lambda. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_2d(const gpe_separable_fit_options* options,
                                                          const DLTensor* psi_y,
                                                          const DLTensor* psi_x,
                                                          const DLTensor* image, DLTensor* w);
/* out = Psi_y W Psi_x^T: [Ny, Nx]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_separable_2d(const DLTensor* psi_y,
                                                              const DLTensor* psi_x,
                                                              const DLTensor* w, DLTensor* out);

/* ---- Coordinate encoders, graph encodings and embedder analysis (after 0.3.0) -------
 *
 * One opaque handle type for every point encoding of encodings/coordinate/: made by a
 * gpe_*_create function below, used through gpe_coordinate_encode/_backward, released
 * by gpe_coordinate_encoder_destroy. Points are float64 [N, D] (any strides, N >= 1,
 * finite), features float64 [N, F] with (D, F) from gpe_coordinate_encoder_dims.
 * Backward is the vector-Jacobian product with respect to the points:
 * grad_points[n, d] = sum_f grad_features[n, f] d features[n, f] / d points[n, d].
 */
typedef struct gpe_coordinate_encoder gpe_coordinate_encoder;

GPE_API void gpe_coordinate_encoder_destroy(gpe_coordinate_encoder* encoder);
/* input_dim = D, output_dim = F (either pointer may be NULL). */
GPE_API GPE_NODISCARD gpe_status gpe_coordinate_encoder_dims(const gpe_coordinate_encoder* encoder,
                                                             int64_t* input_dim,
                                                             int64_t* output_dim);
/* features: float64 [N, F], must not overlap points. */
GPE_API GPE_NODISCARD gpe_status gpe_coordinate_encode(const gpe_coordinate_encoder* encoder,
                                                       const DLTensor* points,
                                                       DLTensor* features);
/* grad_features: float64 [N, F] finite; grad_points (out): float64 [N, D]. */
GPE_API GPE_NODISCARD gpe_status gpe_coordinate_backward(const gpe_coordinate_encoder* encoder,
                                                         const DLTensor* points,
                                                         const DLTensor* grad_features,
                                                         DLTensor* grad_points);

/* Fourier features x -> [cos(w_f . x)]_f ++ [sin(w_f . x)]_f: F = 2 * num_frequency_rows,
 * cosines first. */
enum {
  GPE_FOURIER_GAUSSIAN = 0,   /* Tancik et al.: entries of b ~ N(0, scale^2), seeded */
  GPE_FOURIER_LINEAR = 1,     /* Zheng et al. eq. 50: per axis b_i = ((K - i) + i 2^scale) / K */
  GPE_FOURIER_LOG_LINEAR = 2, /* Zheng et al. eq. 51: per axis b_i = 2^(scale i / K) */
  GPE_FOURIER_NERF = 3,       /* Mildenhall et al.: per axis angles 2^k pi x, k < K */
  GPE_FOURIER_TXT = 4         /* Lim et al.'s T x T: dim 2, alpha ~ N(0, scale^2), no 2 pi */
};
enum {
  GPE_FREQUENCY_TWO_PI = 0, /* angle = 2 pi b . x */
  GPE_FREQUENCY_ANGULAR = 1 /* angle = b . x */
};
typedef struct gpe_fourier_features_options {
  uint32_t struct_size;    /* sizeof(gpe_fourier_features_options) */
  int32_t kind;            /* GPE_FOURIER_* */
  int64_t dim;             /* D >= 1 (2 for TXT) */
  int64_t num_frequencies; /* K >= 1: GAUSSIAN/TXT rows in all; LINEAR/LOG_LINEAR/NERF per axis */
  double scale;            /* GAUSSIAN/TXT: std (> 0); LINEAR/LOG_LINEAR: sigma; NERF: unused */
  int32_t convention;      /* GPE_FREQUENCY_*: GAUSSIAN only (the others fix theirs) */
  uint64_t seed;           /* GAUSSIAN/TXT: std::mt19937_64 seed */
} gpe_fourier_features_options;
#define GPE_FOURIER_FEATURES_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_fourier_features_options), GPE_FOURIER_GAUSSIAN, 2, 16, 1.0, \
    GPE_FREQUENCY_TWO_PI, 0 }
GPE_API GPE_NODISCARD gpe_status gpe_fourier_features_create(
    const gpe_fourier_features_options* options, gpe_coordinate_encoder** out);
/* Given frequency rows b: float64 [F, D] finite, angles by `convention`. */
GPE_API GPE_NODISCARD gpe_status gpe_fourier_features_create_from_frequencies(
    const DLTensor* frequencies, int32_t convention, gpe_coordinate_encoder** out);
/* The angular frequencies w (angle = w . x): float64 [F, D] (out). Fourier handles only. */
GPE_API GPE_NODISCARD gpe_status gpe_fourier_features_angular_frequencies(
    const gpe_coordinate_encoder* encoder, DLTensor* out);

/* Lim et al.'s SO(2) encodings: (r, theta) -> J_m(c r) cos(k theta) for each term
 * (m, c, k), then J_m(c r) sin(k theta) for each: F = 2T. Points are Cartesian (x, y),
 * or polar (r >= 0, theta) when `polar` is nonzero. */
typedef struct gpe_so2_bessel_options {
  uint32_t struct_size; /* sizeof(gpe_so2_bessel_options) */
  int32_t polar;        /* 0: (x, y) points; 1: (r, theta) */
  int64_t num_terms;    /* T >= 1 */
  double max_scale;     /* C: c ~ U[0, C], finite, >= 0 */
  int32_t max_k;        /* K >= 2: k ~ U{1, ..., K - 1} */
  int32_t order_m;      /* 0 <= m <= 20 (Lim et al.: 0) */
  uint64_t seed;        /* std::mt19937_64 seed */
} gpe_so2_bessel_options;
#define GPE_SO2_BESSEL_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_so2_bessel_options), 0, 16, 1.0, 2, 0, 0 }
/* Lim et al.'s sampling (appendix D.2). */
GPE_API GPE_NODISCARD gpe_status gpe_so2_bessel_create_sampled(const gpe_so2_bessel_options* options,
                                                               gpe_coordinate_encoder** out);
/* Given terms: orders int64 [T] (0..20), scales float64 [T] (finite, >= 0), weights
 * int64 [T] (|k| <= 2^20). */
GPE_API GPE_NODISCARD gpe_status gpe_so2_bessel_create(const DLTensor* orders,
                                                       const DLTensor* scales,
                                                       const DLTensor* weights, int32_t polar,
                                                       gpe_coordinate_encoder** out);
/* The terms of an SO(2) handle (each output may be NULL): int64 [T], float64 [T], int64 [T]. */
GPE_API GPE_NODISCARD gpe_status gpe_so2_bessel_terms(const gpe_coordinate_encoder* encoder,
                                                      DLTensor* orders, DLTensor* scales,
                                                      DLTensor* weights);
/* out[n] = J_order(x[n]), the Bessel function of the first kind; order 0..20, x float64
 * [N] finite and >= 0; out float64 [N]. */
GPE_API GPE_NODISCARD gpe_status gpe_bessel_j(int32_t order, const DLTensor* x, DLTensor* out);

/* Zheng et al.'s shifted bases over D axes (one gpe_shifted_basis_options per axis):
 * SIMPLE concatenates the per-axis encodings (eq. 16, F = sum K_d); COMPLEX is their
 * Kronecker product (eq. 17, F = prod K_d <= 2^26), feature k_0 + K_0 (k_1 + K_1 ...):
 * axis 0 varies fastest. */
enum { GPE_SHIFTED_SIMPLE = 0, GPE_SHIFTED_COMPLEX = 1 };
GPE_API GPE_NODISCARD gpe_status gpe_shifted_encoder_create(int32_t form,
                                                            const gpe_shifted_basis_options* axes,
                                                            int64_t num_axes,
                                                            gpe_coordinate_encoder** out);

/* Real spherical harmonics Y_lm, l = 0..max_degree (<= 64), orthonormal on the sphere,
 * no Condon-Shortley phase, index l^2 + l + m. Points: float64 [N, 3] non-zero (only
 * the direction matters). */
GPE_API GPE_NODISCARD gpe_status gpe_spherical_harmonics_create(int32_t max_degree,
                                                                gpe_coordinate_encoder** out);

/* Laplacian eigenvector encodings of an undirected graph: the k smallest eigenpairs
 * (ascending), each vector's first entry of largest magnitude (ties within 1e-9
 * relative) made positive; within a repeated eigenvalue the basis is arbitrary (see
 * encodings/coordinate/laplacian_eigenvectors.h). */
enum { GPE_LAPLACIAN_COMBINATORIAL = 0 /* D - A */, GPE_LAPLACIAN_SYMMETRIC = 1 /* I - D^-1/2 A D^-1/2 */ };
typedef struct gpe_laplacian_options {
  uint32_t struct_size; /* sizeof(gpe_laplacian_options) */
  int32_t kind;         /* GPE_LAPLACIAN_* */
  int32_t skip_first;   /* nonzero: drop the first (eigenvalue 0) pair */
} gpe_laplacian_options;
#define GPE_LAPLACIAN_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_laplacian_options), GPE_LAPLACIAN_COMBINATORIAL, 0 }
/* edges: int64 [E, 2] node ids in [0, num_nodes), no self-loops; weights: float64 [E]
 * finite > 0, or NULL for 1; eigenvalues (out): float64 [k], k >= 1; eigenvectors (out):
 * float64 [num_nodes, k]. num_nodes <= 4096 (dense solver). */
GPE_API GPE_NODISCARD gpe_status gpe_laplacian_eigenvectors(const gpe_laplacian_options* options,
                                                            int64_t num_nodes,
                                                            const DLTensor* edges,
                                                            const DLTensor* weights,
                                                            DLTensor* eigenvalues,
                                                            DLTensor* eigenvectors);

/* Distance preservation (Zheng et al. eq. 6): out[i, j] = sample_spacing * features[i] .
 * features[j]. features: float64 [N, F] finite; out: float64 [N, N]; spacing finite > 0. */
GPE_API GPE_NODISCARD gpe_status gpe_embedded_distance_matrix(const DLTensor* features,
                                                              double sample_spacing,
                                                              DLTensor* out);
/* The papers' closed forms for embedders (stated in encodings/analysis/ headers): */
enum {
  GPE_EMBEDDER_GAUSSIAN = 0,  /* parameter: std sigma */
  GPE_EMBEDDER_RECTANGLE = 1, /* parameter: width w */
  GPE_EMBEDDER_TRIANGLE = 2,  /* parameter: support width w */
  GPE_EMBEDDER_RFF = 3        /* parameter: frequency std sigma (2 pi convention) */
};
/* Stable rank of the embedder sampled densely on [0, 1] at num_points points. */
GPE_API GPE_NODISCARD gpe_status gpe_embedder_stable_rank(int32_t embedder, double parameter,
                                                          int64_t num_points, double* out);
/* D(delta) for delta = x1 - x2 (RFF: per frequency, E[cos 2 pi b delta]). */
GPE_API GPE_NODISCARD gpe_status gpe_embedder_distance(int32_t embedder, double parameter,
                                                       double delta, double* out);

/* Volumes on a separable grid (mode-n products, Zheng et al. sec. 5): W = V x_0 A_0 x_1
 * A_1 x_2 A_2 with A_d = (Psi_d^T Psi_d + lambda I)^-1 Psi_d^T (or the truncated-SVD
 * pseudo-inverse when rcond > 0; float32_image_products is ignored). psi_d: float64
 * [n_d, K_d]; volume: float64 [n_0, n_1, n_2]; w (out): float64 [K_0, K_1, K_2]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_3d(const gpe_separable_fit_options* options,
                                                          const DLTensor* psi_0,
                                                          const DLTensor* psi_1,
                                                          const DLTensor* psi_2,
                                                          const DLTensor* volume, DLTensor* w);
/* out = W x_0 Psi_0 x_1 Psi_1 x_2 Psi_2: float64 [n_0, n_1, n_2]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_separable_3d(const DLTensor* psi_0,
                                                              const DLTensor* psi_1,
                                                              const DLTensor* psi_2,
                                                              const DLTensor* w, DLTensor* out);

/* Non-separable samples (Zheng et al. sec. 5, appendix B.2): the model's values on a
 * virtual grid grid_y x grid_x, V = Psi(grid_y) W Psi(grid_x)^T, reach a scattered point
 * through the 4 blending weights of its cell (eq. 44); W minimises |f(points) - values|^2
 * + lambda |V|_F^2 by preconditioned CGLS (inr/blended.h). encoder_x / encoder_y: 1-D
 * coordinate encoders (input width 1, e.g. a one-axis gpe_shifted_encoder_create);
 * grid_x [N], grid_y [M]: >= 2 strictly increasing; points: float64 [P, 2] as (x, y),
 * inside the grid's box; values: float64 [P]; w (out): float64 [K_y, K_x]. */
typedef struct gpe_blended_fit_options {
  uint32_t struct_size;   /* sizeof(gpe_blended_fit_options) */
  int32_t max_iterations; /* >= 1 */
  double lambda;          /* ridge on the virtual-grid values, finite, >= 0 */
  double tolerance;       /* stop when |grad| <= tolerance |grad_0|; finite, >= 0 */
} gpe_blended_fit_options;
#define GPE_BLENDED_FIT_OPTIONS_INIT \
  { (uint32_t)sizeof(gpe_blended_fit_options), 500, 1e-6, 1e-6 }
/* iterations and rms_residual (sqrt of the mean squared error at the samples) may be NULL. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_blended_2d(
    const gpe_blended_fit_options* options, const gpe_coordinate_encoder* encoder_x,
    const gpe_coordinate_encoder* encoder_y, const DLTensor* grid_x, const DLTensor* grid_y,
    const DLTensor* points, const DLTensor* values, DLTensor* w, int32_t* iterations,
    double* rms_residual);
/* out[p] = f(points[p]) for weights w: float64 [P]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_predict_blended_2d(
    const gpe_coordinate_encoder* encoder_x, const gpe_coordinate_encoder* encoder_y,
    const DLTensor* grid_x, const DLTensor* grid_y, const DLTensor* points, const DLTensor* w,
    DLTensor* out);

/* cond(Psi) = s_max / s_min of a float64 [N, K] factor (+inf when rank deficient or
 * K > N): how much the exact closed form amplifies data errors. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_condition_number(const DLTensor* psi, double* out);

/* ---- INR training, data and metrics (since 0.5.0) ------------------------------------
 *
 * Iterative fits (full-batch Adam), Lim et al.'s analytic data and the papers' splits,
 * image files, and the error metrics, from inr/ (mlp.h, linear_gd.h, data.h).
 */

/* Progress of a long fit: called on the calling thread after `step` updates with the
 * training loss (MSE) of the forward pass that produced the last update's gradient. */
typedef void (*gpe_progress_callback)(void* user_data, int64_t step, double train_loss);

/* Adam (Kingma & Ba 2015, Algorithm 1), as PyTorch's torch.optim.Adam: with t the step
 * count after increment, m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
 * p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). */

/* -- A small fully connected ReLU network trained full-batch (Lim et al., appendix D.2) --
 * Layer l maps H_l [N, fan_in] to H_l W_l + 1 b_l (W_l [fan_in, fan_out]); hidden layers
 * apply ReLU, the output layer is linear. input_dim -> hidden_width (num_hidden_layers
 * times) -> output_dim; num_hidden_layers = 0 is one linear layer. Parameters are ONE flat
 * vector, layer by layer: W_0 (row-major), b_0, W_1, b_1, ... (gpe_inr_mlp_num_parameters
 * entries). Initialisation: PyTorch's nn.Linear default, W, b ~ U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)), from a seeded std::mt19937_64 (the same network on every platform).
 * Loss: MSE = mean over all N x output_dim entries of (prediction - target)^2.
 * Scalar type: float32 tensors train the float32 network (OpenBLAS sgemm, the fast path);
 * float64 tensors train the same network in float64 (for checks against references). */
typedef struct gpe_mlp_options {
  uint32_t struct_size;      /* sizeof(gpe_mlp_options) */
  int64_t hidden_width;      /* >= 1 (Lim et al.: 128) */
  int64_t num_hidden_layers; /* >= 0 (Lim et al.: 3) */
  int64_t steps;             /* full-batch Adam steps, >= 0 (Lim et al.: 500) */
  double learning_rate;      /* finite, > 0 */
  double beta1, beta2;       /* in [0, 1) */
  double epsilon;            /* finite, >= 0 */
  uint64_t seed;             /* initialisation when no initial parameters are given */
  int64_t report_every;      /* progress every report_every steps and after the last; 0: last only */
  gpe_progress_callback progress; /* optional */
  void* progress_user_data;
} gpe_mlp_options;
#define GPE_MLP_OPTIONS_INIT                                                        \
  { (uint32_t)sizeof(gpe_mlp_options), 128, 3, 500, 1e-3, 0.9, 0.999, 1e-8, 0, 0, \
    NULL, NULL }

/* The parameter count for input_dim -> ... -> output_dim (both >= 1). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_num_parameters(const gpe_mlp_options* options,
                                                            int64_t input_dim,
                                                            int64_t output_dim, int64_t* out);
/* The seeded initial parameters (options->seed): float32 or float64 [P]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_init(const gpe_mlp_options* options,
                                                  int64_t input_dim, int64_t output_dim,
                                                  DLTensor* parameters);
/* Trains on every row at each step. features [N, input_dim] and targets [N, output_dim]:
 * float32 or float64 (one dtype for all tensors), finite, N >= 1. initial_parameters
 * ([P], or NULL for the seeded initialisation) are not modified; parameters (out, [P]) receives
 * the trained network and may be initial_parameters itself. train_loss (optional, float64
 * [steps]) receives the MSE before each update; final_loss (optional) the MSE after the
 * last. A non-finite loss (too large a learning rate) is GPE_ERROR_INVALID_ARGUMENT and
 * leaves the outputs unwritten. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_fit(const gpe_mlp_options* options,
                                                 const DLTensor* features,
                                                 const DLTensor* targets,
                                                 const DLTensor* initial_parameters,
                                                 DLTensor* parameters, DLTensor* train_loss,
                                                 double* final_loss);
/* out [N, output_dim] = the network's output on features [N, input_dim] (float32 or
 * float64, with parameters [P] of the same dtype; only the options' shape fields are read). */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_predict(const gpe_mlp_options* options,
                                                     const DLTensor* parameters,
                                                     const DLTensor* features, DLTensor* out);
/* (Since 0.6.0.) A held-out validation set for gpe_inr_mlp_fit_v2: the MSE of the network on it is
 * evaluated after every options->report_every updates and after the last (report_every
 * = 0: after the last only; steps = 0: once, at step 0, on the initial network): the
 * schedule of the progress callback, whose train_loss is unchanged. K, the number of
 * evaluations, is what gpe_inr_mlp_num_evaluations returns.
 *  - features [M, input_dim] and targets [M, output_dim]: the fit's dtype, finite,
 *    M >= 1; both or neither (neither: no validation, and no outputs below). They may
 *    share memory with the training features and targets.
 *  - steps (optional output, int64 [K]): the update count after which each evaluation
 *    was made, increasing; loss (optional output, float64 [K]): the validation MSE
 *    (accumulated in double) at each. Written only when the fit succeeds.
 *  - progress (Since 0.7.0; optional, with progress_user_data): called on the calling
 *    thread at each evaluation, K times, after options->progress when both are set, with
 *    the step and train_loss options->progress gets and the validation MSE just
 *    evaluated (the value written to loss[k] when the fit succeeds). A progress without
 *    features and targets is GPE_ERROR_INVALID_ARGUMENT. */
/* The validation progress of gpe_mlp_validation.progress (since 0.7.0): gpe_progress_callback's
 * arguments, then the held-out MSE of the network after `step` updates. */
typedef void (*gpe_validation_progress_callback)(void* user_data, int64_t step, double train_loss,
                                                 double validation_loss);
typedef struct gpe_mlp_validation {
  uint32_t struct_size;     /* sizeof(gpe_mlp_validation) */
  const DLTensor* features; /* [M, input_dim] */
  const DLTensor* targets;  /* [M, output_dim] */
  DLTensor* steps;          /* optional out: int64 [K] */
  DLTensor* loss;           /* optional out: float64 [K] */
  /* (Since 0.7.0; a struct_size of 0.6.0's sizeof, offsetof(gpe_mlp_validation, progress),
   * is still accepted and these two are then not read.) */
  gpe_validation_progress_callback progress; /* optional; needs features and targets */
  void* progress_user_data;
} gpe_mlp_validation;
#define GPE_MLP_VALIDATION_INIT \
  { (uint32_t)sizeof(gpe_mlp_validation), NULL, NULL, NULL, NULL, NULL, NULL }

/* K, the number of validation evaluations (and progress calls) of a fit with
 * options->steps (0..2^31) and options->report_every (>= 0):
 * floor(steps / report_every) when report_every > 0, plus one unless the last step is a
 * multiple of report_every; 1 when steps = 0. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_num_evaluations(const gpe_mlp_options* options,
                                                             int64_t* out);
/* gpe_inr_mlp_fit with an optional validation set (validation NULL: exactly
 * gpe_inr_mlp_fit). The training bits do not depend on the validation set. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mlp_fit_v2(
    const gpe_mlp_options* options, const DLTensor* features, const DLTensor* targets,
    const DLTensor* initial_parameters, DLTensor* parameters, DLTensor* train_loss,
    double* final_loss, const gpe_mlp_validation* validation);

/* -- Gradient descent on the linear layer over a fixed encoding (Zheng et al. sec. 6.2) --
 * Adam from W = 0 on the MSE, full batch, float64, with the learning rate decayed
 * exponentially from learning_rate (step 1) to final_learning_rate (the last step):
 * lr_t = lr (final / lr)^((t - 1) / (steps - 1)). Without regularisation this is the
 * least-squares problem the closed forms solve at lambda = 0. */
typedef struct gpe_linear_adam_options {
  uint32_t struct_size;       /* sizeof(gpe_linear_adam_options) */
  int64_t steps;              /* >= 1 */
  double learning_rate;       /* finite, > 0 */
  double final_learning_rate; /* finite, > 0; equal to learning_rate: constant */
  double beta1, beta2;        /* in [0, 1) */
  double epsilon;             /* finite, >= 0 */
  int64_t report_every;       /* progress every report_every steps; 0: never */
  gpe_progress_callback progress; /* optional */
  void* progress_user_data;
} gpe_linear_adam_options;
#define GPE_LINEAR_ADAM_OPTIONS_INIT                                                      \
  { (uint32_t)sizeof(gpe_linear_adam_options), 2000, 1e-2, 1e-2, 0.9, 0.999, 1e-8, 0, NULL, \
    NULL }

/* Dense model (the simple embedder, Zheng et al. eq. 16): Y_hat = Phi W.
 * features Phi: float64 [N, F], targets Y: float64 [N, C], finite, non-empty; w (out):
 * float64 [F, C]; train_loss (optional, float64 [steps]): the MSE before each update;
 * final_loss (optional): the MSE after the last. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_dense_adam(const gpe_linear_adam_options* options,
                                                        const DLTensor* features,
                                                        const DLTensor* targets, DLTensor* w,
                                                        DLTensor* train_loss,
                                                        double* final_loss);
/* Separable model (the complex embedder on a grid, eq. 10): S_hat = Psi_y W Psi_x^T, never
 * forming the Kronecker product. psi_y [Ny, Ky], psi_x [Nx, Kx], image [Ny, Nx]; w (out)
 * [Ky, Kx]; the rest as gpe_inr_fit_dense_adam. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_fit_separable_adam_2d(
    const gpe_linear_adam_options* options, const DLTensor* psi_y, const DLTensor* psi_x,
    const DLTensor* image, DLTensor* w, DLTensor* train_loss, double* final_loss);

/* -- Data (Lim et al., appendix D.1; Zheng et al.'s splits) --
 * Grid: n x n pixel centres over [-1, 1]^2, rows = y (row i at y_i), columns = x, with
 * x_j = -1 + (2 j + 1) / n; r = sqrt(x^2 + y^2), theta = atan2(y, x). */
enum { GPE_SYNTHETIC_RADIAL = 0, GPE_SYNTHETIC_SPIRAL = 1 };
/* Radial: |sin(15 sqrt(r))|; Spiral: |sin(30 sqrt(0.1 r) + theta)| (the magnitude of the
 * vector fields; signed_values != 0 gives the signed sine). out: float64 [n, n], n >= 1. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_synthetic_image(int32_t task, int32_t signed_values,
                                                         DLTensor* out);
/* The vector fields (eqs. 30, 31): out[i, j, :] = f(r, theta) (cos theta, sin theta) with
 * f the signed sine above. out: float64 [n, n, 2]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_synthetic_vector_field(int32_t task, DLTensor* out);
/* out[i * n + j, :] = (x_j, y_i): float64 [n * n, 2], the row-major pixel order. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_grid_coordinates(int64_t n, DLTensor* out);
/* Splits of the row-major pixel indices 0..num_points-1 into train, validation and test.
 * indices (out): int64 [num_points], the train indices, then validation, then test, each
 * ascending; counts (out, 3 entries): the three sizes. */
/* Lim et al. D.2: uniformly random fractions (5% / 40% / rest), deterministic in seed
 * (std::mt19937_64 + std::shuffle: reproducible within one C++ standard library); sizes
 * round(fraction * num_points). Fractions finite, >= 0, sum <= 1; num_points >= 0. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_random_split(int64_t num_points, double train_fraction,
                                                      double validation_fraction, uint64_t seed,
                                                      DLTensor* indices, int64_t* counts);
/* Zheng et al.: train on the [::2] x [::2] sub-grid of a rows x cols image, test on the
 * other pixels (no validation: counts[1] = 0). indices: int64 [rows * cols]. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_regular_grid_split(int64_t rows, int64_t cols,
                                                            DLTensor* indices, int64_t* counts);
/* Mean over all entries of (a - b)^2: float64 tensors of one shape, 1 to 3 dimensions, at
 * least one entry, finite. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_mse(const DLTensor* a, const DLTensor* b, double* out);
/* PSNR = 10 log10(peak^2 / MSE) in dB (+inf when a == b); peak finite, > 0. */
GPE_API GPE_NODISCARD gpe_status gpe_inr_psnr(const DLTensor* a, const DLTensor* b, double peak,
                                              double* out);

/* -- Image files --
 * PNG (8- or 16-bit; gray, gray + alpha, RGB, RGBA, palette; alpha dropped) and JPEG
 * (baseline or progressive; gray or colour, CMYK refused), told apart by the file's
 * signature, decoded into values in [0, 1]. A missing, unreadable or corrupt file is
 * GPE_ERROR_INVALID_ARGUMENT with a message naming the path. */
typedef struct gpe_image gpe_image;
/* grayscale != 0 gives one channel (colour converted to luma by libpng / libjpeg);
 * otherwise three (RGB; gray files expand to equal channels). */
GPE_API GPE_NODISCARD gpe_status gpe_image_read(const char* path, int32_t grayscale,
                                                gpe_image** out);
GPE_API void gpe_image_destroy(gpe_image* image);
/* rows, cols and channels may each be NULL; channels is 1 or 3. */
GPE_API GPE_NODISCARD gpe_status gpe_image_shape(const gpe_image* image, int64_t* rows,
                                                 int64_t* cols, int64_t* channels);
/* out: float32 or float64 [rows, cols, channels], values in [0, 1]. */
GPE_API GPE_NODISCARD gpe_status gpe_image_pixels(const gpe_image* image, DLTensor* out);
/* Writes pixels (float32 or float64 [rows, cols] or [rows, cols, 1 or 3], finite, at most
 * 65536 a side) as an 8-bit PNG, clamping to [lo, hi] (finite, lo < hi) and mapping that
 * range to 0..255 (rounded). An unwritable path is GPE_ERROR_INVALID_ARGUMENT. */
GPE_API GPE_NODISCARD gpe_status gpe_image_write_png(const char* path, const DLTensor* pixels,
                                                     double lo, double hi);
/* As gpe_image_write_png, as a baseline JPEG of the given quality (1..100; lossy). */
GPE_API GPE_NODISCARD gpe_status gpe_image_write_jpeg(const char* path, const DLTensor* pixels,
                                                      int32_t quality, double lo, double hi);

/* ----------------------------------------------------------------------------------
 * Attention (attention/cpu): multi-head scaled dot-product attention with the
 * positional encoding applied inside the kernel (flash-style tiles, linear memory).
 *
 * Tensors (float32, bfloat16 or float64 for all of q, k, v, o and the gradients; lse float32,
 * or float64 with float64 tensors). float32 and bfloat16 run the optimised kernels (float32
 * arithmetic); float64 runs the exact reference (attention/reference.h: double throughout,
 * the scores materialised one row at a time, single-threaded, O(len_q len_k d) per head),
 * meant for gradient checks and as an oracle, with every option below supported; its
 * backward recomputes the forward (o and lse, if given, are checked but not read).
 *  - padded batch: q [batch, seq_q, heads_q, head_dim], k and v
 *    [batch, seq_k, heads_kv, head_dim], o like q;
 *  - packed variable-length (cu_seqlens_q and cu_seqlens_k given, int64 [batch + 1],
 *    starting at 0, non-decreasing): q [tokens_q, heads_q, head_dim], k, v
 *    [tokens_k, heads_kv, head_dim].
 * Any strides with head_dim contiguous (stride 1). heads_q a multiple of heads_kv (GQA).
 * s_ij = scale <T(p_i) q_i, T(p_j) k_j> + b(p_i, p_j); o_i = sum_j softmax_j(s_ij) v_j;
 * lse (optional, float32 [tokens_q, heads_q], tokens in batch-major order) = ln sum_j
 * exp(s_ij), -inf (and o = 0) for rows with no allowed key. Causal: key j allowed iff
 * p_j <= p_i. Positions default to 0..seq_k-1 for keys and to the LAST seq_q of them
 * for queries (KV-cache decoding); explicit ones are int64 [tokens] in token order.
 * At most one multiplicative encoding T (RoPE, GRAPE-M, algebraic) and one bias b
 * (a gpe_bias handle, applied tile by tile: no s x s matrix).
 *
 * Structured positions (options from rope_axes on): encodings whose group element is not
 * one int64 take per-token positions of their own, while q_positions / k_positions (or
 * the default) keep ordering the tokens for causal masks, biases and Shaw labels:
 *  - per-axis coordinates q_axes [tokens_q, axes], k_axes [tokens_k, axes] (int64) for
 *    axial 2D/3D RoPE (rope_axes = 2 or 3: the rope_dim / 2 planes split evenly over the
 *    axes, each block with the default frequencies of dimension rope_dim / axes), M-RoPE
 *    (rope_sections: planes per axis, summing to rope_dim / 2, default frequencies;
 *    e.g. Qwen2-VL's [16, 24, 24]) and algebraic grids (algebraic_grid);
 *  - tree addresses (0-based child indices from the root) for algebraic trees, as CSR:
 *    token t's address is children[offsets[t] .. offsets[t + 1]) (q_tree_offsets int64
 *    [tokens_q + 1] from 0, non-decreasing, ending at the length of q_tree_children).
 * Kogkalidis et al.'s algebraic encodings are given by their skew generators (float64):
 * algebraic_tree [branching, head_dim, head_dim] (W_c = exp(S_c), rho(address) the path
 * product), algebraic_grid [axes (2 or 3), m, m] with axes * m = head_dim
 * (blockdiag of exp(x_a S_a)).
 * Shaw et al.'s relative labels (shaw_max_distance k >= 0; tables float64
 * [2k + 1, head_dim], row r for label r - k, shared by every head): with
 * r = clip(p_j - p_i, -k, k), shaw_key_table adds scale <T q_i, aK_r> to s_ij and
 * shaw_value_table adds sum_j p_ij aV_r to o_i. gpe_attention_backward_v2 also returns
 * the tables' gradients.
 * ---------------------------------------------------------------------------------- */
typedef struct gpe_attention_options {
  uint32_t struct_size;  /* sizeof(gpe_attention_options) */
  int32_t causal;        /* 0 or 1 */
  double softmax_scale;  /* > 0, finite; 0 means 1 / sqrt(head_dim) */
  int32_t num_threads;   /* 0: every hardware thread */
  int64_t rope_dim;      /* 0: no RoPE; else even, <= head_dim (partial rotary) */
  double rope_base;      /* RoPE's theta base (default 10000) */
  int32_t rope_pairing;  /* GPE_PAIRING_* */
  const gpe_grape_m* grape_m;               /* optional: GRAPE-M rotations of q and k */
  const gpe_algebraic_sequence* algebraic;  /* optional: W^p of q and k */
  const gpe_bias* bias;  /* optional additive bias (gpe_bias_create_*): ALiBi and T5 for any
                            batch; FoX and GRAPE-AP read one sequence's tokens: batch 1 */
  const DLTensor* q_positions;              /* optional int64 [tokens_q] */
  const DLTensor* k_positions;              /* optional int64 [tokens_k] (both or neither) */
  const DLTensor* cu_seqlens_q;             /* optional int64 [batch + 1]: packed layout */
  const DLTensor* cu_seqlens_k;
  /* Structured positions and Shaw labels (read only when struct_size covers them; an
   * older caller's smaller struct leaves them 0 / NULL). */
  int32_t rope_axes;                  /* 0 or 1: one axis; 2 or 3: axial RoPE (q_axes) */
  int32_t rope_sections_interleaved;  /* M-RoPE: 0 contiguous sections, 1 interleaved */
  const DLTensor* rope_sections;      /* optional int64 [axes]: M-RoPE planes per axis */
  const DLTensor* algebraic_tree;     /* optional float64 [branching, head_dim, head_dim] */
  const DLTensor* algebraic_grid;     /* optional float64 [axes, m, m], axes * m = head_dim */
  const DLTensor* q_axes;             /* optional int64 [tokens_q, axes] (both or neither) */
  const DLTensor* k_axes;             /* optional int64 [tokens_k, axes] */
  const DLTensor* q_tree_offsets;     /* optional int64 [tokens_q + 1] (all four or none) */
  const DLTensor* q_tree_children;    /* int64 [children of every q address] */
  const DLTensor* k_tree_offsets;     /* int64 [tokens_k + 1] */
  const DLTensor* k_tree_children;
  int64_t shaw_max_distance;          /* k >= 0 for the Shaw tables */
  const DLTensor* shaw_key_table;     /* optional float64 [2k + 1, head_dim] */
  const DLTensor* shaw_value_table;   /* optional float64 [2k + 1, head_dim] */
} gpe_attention_options;
#define GPE_ATTENTION_OPTIONS_INIT                                                     \
  { (uint32_t)sizeof(gpe_attention_options), 0, 0.0, 0, 0, 10000.0, GPE_PAIRING_HALF_SPLIT, \
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL,     \
    NULL, NULL, NULL, 0, NULL, NULL }

/* o (and lse if non-NULL) from q, k, v. */
GPE_API GPE_NODISCARD gpe_status gpe_attention_forward(const gpe_attention_options* options,
                                                       const DLTensor* q, const DLTensor* k,
                                                       const DLTensor* v, DLTensor* o,
                                                       DLTensor* lse);
/* dq, dk, dv (each may be NULL to skip) from d_o, with respect to q, k, v before the
 * encoding. o and lse are the forward's (both given, or both NULL to recompute them). */
GPE_API GPE_NODISCARD gpe_status gpe_attention_backward(
    const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* v, const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
    DLTensor* dq, DLTensor* dk, DLTensor* dv);
/* gpe_attention_backward plus the Shaw tables' gradients: d_shaw_key_table and
 * d_shaw_value_table (float64 [2k + 1, head_dim], overwritten; each may be NULL to skip,
 * and needs its table in the options). */
GPE_API GPE_NODISCARD gpe_status gpe_attention_backward_v2(
    const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* v, const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
    DLTensor* dq, DLTensor* dk, DLTensor* dv, DLTensor* d_shaw_key_table,
    DLTensor* d_shaw_value_table);
/* The gradients of the positional encoding's learnable parameters (since 0.4.0), beside
 * dq, dk, dv as gpe_attention_backward gives them. Every field is an optional float64
 * output (NULL to skip; any strides; overwritten):
 *  - d_bias_a / d_bias_b, for options->bias, accumulated over every tile inside the kernels:
 *      ALiBi, slope-form GRAPE-A: dL/dslopes [num_heads] in d_bias_a;
 *      T5:                         dL/dtable [num_buckets, num_heads] in d_bias_a;
 *      FoX, gated GRAPE-A:         dL/dgate_logits [length, num_heads] in d_bias_a;
 *      GRAPE-AP:                   dL/dw in d_bias_a and dL/du in d_bias_b,
 *                                  [length, num_heads, rank] each;
 *    d_bias_b is refused for the other kinds;
 *  - d_grape_a, d_grape_b [m, head_dim], d_grape_omega [m], for options->grape_m (GRAPE-M's
 *    generators L_k = omega_k (a_k b_k^T - b_k a_k^T)): from dL/dq' = G(p) dq and
 *    dL/dk' = G(p) dk, summed over every token and head of q and k; they need dq and dk;
 *  - d_shaw_key_table / d_shaw_value_table: as gpe_attention_backward_v2. */
typedef struct gpe_attention_param_grads {
  uint32_t struct_size; /* sizeof(gpe_attention_param_grads) */
  DLTensor* d_bias_a;
  DLTensor* d_bias_b;
  DLTensor* d_grape_a;
  DLTensor* d_grape_b;
  DLTensor* d_grape_omega;
  DLTensor* d_shaw_key_table;
  DLTensor* d_shaw_value_table;
} gpe_attention_param_grads;
#define GPE_ATTENTION_PARAM_GRADS_INIT \
  { (uint32_t)sizeof(gpe_attention_param_grads), NULL, NULL, NULL, NULL, NULL, NULL, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_attention_backward_with_parameters(
    const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* v, const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
    DLTensor* dq, DLTensor* dk, DLTensor* dv, const gpe_attention_param_grads* grads);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_GPE_H_ */
