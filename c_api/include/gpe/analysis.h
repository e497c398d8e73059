/* GroupPE's C ABI: analysis of embedders (encodings/analysis/): stable rank and distance
 * preservation, measured or in the papers' closed forms. Matrices are float64 DLTensors
 * of any strides. One part of gpe/gpe.h (include that); valid C99 on its own.
 */
#ifndef GPE_ANALYSIS_H_
#define GPE_ANALYSIS_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stable rank |A|_F^2 / |A|_2^2 of a finite, non-zero float64 matrix [M, F]. */
GPE_API GPE_NODISCARD gpe_status gpe_stable_rank(const DLTensor* matrix, double* out);

/* Distance preservation (Zheng et al. eq. 6): out[i, j] = sample_spacing * features[i] .
 * features[j]. features: float64 [N, F] finite; out: float64 [N, N]; spacing finite > 0.
 * Entries whose plain products leave double's range are computed again with powers-of-two
 * scalings; a distance itself past the range is an error (GPE_ERROR_OUT_OF_RANGE), not inf. */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_ANALYSIS_H_ */
