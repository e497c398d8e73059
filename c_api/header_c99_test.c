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
  if (failures == 0) printf("header_c99_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
