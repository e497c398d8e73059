// The coordinate-encoding, analysis and INR entry points through gpe.h only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

DLTensor F64(double* data, std::vector<int64_t>* shape) {
  DLTensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype = {kDLFloat, 64, 1};
  t.shape = shape->data();
  return t;
}

std::vector<double> Encode(int32_t kind, int64_t k, double width, const std::vector<double>& x) {
  gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  o.kind = kind;
  o.num_shifts = k;
  o.width = width;
  std::vector<double> coords = x, out(x.size() * k);
  std::vector<int64_t> cs = {static_cast<int64_t>(x.size())}, os = {cs[0], k};
  DLTensor tc = F64(coords.data(), &cs), to = F64(out.data(), &os);
  EXPECT_EQ(gpe_shifted_basis_encode(&o, &tc, &to), GPE_OK) << gpe_last_error_message();
  return out;
}

TEST(ShiftedBasis, GaussianMatchesFormula) {
  const std::vector<double> x = {0.0, 0.37, 0.99};
  const int64_t k = 8;
  const double w = 0.1;
  const std::vector<double> e = Encode(GPE_SHIFTED_GAUSSIAN, k, w, x);
  for (size_t n = 0; n < x.size(); ++n) {
    for (int64_t i = 0; i < k; ++i) {
      const double u = x[n] - i / static_cast<double>(k);
      // One exp of an O(1) argument: a few ulps.
      EXPECT_NEAR(e[n * k + i], std::exp(-u * u / (2 * w * w)), 1e-15);
    }
  }
}

TEST(ShiftedBasis, RejectsBadOptions) {
  gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  o.num_shifts = 4;
  o.width = 0.1;
  std::vector<double> coords = {0.5}, out(4);
  std::vector<int64_t> cs = {1}, os = {1, 4};
  DLTensor tc = F64(coords.data(), &cs), to = F64(out.data(), &os);
  gpe_shifted_basis_options bad = o;
  bad.kind = 9;
  EXPECT_EQ(gpe_shifted_basis_encode(&bad, &tc, &to), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.width = -1;
  EXPECT_EQ(gpe_shifted_basis_encode(&bad, &tc, &to), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.struct_size = sizeof(o) + 8;
  EXPECT_EQ(gpe_shifted_basis_encode(&bad, &tc, &to), GPE_ERROR_VERSION_MISMATCH);
  coords[0] = NAN;
  EXPECT_EQ(gpe_shifted_basis_encode(&o, &tc, &to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("finite"), std::string::npos);
  coords[0] = 0.5;
  std::vector<int64_t> wrong = {1, 5};
  DLTensor tw = F64(out.data(), &wrong);
  EXPECT_EQ(gpe_shifted_basis_encode(&o, &tc, &tw), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_shifted_basis_encode(nullptr, &tc, &to), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(StableRank, IdentityAndRankOne) {
  std::vector<double> eye = {1, 0, 0, 0, 1, 0, 0, 0, 1}, ones(6, 2.0);
  std::vector<int64_t> s3 = {3, 3}, s23 = {2, 3};
  DLTensor a = F64(eye.data(), &s3), b = F64(ones.data(), &s23);
  double r = 0;
  ASSERT_EQ(gpe_stable_rank(&a, &r), GPE_OK);
  EXPECT_NEAR(r, 3.0, 1e-12);  // |I|_F^2 / |I|_2^2 = 3 / 1, an eigen-solve away
  ASSERT_EQ(gpe_stable_rank(&b, &r), GPE_OK);
  EXPECT_NEAR(r, 1.0, 1e-12);
  EXPECT_EQ(gpe_stable_rank(&a, nullptr), GPE_ERROR_INVALID_ARGUMENT);
}

// Noise-free data in the model's range: the fit recovers W, and predict reproduces S.
TEST(SeparableFit, RecoversWeightsThroughTheAbi) {
  const int64_t n = 20, k = 6;
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i + 0.5) / n;
  std::vector<double> psi = Encode(GPE_SHIFTED_GAUSSIAN, k, 0.12, x);
  std::mt19937_64 rng(4);
  std::normal_distribution<double> normal;
  std::vector<double> w_true(k * k), s(n * n, 0.0), w(k * k), pred(n * n);
  for (double& v : w_true) v = normal(rng);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t a = 0; a < k; ++a) {
        for (int64_t b = 0; b < k; ++b) s[i * n + j] += psi[i * k + a] * w_true[a * k + b] * psi[j * k + b];
      }
    }
  }
  std::vector<int64_t> ps = {n, k}, ss = {n, n}, ws = {k, k};
  DLTensor tp = F64(psi.data(), &ps), ts = F64(s.data(), &ss), tw = F64(w.data(), &ws),
           tpred = F64(pred.data(), &ss);
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  ASSERT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_OK) << gpe_last_error_message();
  // cond(Psi) ~1e2: the recovered weights carry ~cond^2 eps; 1e-8 leaves margin.
  for (int64_t i = 0; i < k * k; ++i) EXPECT_NEAR(w[i], w_true[i], 1e-8);
  ASSERT_EQ(gpe_inr_predict_separable_2d(&tp, &tp, &tw, &tpred), GPE_OK);
  for (int64_t i = 0; i < n * n; ++i) EXPECT_NEAR(pred[i], s[i], 1e-9);
}

TEST(SeparableFit, SingularFactorIsReportedNotReturned) {
  // 3 coordinates, 8 shifts: Psi^T Psi is singular without a ridge.
  std::vector<double> x = {0.1, 0.5, 0.9};
  std::vector<double> psi = Encode(GPE_SHIFTED_GAUSSIAN, 8, 0.05, x);
  std::vector<double> s(9, 1.0), w(64, -7.0);
  std::vector<int64_t> ps = {3, 8}, ss = {3, 3}, ws = {8, 8};
  DLTensor tp = F64(psi.data(), &ps), ts = F64(s.data(), &ss), tw = F64(w.data(), &ws);
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("lambda"), std::string::npos);
  EXPECT_EQ(w[0], -7.0);  // untouched
  o.lambda = 1e-3;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_OK);
  o.lambda = NAN;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<int64_t> bad = {2, 3};
  DLTensor tb = F64(s.data(), &bad);
  o.lambda = 1e-3;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &tb, &tw), GPE_ERROR_INVALID_ARGUMENT);
}

// Issue 24: finite image values that float32 cannot hold (beyond 3.4e38), or products
// psi_y * image whose sums pass it, made the float32 image products inf and W inf and
// NaN, returned with GPE_OK. Now GPE_ERROR_INVALID_ARGUMENT naming the image, w
// untouched; the float64 products still fit the same image; a NaN image stays refused as
// before ("has a non-finite entry": the documented contract).
TEST(SeparableFit, Float32ImageProductsRefuseOverflowInsteadOfReturningInf) {
  const int64_t n = 20, k = 6;
  std::vector<double> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i + 0.5) / n;
  std::vector<double> psi = Encode(GPE_SHIFTED_GAUSSIAN, k, 0.12, x);
  std::vector<int64_t> ps = {n, k}, ss = {n, n}, ws = {k, k};
  std::vector<double> s(n * n), w(k * k);
  DLTensor tp = F64(psi.data(), &ps), ts = F64(s.data(), &ss), tw = F64(w.data(), &ws);
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  o.float32_image_products = 1;
  // 1e39: every value beyond float32; 3e38: each fits, the sums of products do not
  // (the Gaussian factor's columns sum to > 1.2 over the rows).
  for (double big : {1e39, -1e39, 3e38}) {
    s.assign(n * n, big);
    s[7] = 0.25;
    std::fill(w.begin(), w.end(), -7.0);
    EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_ERROR_INVALID_ARGUMENT) << big;
    const std::string msg = gpe_last_error_message();
    EXPECT_NE(msg.find("image"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
    EXPECT_EQ(w[0], -7.0);  // untouched
    o.float32_image_products = 0;
    ASSERT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_OK) << gpe_last_error_message();
    for (double v : w) EXPECT_TRUE(std::isfinite(v)) << big;
    o.float32_image_products = 1;
  }
  // Ordinary values near float32's top still fit in float32.
  s.assign(n * n, 1e37);
  ASSERT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_OK) << gpe_last_error_message();
  for (double v : w) EXPECT_TRUE(std::isfinite(v));
  // The float64 route refuses its own overflow the same way.
  o.float32_image_products = 0;
  s.assign(n * n, 1.7e308);
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_ERROR_INVALID_ARGUMENT);
  // NaN in: refused as before (the header's contract: finite inputs).
  s.assign(n * n, 0.5);
  s[3] = NAN;
  o.float32_image_products = 1;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&o, &tp, &tp, &ts, &tw), GPE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
