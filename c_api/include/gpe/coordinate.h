/* GroupPE's C ABI: coordinate encodings (encodings/coordinate/): Zheng et al.'s shifted
 * bases, and the coordinate encoders and graph encodings behind gpe_coordinate_encoder.
 * Matrices are float64 DLTensors of any strides. Coordinates are float64 [N]. One part
 * of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_COORDINATE_H_
#define GPE_COORDINATE_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

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
  double max_scale;     /* C: c ~ U[0, C], finite, > 0 */
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
 * encodings/coordinate/laplacian_eigenvectors.h). Edge weights w > 0, duplicate edges
 * add, self-loops are rejected. GPE_LAPLACIAN_SYMMETRIC: an isolated node (degree 0,
 * where D^-1/2 is undefined) gets a zero row and column of L, as networkx's
 * normalized_laplacian_matrix does (not the 1 of I on its diagonal), so each isolated
 * node adds one eigenvalue 0, its unit vector lying in that eigenspace. */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_COORDINATE_H_ */
