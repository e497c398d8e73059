/* A user's program built against an installed GroupPE (see install_test.sh): RoPE on one
 * vector through gpe.h, compared with the rotation written out directly, and one bad
 * input reported with its status and message. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <gpe/gpe.h>

int main(void) {
  if (gpe_version() != GPE_VERSION_NUMBER) {
    fprintf(stderr, "header %d but library %d\n", GPE_VERSION_NUMBER, gpe_version());
    return 1;
  }
  gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
  o.dim = 4;
  o.base = 100.0;
  gpe_so_rep* rep = NULL;
  if (gpe_so_rep_create_planes(&o, &rep) != GPE_OK) {
    fprintf(stderr, "create: %s\n", gpe_last_error_message());
    return 1;
  }
  double x[4] = {1.0, 2.0, -0.5, 0.25}, y[4];
  int64_t pos = 7, one = 1, shape[2] = {1, 4};
  DLTensor tp, tx, ty;
  memset(&tp, 0, sizeof tp);
  tp.data = &pos;
  tp.device.device_type = kDLCPU;
  tp.ndim = 1;
  tp.dtype.code = kDLInt;
  tp.dtype.bits = 64;
  tp.dtype.lanes = 1;
  tp.shape = &one;
  tx = tp;
  tx.data = x;
  tx.ndim = 2;
  tx.dtype.code = kDLFloat;
  tx.shape = shape;
  ty = tx;
  ty.data = y;
  if (gpe_so_rep_apply(rep, &tp, &tx, &ty) != GPE_OK) {
    fprintf(stderr, "apply: %s\n", gpe_last_error_message());
    return 1;
  }
  /* Interleaved pairs (0, 1), (2, 3); theta_i = base^(-2i / dim), angle = 7 theta_i. */
  for (int i = 0; i < 2; ++i) {
    const double a = 7.0 * pow(100.0, -2.0 * i / 4.0);
    const double r1 = x[2 * i] * cos(a) - x[2 * i + 1] * sin(a);
    const double r2 = x[2 * i] * sin(a) + x[2 * i + 1] * cos(a);
    /* Angles below 10 rad: a few ulps apart at most, so 1e-12 absolute. */
    if (fabs(y[2 * i] - r1) > 1e-12 || fabs(y[2 * i + 1] - r2) > 1e-12) {
      fprintf(stderr, "plane %d: got (%g, %g), expected (%g, %g)\n", i, y[2 * i], y[2 * i + 1], r1, r2);
      return 1;
    }
  }
  gpe_so_rep_destroy(rep);
  o.dim = 1;
  rep = NULL;
  if (gpe_so_rep_create_planes(&o, &rep) != GPE_ERROR_INVALID_ARGUMENT ||
      gpe_last_error_message()[0] == '\0' || rep != NULL) {
    fprintf(stderr, "dim = 1 was not rejected with a message\n");
    return 1;
  }
  printf("GroupPE %s: RoPE matches, bad input says \"%s\"\n", gpe_version_string(),
         gpe_last_error_message());
  return 0;
}
