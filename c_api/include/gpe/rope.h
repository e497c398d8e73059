/* GroupPE's C ABI: rotary position embeddings (RoPE) as models use them
 * (encodings/sequence/rope.h). One part of gpe/gpe.h (include that); valid C99 on its
 * own.
 */
#ifndef GPE_ROPE_H_
#define GPE_ROPE_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RoPE (since 0.3.0) -----------------------------------------------------------
 *
 * Rotary position embeddings as models use them (encodings/sequence/rope.h): frequency
 * schedules, interleaved or half-split pairing, partial rotary, xPos, axial 2D/3D RoPE
 * and M-RoPE sections, on bshd / sbhd / packed thd tensors, forward and backward.
 * Plane i (i < rotary_dim / 2) pairs features (2i, 2i + 1) (interleaved) or
 * (i, i + rotary_dim / 2) (half-split) and rotates them by a = p * theta_i (the rotation
 * convention of gpe/gpe.h); both outputs are then multiplied by the schedule's attention
 * factor m (and by the xPos scale). Features rotary_dim .. head_dim - 1 pass through.
 * The angle p * theta_i is reduced exactly mod 2 pi for every int64 p and every finite
 * theta_i (after the schedule's scaling), exactly relative to theta_i as the double the
 * schedule computed (its own rounding, up to |p| ulp(theta_i) / 2 rad, is part of the
 * encoding). cos and sin are formed in double and rounded once to the tensor's type
 * (float32 for bfloat16 / float16 tensors, which are rotated in float32 and rounded once
 * on store). The attention factor m (times the xPos scale) must fit the tensor's type:
 * a float32, bfloat16 or float16 call (gpe_rope_forward / _backward, gpe_rope_table_create
 * and the tables, attention with a gpe_rope) refuses m above float32's largest value
 * (e.g. attention_factor 1e39, or an mscale of 1e300), and a float16 (bfloat16) tensor m
 * above 65504 (3.39e38), with GPE_ERROR_INVALID_ARGUMENT, as it refuses xPos scales past
 * those ranges (float64 takes any finite m; each type's largest value itself is accepted).
 * In attention both q and k carry m, so the scores scale by m^2: a call whose scaled
 * scores overflow its type gives inf / NaN outputs, as the same computation in PyTorch.
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
  /* YARN, LONGROPE: nonzero overrides the schedule's attention factor (finite > 0; the
   * calls refuse one beyond the tensor type's range: above). */
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
   * zeta_i = (2i / rotary_dim + gamma) / (1 + gamma). The scales are stored in the
   * table's type (float32 for float32 / bfloat16 / float16 tensors): a call whose scale
   * would pass float32's range (|p - centre| > 88.7 scale_base / ln(1 / zeta_0), ~36,260
   * for the defaults, queries before the centre, keys after it) is refused with
   * GPE_ERROR_INVALID_ARGUMENT rather than returning inf and NaN, and so is one past a
   * 16-bit tensor's range (float16: 65504 = e^11.09, ~4,530 positions for the defaults);
   * set xpos_centre near the positions in use. */
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
 * (THD only, NULL otherwise).
 * Tensors on a CUDA device (since 0.10.0): gpe_rope_forward / _backward with x and out on
 * one CUDA device run the CUDA kernel through libgpe_cuda.so, as attention does
 * (gpe/attention.h, "CUDA TENSORS": how the plugin is found, GPE_ERROR_UNSUPPORTED
 * without it or a GPU), enqueued on cuda_stream without waiting; position_ids, offsets
 * and cu_seqlens on the CPU or that device (copied to the host first, waiting for the
 * stream). Every schedule, pairing, partial rotary up to rotary_dim 2048 and axial /
 * M-RoPE; float32, bfloat16, float16; out is x (in place) or disjoint memory of x's
 * strides (on dimensions of size above 1; a size-1 dimension's stride is free). xPos and float64 are refused (GPE_ERROR_UNSUPPORTED); tables (gpe_rope_table)
 * are CPU only. */
typedef struct gpe_rope_tokens {
  uint32_t struct_size; /* sizeof(gpe_rope_tokens) */
  int32_t layout;       /* GPE_ROPE_LAYOUT_* */
  int32_t role;         /* GPE_ROPE_QUERY or GPE_ROPE_KEY */
  const DLTensor* position_ids;
  const DLTensor* offsets;
  const DLTensor* cu_seqlens;
  /* Since 0.10.0 (read only when struct_size covers it): the cudaStream_t of a call on
   * tensors on a CUDA device (NULL: the legacy default stream); see below. */
  void* cuda_stream;
} gpe_rope_tokens;
#define GPE_ROPE_TOKENS_INIT \
  { (uint32_t)sizeof(gpe_rope_tokens), GPE_ROPE_LAYOUT_BSHD, GPE_ROPE_QUERY, NULL, NULL, NULL, \
    NULL }

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
 * layout, batch and sequence length (thd: its cu_seqlens; another shape with as many
 * tokens is GPE_ERROR_INVALID_ARGUMENT), any number of heads and any strides as
 * gpe_rope_forward; out (dx) may be x (dy). */
GPE_API GPE_NODISCARD gpe_status gpe_rope_table_forward(const gpe_rope_table* table,
                                                        const DLTensor* x, DLTensor* out);
GPE_API GPE_NODISCARD gpe_status gpe_rope_table_backward(const gpe_rope_table* table,
                                                         const DLTensor* dy, DLTensor* dx);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_ROPE_H_ */
