/* gpe.h compiles as C99 with -Wpedantic, and the basic contract holds from C. */
#include <stdio.h>
#include <string.h>

#include "gpe/gpe.h"

static int failures = 0;
#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                \
    }                                                            \
  } while (0)

int main(void) {
  gpe_so_planes_options opts = GPE_SO_PLANES_OPTIONS_INIT;
  gpe_so_rep* rep = NULL;
  int64_t dim = 0;
  double x[4] = {1.0, 0.0, 0.0, 1.0};
  int64_t pos[1] = {0};
  int64_t xshape[2] = {1, 4};
  int64_t pshape[1] = {1};
  DLTensor tp, tx;

  CHECK(gpe_version() == GPE_VERSION_NUMBER);
  CHECK(gpe_last_error_message() != NULL);
  CHECK(strcmp(gpe_status_name(GPE_OK), "GPE_OK") == 0);

  /* A failing call reports a code and a message. */
  CHECK(gpe_so_rep_create_planes(NULL, &rep) == GPE_ERROR_INVALID_ARGUMENT);
  CHECK(strlen(gpe_last_error_message()) > 0);

  opts.dim = 4;
  CHECK(gpe_so_rep_create_planes(&opts, &rep) == GPE_OK);
  CHECK(gpe_so_rep_dim(rep, &dim) == GPE_OK && dim == 4);

  memset(&tp, 0, sizeof tp);
  tp.data = pos;
  tp.device.device_type = kDLCPU;
  tp.ndim = 1;
  tp.dtype.code = kDLInt;
  tp.dtype.bits = 64;
  tp.dtype.lanes = 1;
  tp.shape = pshape;
  memset(&tx, 0, sizeof tx);
  tx.data = x;
  tx.device.device_type = kDLCPU;
  tx.ndim = 2;
  tx.dtype.code = kDLFloat;
  tx.dtype.bits = 64;
  tx.dtype.lanes = 1;
  tx.shape = xshape;
  /* Position 0 is the identity, in place. */
  CHECK(gpe_so_rep_apply(rep, &tp, &tx, &tx) == GPE_OK);
  CHECK(x[0] == 1.0 && x[1] == 0.0 && x[2] == 0.0 && x[3] == 1.0);

  gpe_so_rep_destroy(rep);
  gpe_so_rep_destroy(NULL);

  /* The sequence section: option structs with their _INIT macros, from C. */
  {
    gpe_sinusoidal_options sin_opts = GPE_SINUSOIDAL_OPTIONS_INIT;
    gpe_grape_m_options grape_opts = GPE_GRAPE_M_OPTIONS_INIT;
    gpe_algebraic_sequence_options alg_opts = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
    gpe_grape_m* grape = NULL;
    gpe_algebraic_sequence* alg = NULL;
    /* PE(0) = (sin 0, cos 0, sin 0, cos 0). */
    CHECK(gpe_sinusoidal_encode(&sin_opts, &tp, &tx) == GPE_OK);
    CHECK(x[0] == 0.0 && x[1] == 1.0 && x[2] == 0.0 && x[3] == 1.0);
    CHECK(grape_opts.struct_size == sizeof(gpe_grape_m_options));
    CHECK(gpe_grape_m_create(&grape_opts, &grape) == GPE_ERROR_INVALID_ARGUMENT && !grape);
    CHECK(gpe_algebraic_sequence_create(&alg_opts, &alg) == GPE_ERROR_INVALID_ARGUMENT && !alg);
    gpe_grape_m_destroy(NULL);
    gpe_algebraic_sequence_destroy(NULL);
    gpe_learned_positions_destroy(NULL);
  }
  /* RoPE and the additive biases (0.3.0): the _INIT macros give the documented defaults. */
  {
    gpe_rope_options rope_opts = GPE_ROPE_OPTIONS_INIT;
    gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
    gpe_alibi_options alibi_opts = GPE_ALIBI_OPTIONS_INIT;
    gpe_t5_options t5_opts = GPE_T5_OPTIONS_INIT;
    gpe_fox_options fox_opts = GPE_FOX_OPTIONS_INIT;
    gpe_grape_ap_options ap_opts = GPE_GRAPE_AP_OPTIONS_INIT;
    gpe_rope* rope = NULL;
    gpe_bias* bias = NULL;
    double thetas[2], m = 0.0, tile[1];
    int64_t tshape[2] = {1, 1};
    DLTensor tt;
    CHECK(rope_opts.struct_size == sizeof(gpe_rope_options));
    CHECK(rope_opts.pairing == GPE_PAIRING_HALF_SPLIT && rope_opts.base == 10000.0);
    CHECK(rope_opts.beta_fast == 32.0 && rope_opts.beta_slow == 1.0 && rope_opts.yarn_truncate);
    CHECK(rope_opts.max_position == 131072 && rope_opts.high_freq_factor == 4.0);
    CHECK(rope_opts.xpos_gamma == 0.4 && rope_opts.xpos_scale_base == 512.0);
    CHECK(rope_opts.axes == GPE_ROPE_AXES_SINGLE && rope_opts.num_axes == 1);
    CHECK(tokens.struct_size == sizeof(gpe_rope_tokens) && tokens.cu_seqlens == NULL);
    CHECK(gpe_rope_create(&rope_opts, &rope) == GPE_ERROR_INVALID_ARGUMENT && !rope);
    rope_opts.head_dim = 4;
    CHECK(gpe_rope_create(&rope_opts, &rope) == GPE_OK);
    CHECK(gpe_rope_frequencies(rope, thetas, 2, &m) == GPE_OK);
    CHECK(thetas[0] == 1.0 && thetas[1] > 0.0099999 && thetas[1] < 0.0100001 && m == 1.0);
    gpe_rope_destroy(rope);
    CHECK(t5_opts.num_buckets == 32 && t5_opts.max_distance == 128 && t5_opts.bidirectional);
    CHECK(fox_opts.struct_size == sizeof(gpe_fox_options));
    CHECK(ap_opts.rank == 1);
    alibi_opts.num_heads = 1;
    CHECK(gpe_bias_create_alibi(&alibi_opts, &bias) == GPE_OK);
    memset(&tt, 0, sizeof tt);
    tt.data = tile;
    tt.device.device_type = kDLCPU;
    tt.ndim = 2;
    tt.dtype.code = kDLFloat;
    tt.dtype.bits = 64;
    tt.dtype.lanes = 1;
    tt.shape = tshape;
    pos[0] = 3; /* query 3, key 3: bias 0 */
    CHECK(gpe_bias_fill_tile(bias, 0, &tp, &tp, &tt) == GPE_OK && tile[0] == 0.0);
    gpe_bias_destroy(bias);
    gpe_bias_destroy(NULL);
    gpe_rope_destroy(NULL);
  }
  if (failures == 0) printf("header_c99_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
