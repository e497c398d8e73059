/* GroupPE's C ABI: multi-head attention with the positional encoding inside the kernel
 * (attention/). The encodings it takes are made by gpe/rope.h, gpe/sequence.h
 * (GRAPE-M), gpe/algebraic.h and gpe/bias.h. One part of gpe/gpe.h (include that);
 * valid C99 on its own.
 */
#ifndef GPE_ATTENTION_H_
#define GPE_ATTENTION_H_

#include "gpe/common.h"
#include "gpe/algebraic.h"
#include "gpe/bias.h"
#include "gpe/rope.h"
#include "gpe/sequence.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------------
 * Attention (attention/cpu): multi-head scaled dot-product attention with the
 * positional encoding applied inside the kernel (flash-style tiles, linear memory).
 *
 * Tensors (float32, bfloat16 or float64 for all of q, k, v, o and the gradients; lse float32,
 * or float64 with float64 tensors). The forward also takes a 16-bit KV cache: k and v
 * bfloat16 or float16 with float32 q and o, or float16 with bfloat16 q and o (half the
 * bytes a decoding step reads; widened exactly to float32 as tiles load). float32 and bfloat16 run the optimised kernels (float32
 * accumulation; bfloat16 on CPUs whose bf16 dot products outrun float FMAs rounds q, the
 * rotated keys and the probabilities (and dS) to bf16 as FlashAttention-2 does on GPUs,
 * else widens to float32: results depend on the CPU within bf16's rounding); float64 runs the exact reference (attention/reference.h: double throughout,
 * the scores materialised one row at a time, single-threaded, O(len_q len_k d) per head),
 * meant for gradient checks and as an oracle, with every option below supported; its
 * backward recomputes the forward (o and lse, if given, are checked but not read).
 *  - padded batch: q [batch, seq_q, heads_q, head_dim], k and v
 *    [batch, seq_k, heads_kv, head_dim], o like q;
 *  - packed variable-length (cu_seqlens_q and cu_seqlens_k given, int64 [batch + 1],
 *    starting at 0, non-decreasing): q [tokens_q, heads_q, head_dim], k, v
 *    [tokens_k, heads_kv, head_dim].
 * v's last dim may differ from k's (since 0.10.0): the value head size head_dim_v
 * (DeepSeek-V2/V3's MLA: head_dim 192, head_dim_v 128); o, d_o and dv then end in
 * head_dim_v, q, k, dq and dk in head_dim, and the default scale stays 1 / sqrt(head_dim).
 * Head sizes are at most 65536 (GPE_ERROR_OUT_OF_RANGE above); heads_q and heads_kv >= 1.
 * Strides of q, k, v and o (in elements): the last dim contiguous (stride 1), every stride
 * >= 0 (negative ones are refused, in size-1 dimensions too), and, sorted by stride, each
 * dimension of size above 1 striding past the whole extent of the smaller ones, so that
 * distinct (token, head) rows are disjoint (a zero stride over more than one row, or rows
 * closer than head_dim, are refused; permuted layouts such as heads outermost are fine);
 * an empty tensor may carry any strides. dq, dk, dv take the strides of q, k, v, and d_o
 * and o share theirs; lse is compact row-major. "The strides of" compares dimensions of
 * size above 1 only: a size-1 dimension's stride is free (any value >= 0, as PyTorch and
 * NumPy set them).
 * heads_q a multiple of heads_kv (GQA).
 * s_ij = cap(scale <T(p_i) q_i, T(p_j) k_j>) + b(p_i, p_j), cap(x) = x without a
 * softcap, c tanh(x / c) with softcap c; o_i = sum_j e^{s_ij} v_j / Z_i with
 * Z_i = sum_j e^{s_ij} (+ e^{z_h} with a sink logit z_h for the row's head);
 * lse (optional, [tokens_q, heads_q] compact, float32 (float64 with float64 tensors),
 * tokens in batch-major order) = ln Z_i,
 * -inf (and o = 0) for rows with no allowed key (z_h with a sink). Non-finite inputs
 * propagate as PyTorch's do: a NaN (or +inf) score of an allowed key makes its row's o
 * and lse NaN (and, backward, dq of the row and dk, dv of the row's allowed keys); masked
 * keys and keys of probability 0 contribute nothing whatever their k and v hold (the rule
 * in full: attention/descriptor.h, "NON-FINITE VALUES"). Causal: key j allowed iff
 * p_j <= p_i; a sliding window further requires p_i - window_left <= p_j <=
 * p_i + window_right. Positions default to 0..seq_k-1 for keys and to the LAST seq_q of
 * them for queries (KV-cache decoding); explicit ones are int64 [tokens] in token order.
 * At most one multiplicative encoding T (RoPE by rope_dim or by a gpe_rope handle,
 * GRAPE-M, algebraic) and one bias b (a gpe_bias handle, applied tile by tile: no s x s
 * matrix).
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
 * [2k + 1, head_dim] for keys and [2k + 1, head_dim_v] for values, row r for label
 * r - k, shared by every head): with
 * r = clip(p_j - p_i, -k, k), shaw_key_table adds scale <T q_i, aK_r> to s_ij and
 * shaw_value_table adds sum_j p_ij aV_r to o_i. gpe_attention_backward_v2 also returns
 * the tables' gradients.
 *
 * Since 0.9.0 (the fields after shaw_value_table; attention/descriptor.h, "WINDOW,
 * SOFTCAP AND SINKS", "SCORE MASK" and "LAYOUTS"). Zero / NULL, as GPE_ATTENTION_OPTIONS_INIT, a zeroed struct and
 * an older caller's smaller struct leave them, is none of them:
 *  - rope: a gpe_rope handle (gpe/rope.h: every frequency schedule, pairing, partial
 *    rotary, xPos, axial / M-RoPE) applied to q and k inside the kernel, in place of
 *    rope_dim / rope_base / rope_pairing (rope with rope_dim is refused, as are
 *    rope_axes and rope_sections, which describe rope_dim's RoPE: the handle carries its
 *    own axes). Its head_dim must be the call's. q rows are rotated in the query role and
 *    k rows in the key role (gpe_rope_tokens' role: xPos scales them inversely), each
 *    exactly as gpe_rope_forward would, so the result equals gpe_rope_forward on q and k
 *    followed by attention without an encoding. The schedule's attention factor m
 *    (YaRN's 0.1 ln(factor) + 1 or mscale ratio, LongRoPE's) is in that rotation and so
 *    multiplies both q and k: the q.k part of the scores carries m^2, as in Hugging Face
 *    transformers, where cos and sin carry m; scores whose m^2 scaling overflows the
 *    call's type give inf / NaN outputs, as that computation in PyTorch would (m itself
 *    is checked against the type's range: gpe/rope.h). A single-axis handle reads the
 *    int64 positions; a multi-axis one (num_axes > 1) reads q_axes / k_axes [tokens,
 *    num_axes]. The handle must outlive the call.
 *  - window = 1: sliding window (flash-attn's window_size, Mistral's W tokens with
 *    causal and window_left = W - 1): key j is allowed only if p_i - window_left <= p_j
 *    <= p_i + window_right, on top of the causal rule; -1 leaves a side unbounded.
 *    Compared exactly for any int64 positions. With window = 0 the bounds are not read
 *    and must be 0 or -1 (a zeroed struct's or GPE_ATTENTION_OPTIONS_INIT's values), so
 *    that bounds set without window = 1 are refused rather than ignored.
 *  - softcap c > 0 (Gemma 2's logit softcap): the q.k part of the score x (scale and
 *    Shaw key labels included) becomes c tanh(x / c); the bias is added after it. At
 *    most 1e30 (GPE_ERROR_INVALID_ARGUMENT above, every dtype): a larger cap is no cap
 *    (c tanh(x / c) = x to double precision), leave it 0; past ~1e37 the float32 and
 *    bfloat16 kernels' 1 / c leaves float's range.
 *  - sinks: one logit z_h per query head (gpt-oss's learned attention sinks), float32
 *    [heads_q], in the softmax's denominator of every row of head h and attending to
 *    nothing (Z_i above). A NaN or +inf z_h makes its rows NaN; -inf is no sink. Copied,
 *    so materialised: a zero stride (broadcast) is refused, as for kv_lengths,
 *    block_table and cu_seqlens (a call without query tokens bounds none of their sizes).
 *    gpe_attention_backward_with_parameters returns dL/dz (d_sinks).
 *  - attn_mask (PyTorch SDPA's attn_mask; attention/descriptor.h, "SCORE MASK"): float32
 *    additive (natural-log units, added to s_ij after the softcap and the bias; -inf
 *    masks the key) or bool / uint8 (0 masks the key, nonzero lets it take part, as
 *    SDPA's True). 4-D with strides >= 0 in its dimensions of size above 1 (a size-1
 *    dimension's stride is not read; NULL strides: compact; stride 0 broadcasts; entries
 *    may repeat, the mask being read in place, never copied):
 *    bshd [batch or 1, heads_q or 1, seq_q or 1, seq_k or 1] over (sequence, query head,
 *    query token, key token); packed [sequences or 1, heads_q or 1, max_lq or 1,
 *    max_lk or 1] with the query and key counted within each sequence (max_lq, max_lk
 *    the longest sequence's). A dimension of size 1 broadcasts. No gradient (the
 *    backward reads it as the forward). A row whose every key is masked has o = 0 and
 *    lse = -inf (as PyTorch 2.15's SDPA; older versions' math path gives NaN).
 *  - kv_lengths (bshd; flash-attn's cache_seqlens, also a key padding mask): int64
 *    [batch], 0 <= kv_lengths[b] <= seq_k: sequence b's keys are its first kv_lengths[b]
 *    tokens; the rest of k and v is not read (backward: dk, dv zero there). Default
 *    positions then put the queries at the last seq_q of those kv_lengths[b] keys.
 *  - block_table (paged KV cache, vLLM's and FlashInfer's; bshd, forward only): int64
 *    [batch, pages_per_sequence], any strides (copied: a view whose strides may map two
 *    entries to one element, a zero stride or e.g. {1, 1}, is refused above 2^24 entries,
 *    as are such views of sinks and kv_lengths); k and v are [num_pages, page_size,
 *    heads_kv, head_dim]
 *    (any strides, head_dim contiguous), and sequence b's key token t is in page
 *    block_table[b][t / page_size] at slot t % page_size. seq_k = pages_per_sequence *
 *    page_size is each sequence's capacity (kv_lengths its use); page ids of pages a
 *    sequence uses must lie in [0, num_pages), the others are not read. Pages may be
 *    shared and in any order; 16-bit KV caches as above. The backward refuses it.
 *
 * CUDA TENSORS (since 0.10.0). q, k, v, o, lse and the gradients on one CUDA device
 * (DLPack kDLCUDA, one device_id) run attention/cuda's kernels, through libgpe_cuda.so:
 * GroupPE's CUDA plugin, built where the CUDA toolkit is (//c_api:libgpe_cuda.so) and
 * loaded the first time such a call comes, from the environment variable
 * GPE_CUDA_PLUGIN (a path) or else beside libgpe.so (beside the program when GroupPE is
 * linked statically); without it, or without a usable GPU,
 * the call returns GPE_ERROR_UNSUPPORTED saying which. The work is enqueued on
 * cuda_stream and the call returns without waiting for it (the caller synchronises, as
 * with any CUDA library); its scratch memory is taken and given back in stream order
 * (cudaMallocAsync). Supported: float32, bfloat16 and float16 tensors (float16 q, k, v, o
 * here, unlike the CPU's), head_dim = head_dim_v up to 256 (tensor cores for 64 and 128
 * in 16-bit types with 16-byte-aligned tensors and strides a multiple of 8 elements, a
 * SIMT kernel otherwise), causal masks, GQA, padded and packed batches, explicit
 * positions, RoPE by rope_dim or by a one-axis gpe_rope handle without xPos, and an ALiBi
 * gpe_bias. The backward runs on tensor cores only: bfloat16 or float16, head_dim 64 or
 * 128, alignment as above (GPE_ERROR_INVALID_ARGUMENT otherwise). The first call with a
 * given RoPE uploads its frequencies once and waits for that copy.
 * cu_seqlens and positions may lie on the CPU or on the tensors' device (copied to the
 * host first, which waits for cuda_stream). Every other option, a parameter gradient and
 * a 16-bit KV cache under float32 queries are refused with GPE_ERROR_UNSUPPORTED naming
 * it. Results agree with the CPU kernels within the dtype's rounding (float32
 * accumulation; P rounded to the 16-bit type before P V on tensor cores, as
 * FlashAttention-2).
 * ---------------------------------------------------------------------------------- */
/* ---- CPU ARITHMETIC ------------------------------------------------------------------
 *
 * How the CPU kernels multiply (gpe_attention_options.bf16_arithmetic and
 * .float32_arithmetic, since 0.10.0). Values outside the lists below are
 * GPE_ERROR_INVALID_ARGUMENT on every call; float64 calls run the double-precision
 * reference whatever the (valid) values; CUDA tensors refuse values other than 0 with
 * GPE_ERROR_UNSUPPORTED.
 * bfloat16 calls:
 *  - AUTO: the CPU's bf16 dot products (AVX512_BF16's vdpbf16ps; q, the rotated keys and
 *    the probabilities rounded to bf16, float accumulation) where a one-time probe finds
 *    them at least 1.25x as fast as float FMAs, else WIDEN;
 *  - DOT_PRODUCTS: the dot products wherever the CPU has them (else WIDEN);
 *  - WIDEN: rows widened to float32 and the float32 kernels (also the more exact);
 *  - AMX_TILES: as DOT_PRODUCTS, with the products of the forward and the backward on
 *    Intel AMX tiles (TDPBF16PS) where the CPU and the OS allow them, else exactly
 *    DOT_PRODUCTS. Not yet measured on AMX hardware: AUTO does not choose it.
 * float32 calls (q, k, v float32), the forward's products:
 *  - EXACT: float32 FMAs;
 *  - SPLIT_BF16X6: on AMX tiles, each float split into three bf16 parts and each float
 *    product taken as six bf16 products: about float32's accuracy;
 *  - SPLIT_BF16X3: the same with three bf16 products: about 2^-16 relative per product.
 *  Blocks whose parts would not be finite (or would be subnormal) take float32 FMAs;
 *  without usable tiles both are EXACT exactly. The backward's own products stay
 *  float32; the forward it recomputes without o and lse runs with the call's arithmetic.
 *  Not yet measured on AMX hardware.
 * ---------------------------------------------------------------------------------- */
enum {
  GPE_BF16_ARITHMETIC_AUTO = 0,
  GPE_BF16_ARITHMETIC_DOT_PRODUCTS = 1,
  GPE_BF16_ARITHMETIC_WIDEN = 2,
  GPE_BF16_ARITHMETIC_AMX_TILES = 3
};
enum {
  GPE_FLOAT32_ARITHMETIC_EXACT = 0,
  GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6 = 1,
  GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3 = 2
};

typedef struct gpe_attention_options {
  uint32_t struct_size;  /* sizeof(gpe_attention_options), or an older release's: 104
                            (0.3.0), 208 (0.4.0 - 0.8.0), 280 (0.9.0), 288 (0.10.0's
                            builds before bf16_arithmetic); any other size up to this
                            header's is refused (INVALID_ARGUMENT), a larger one is
                            VERSION_MISMATCH */
  int32_t causal;        /* 0 or 1 */
  double softmax_scale;  /* > 0, finite; 0 means 1 / sqrt(head_dim) */
  int32_t num_threads;   /* 0: the installed pool's threads (gpe_set_thread_pool), else every hardware thread */
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
  const DLTensor* shaw_value_table;   /* optional float64 [2k + 1, head_dim_v] */
  /* Since 0.9.0: RoPE handles, sliding windows, softcap, sinks (read only when
   * struct_size covers them; the paragraph above). */
  const gpe_rope* rope;   /* optional: any RoPE of gpe/rope.h (not with rope_dim) */
  int32_t window;         /* 0: no window; 1: window_left / window_right apply */
  int64_t window_left;    /* -1 unbounded, else >= 0: keys with p_j >= p_i - window_left */
  int64_t window_right;   /* -1 unbounded, else >= 0: keys with p_j <= p_i + window_right */
  double softcap;         /* 0: none; else finite, > 0 and <= 1e30 (larger: no cap) */
  const DLTensor* sinks;  /* optional float32 [heads_q]: one sink logit per query head
                             (no zero stride) */
  /* Since 0.9.0, after sinks: score masks, KV lengths, paged KV caches (read only when
   * struct_size covers them; the paragraph above). */
  const DLTensor* attn_mask;    /* optional float32 (additive) or bool / uint8 (allowed)
                                   [B or 1, heads_q or 1, Lq or 1, Lk or 1] */
  const DLTensor* kv_lengths;   /* optional int64 [batch] (bshd): keys used per sequence
                                   (no zero stride) */
  const DLTensor* block_table;  /* optional int64 [batch, pages_per_sequence] (bshd,
                                   forward only): k and v are pages */
  /* Since 0.10.0: the stream of a call on CUDA tensors (read only when struct_size
   * covers it; "CUDA TENSORS" below). */
  void* cuda_stream; /* a cudaStream_t; NULL: the legacy default stream */
  /* Since 0.10.0, after cuda_stream: the CPU kernels' arithmetic (read only when
   * struct_size covers it; "CPU ARITHMETIC" above). */
  int32_t bf16_arithmetic;    /* GPE_BF16_ARITHMETIC_*; 0: AUTO */
  int32_t float32_arithmetic; /* GPE_FLOAT32_ARITHMETIC_*; 0: EXACT */
} gpe_attention_options;
#define GPE_ATTENTION_OPTIONS_INIT                                                     \
  { (uint32_t)sizeof(gpe_attention_options), 0, 0.0, 0, 0, 10000.0, GPE_PAIRING_HALF_SPLIT, \
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL,     \
    NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, -1, -1, 0.0, NULL, NULL, NULL, NULL, NULL,    \
    GPE_BF16_ARITHMETIC_AUTO, GPE_FLOAT32_ARITHMETIC_EXACT }

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
 * d_shaw_value_table (float64 [2k + 1, head_dim] and [2k + 1, head_dim_v], overwritten;
 * each may be NULL to skip, and needs its table in the options; for bfloat16 calls too
 * since 0.10.0). */
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
 *  - d_shaw_key_table / d_shaw_value_table: as gpe_attention_backward_v2;
 *  - d_sinks (since 0.9.0; read only when struct_size covers it): dL/dz [heads_q] for
 *    options->sinks, dL/dz_h = -sum_i exp(z_h - lse_i) <dL/do_i, o_i> over the rows of
 *    head h (float32, float64 and, since 0.10.0, bfloat16 calls);
 *  - d_algebraic, d_algebraic_tree, d_algebraic_grid (since 0.10.0; read only when
 *    struct_size covers them): dL/dS of Kogkalidis et al.'s skew generators, for
 *    options->algebraic (float64 [dim, dim], dim = head_dim, as
 *    gpe_algebraic_sequence_backward's grad_skew), options->algebraic_tree ([branching,
 *    head_dim, head_dim]) and options->algebraic_grid ([axes, m, m]). As GRAPE-M's: from
 *    dL/dq' = rho(p) dq and dL/dk' = rho(p) dk, summed over every token and head of q
 *    and k; they need dq and dk. Entrywise and unprojected, as gpe/algebraic.h's
 *    backwards (for S = A - A^T, dL/dA = X - X^T with X the returned gradient). */
typedef struct gpe_attention_param_grads {
  uint32_t struct_size; /* sizeof(gpe_attention_param_grads), or 64 (0.4.0 - 0.8.0) or
                           72 (0.9.0); other sizes up to it are refused */
  DLTensor* d_bias_a;
  DLTensor* d_bias_b;
  DLTensor* d_grape_a;
  DLTensor* d_grape_b;
  DLTensor* d_grape_omega;
  DLTensor* d_shaw_key_table;
  DLTensor* d_shaw_value_table;
  DLTensor* d_sinks; /* float64 [heads_q] (since 0.9.0) */
  /* Since 0.10.0: the algebraic encodings' skew generators. */
  DLTensor* d_algebraic;      /* float64 [head_dim, head_dim] for options->algebraic */
  DLTensor* d_algebraic_tree; /* float64 [branching, head_dim, head_dim] */
  DLTensor* d_algebraic_grid; /* float64 [axes, m, m] */
} gpe_attention_param_grads;
#define GPE_ATTENTION_PARAM_GRADS_INIT                                                      \
  { (uint32_t)sizeof(gpe_attention_param_grads), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
    NULL, NULL, NULL }

GPE_API GPE_NODISCARD gpe_status gpe_attention_backward_with_parameters(
    const gpe_attention_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* v, const DLTensor* o, const DLTensor* lse, const DLTensor* d_o,
    DLTensor* dq, DLTensor* dk, DLTensor* dv, const gpe_attention_param_grads* grads);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_ATTENTION_H_ */
