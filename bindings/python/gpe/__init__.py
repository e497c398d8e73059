"""GroupPE: positional encodings as group representations (Python bindings).

A thin ctypes layer over the stable C ABI (libgpe.so); no compiled extension. Arrays
are NumPy arrays, passed to the library without copies. Errors raise GpeError with
the library's own message.
"""

from gpe._core import GpeError, version, version_string
from gpe.attention import attention, attention_backward, merge_attention
from gpe.bias import AdditiveBias, Alibi, FoxBias, GrapeABias, GrapeApBias, T5Bias
from gpe.inr import (fit_blended_2d, fit_separable_2d, fit_separable_3d, predict_blended_2d,
                     predict_separable_2d, predict_separable_3d, shifted_basis, stable_rank)
from gpe.inr_solvers import (Fit, Mlp, ValidatedFit, fit_dense_adam, fit_separable_adam_2d,
                             grid_coordinates, image_read, image_write_jpeg, image_write_png,
                             mlp_fit, mlp_init, mlp_num_evaluations, mlp_num_parameters,
                             mlp_predict, mse, psnr, random_split, regular_grid_split,
                             synthetic_image, synthetic_vector_field)
from gpe.coordinate import (CoordinateEncoder, FourierFeatures, ShiftedEncoder, So2Bessel,
                            SphericalHarmonics, bessel_j, condition_number,
                            embedded_distance_matrix, embedder_distance, embedder_stable_rank,
                            laplacian_eigenvectors)
from gpe.sequence import (AlgebraicSequence, GrapeM, LearnedPositions, shaw_key_scores,
                          shaw_key_scores_backward, sinusoidal)
from gpe.sequence import (AlgebraicGrid, AlgebraicTree, algebraic_periodic,  # noqa: F401
                          locality_scale, shaw_value_output, shaw_value_output_backward,
                          transformer_xl_score_terms, transformer_xl_score_terms_backward)
from gpe.rope import Rope, RopeTable
from gpe.so import SoRepresentation
from gpe.thread_pool import set_thread_pool, thread_pool_num_threads

__all__ = [
    "Fit",
    "Mlp",
    "ValidatedFit",
    "fit_dense_adam",
    "fit_separable_adam_2d",
    "grid_coordinates",
    "image_read",
    "image_write_jpeg",
    "image_write_png",
    "mlp_fit",
    "mlp_init",
    "mlp_num_evaluations",
    "mlp_num_parameters",
    "mlp_predict",
    "mse",
    "psnr",
    "random_split",
    "regular_grid_split",
    "synthetic_image",
    "synthetic_vector_field",
    "CoordinateEncoder",
    "FourierFeatures",
    "ShiftedEncoder",
    "So2Bessel",
    "SphericalHarmonics",
    "bessel_j",
    "condition_number",
    "embedded_distance_matrix",
    "embedder_distance",
    "embedder_stable_rank",
    "laplacian_eigenvectors",
    "AdditiveBias",
    "Alibi",
    "AlgebraicGrid",
    "AlgebraicSequence",
    "AlgebraicTree",
    "FoxBias",
    "GrapeABias",
    "GrapeApBias",
    "Rope",
    "RopeTable",
    "T5Bias",
    "GpeError",
    "GrapeM",
    "LearnedPositions",
    "SoRepresentation",
    "algebraic_periodic",
    "attention",
    "attention_backward",
    "fit_blended_2d",
    "fit_separable_2d",
    "fit_separable_3d",
    "locality_scale",
    "merge_attention",
    "predict_blended_2d",
    "predict_separable_2d",
    "predict_separable_3d",
    "set_thread_pool",
    "shaw_key_scores",
    "shaw_key_scores_backward",
    "shaw_value_output",
    "shaw_value_output_backward",
    "shifted_basis",
    "sinusoidal",
    "stable_rank",
    "thread_pool_num_threads",
    "transformer_xl_score_terms",
    "transformer_xl_score_terms_backward",
    "version",
    "version_string",
]
