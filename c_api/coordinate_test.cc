// The coordinate encoders, graph encodings and embedder analysis through gpe.h
// (coordinate.cc), compared with the C++ API of encodings/ (the same code, so exact
// equality up to the copy through strided tensors) and with closed forms.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "encodings/analysis/distance_preservation.h"
#include "encodings/coordinate/fourier_features.h"
#include "encodings/coordinate/shifted_basis.h"
#include "encodings/coordinate/so2_bessel.h"
#include "encodings/coordinate/spherical_harmonics.h"
#include "gpe/gpe.h"
#include "inr/blended.h"
#include "inr/closed_form.h"
#include "gtest/gtest.h"

namespace {

namespace enc = gpe::encodings;
using RowMatrixXd = enc::RowMatrixXd;

struct Tensors {
  std::deque<std::vector<int64_t>> shapes, strides;
  DLTensor Make(void* data, DLDataTypeCode code, std::vector<int64_t> shape,
                std::vector<int64_t> stride = {}) {
    shapes.push_back(std::move(shape));
    strides.push_back(std::move(stride));
    DLTensor t;
    std::memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = static_cast<int32_t>(shapes.back().size());
    t.dtype.code = static_cast<uint8_t>(code);
    t.dtype.bits = 64;
    t.dtype.lanes = 1;
    t.shape = shapes.back().data();
    t.strides = strides.back().empty() ? nullptr : strides.back().data();
    return t;
  }
};

void Ok(gpe_status s) { ASSERT_EQ(s, GPE_OK) << gpe_last_error_message(); }

RowMatrixXd RandomPoints(int64_t n, int64_t d, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  RowMatrixXd p(n, d);
  for (int64_t i = 0; i < p.size(); ++i) p.data()[i] = u(rng);
  return p;
}

// Encodes `points` through the handle with a column-strided (transposed storage) points
// tensor, and checks Backward the same way against the C++ encoder `ref`.
void ExpectMatchesCpp(const gpe_coordinate_encoder* h, const enc::CoordinateEncoder& ref,
                      const RowMatrixXd& points, double tolerance = 0.0) {
  int64_t d = 0, f = 0;
  Ok(gpe_coordinate_encoder_dims(h, &d, &f));
  ASSERT_EQ(d, ref.input_dim());
  ASSERT_EQ(f, ref.output_dim());
  const int64_t n = points.rows();
  Tensors t;
  // Column-major storage: strides {1, n} exercise the strided path.
  Eigen::MatrixXd col_major = points;
  DLTensor pt = t.Make(col_major.data(), kDLFloat, {n, d}, {1, n});
  RowMatrixXd features(n, f);
  DLTensor ft = t.Make(features.data(), kDLFloat, {n, f});
  Ok(gpe_coordinate_encode(h, &pt, &ft));
  const RowMatrixXd want = *ref.Encode(points);
  // Same code on the same doubles: bit-identical (tolerance 0), unless the caller says.
  EXPECT_LE((features - want).cwiseAbs().maxCoeff(), tolerance);

  RowMatrixXd g = RandomPoints(n, f, -1, 1, 99);
  DLTensor gt = t.Make(g.data(), kDLFloat, {n, f});
  RowMatrixXd gp(n, d);
  DLTensor gpt = t.Make(gp.data(), kDLFloat, {n, d});
  Ok(gpe_coordinate_backward(h, &pt, &gt, &gpt));
  const RowMatrixXd gwant = *ref.Backward(points, g);
  EXPECT_LE((gp - gwant).cwiseAbs().maxCoeff(), tolerance * std::max(1.0, gwant.cwiseAbs().maxCoeff()));
}

TEST(CoordinateC, FourierFeatureKindsMatchCpp) {
  const RowMatrixXd p2 = RandomPoints(7, 2, -1, 1, 1);
  struct Case {
    int32_t kind;
    double scale;
    int32_t convention;
    absl::StatusOr<enc::FourierFeatures> ref;
  };
  std::vector<Case> cases;
  cases.push_back({GPE_FOURIER_GAUSSIAN, 3.0, GPE_FREQUENCY_TWO_PI,
                   enc::FourierFeatures::Gaussian(2, 5, 3.0, enc::FrequencyConvention::kTwoPi, 17)});
  cases.push_back({GPE_FOURIER_GAUSSIAN, 3.0, GPE_FREQUENCY_ANGULAR,
                   enc::FourierFeatures::Gaussian(2, 5, 3.0, enc::FrequencyConvention::kAngular, 17)});
  cases.push_back({GPE_FOURIER_LINEAR, 4.0, 0, enc::FourierFeatures::LinearlySpaced(2, 5, 4.0)});
  cases.push_back({GPE_FOURIER_LOG_LINEAR, 4.0, 0, enc::FourierFeatures::LogLinearlySpaced(2, 5, 4.0)});
  cases.push_back({GPE_FOURIER_NERF, 0.0, 0, enc::FourierFeatures::Nerf(2, 5)});
  cases.push_back({GPE_FOURIER_TXT, 2.5, 0, enc::FourierFeatures::TxT(5, 2.5, 17)});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind);
    ASSERT_TRUE(c.ref.ok()) << c.ref.status();
    gpe_fourier_features_options o = GPE_FOURIER_FEATURES_OPTIONS_INIT;
    o.kind = c.kind;
    o.dim = 2;
    o.num_frequencies = 5;
    o.scale = c.scale;
    o.convention = c.convention;
    o.seed = 17;
    gpe_coordinate_encoder* h = nullptr;
    Ok(gpe_fourier_features_create(&o, &h));
    ExpectMatchesCpp(h, *c.ref, p2);
    // The angular frequencies read back equal the C++ encoder's.
    const RowMatrixXd& w = c.ref->angular_frequencies();
    RowMatrixXd got(w.rows(), w.cols());
    Tensors t;
    DLTensor wt = t.Make(got.data(), kDLFloat, {w.rows(), w.cols()});
    Ok(gpe_fourier_features_angular_frequencies(h, &wt));
    EXPECT_EQ(got, w);
    // A handle built from those frequencies (angular convention) encodes the same, up to
    // the rounding of its angles w . x (|w . x| < 200 here: 200 x 2.2e-16 per rounding, a
    // few of them, so 1e-12 holds with room), which the 2 pi convention reduces in turns
    // first; the gradients relative to their size (|w| ~ 100 times as large).
    gpe_coordinate_encoder* h2 = nullptr;
    Ok(gpe_fourier_features_create_from_frequencies(&wt, GPE_FREQUENCY_ANGULAR, &h2));
    ExpectMatchesCpp(h2, *c.ref, p2,
                     c.ref->convention() == enc::FrequencyConvention::kTwoPi ? 1e-12 : 0.0);
    gpe_coordinate_encoder_destroy(h2);
    gpe_coordinate_encoder_destroy(h);
  }
}

TEST(CoordinateC, So2BesselSampledAndExplicitTermsMatchCpp) {
  gpe_so2_bessel_options o = GPE_SO2_BESSEL_OPTIONS_INIT;
  o.num_terms = 6;
  o.max_scale = 8.0;
  o.max_k = 5;
  o.order_m = 1;
  o.seed = 4;
  gpe_coordinate_encoder* h = nullptr;
  Ok(gpe_so2_bessel_create_sampled(&o, &h));
  const auto ref = enc::So2BesselEncoder::Sample(6, 8.0, 5, 1,
                                                 enc::So2BesselEncoder::Input::kCartesian, 4);
  ASSERT_TRUE(ref.ok());
  ExpectMatchesCpp(h, *ref, RandomPoints(9, 2, -1, 1, 2));
  std::vector<int64_t> m(6), k(6);
  std::vector<double> c(6);
  Tensors t;
  DLTensor mt = t.Make(m.data(), kDLInt, {6}), ct = t.Make(c.data(), kDLFloat, {6}),
           kt = t.Make(k.data(), kDLInt, {6});
  Ok(gpe_so2_bessel_terms(h, &mt, &ct, &kt));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(m[i], 1);
    EXPECT_EQ(c[i], ref->terms()[i].radial_scale);
    EXPECT_EQ(k[i], ref->terms()[i].angular_k);
    EXPECT_GE(k[i], 1);
    EXPECT_LE(k[i], 4);
  }
  // The same terms given explicitly, polar input.
  gpe_coordinate_encoder* hp = nullptr;
  Ok(gpe_so2_bessel_create(&mt, &ct, &kt, 1, &hp));
  const auto ref_polar = enc::So2BesselEncoder::Create(ref->terms(), enc::So2BesselEncoder::Input::kPolar);
  RowMatrixXd polar = RandomPoints(9, 2, 0, 3, 5);
  ExpectMatchesCpp(hp, *ref_polar, polar);
  // Terms of a non-SO(2) handle: a clear error.
  gpe_coordinate_encoder* sh = nullptr;
  Ok(gpe_spherical_harmonics_create(2, &sh));
  EXPECT_EQ(gpe_so2_bessel_terms(sh, &mt, nullptr, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  gpe_coordinate_encoder_destroy(sh);
  gpe_coordinate_encoder_destroy(hp);
  gpe_coordinate_encoder_destroy(h);
}

TEST(CoordinateC, BesselJMatchesSeriesAndCpp) {
  std::vector<double> x = {0.0, 0.5, 1.0, 2.404825557695773, 7.5, 30.0};
  std::vector<double> out(x.size());
  Tensors t;
  DLTensor xt = t.Make(x.data(), kDLFloat, {6}), ot = t.Make(out.data(), kDLFloat, {6});
  for (int m : {0, 1, 3}) {
    Ok(gpe_bessel_j(m, &xt, &ot));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], *enc::BesselJ(m, x[i]));
  }
  // J_0 at its first zero: |J_0| below 1e-15 (the constant has 16 digits).
  Ok(gpe_bessel_j(0, &xt, &ot));
  EXPECT_LT(std::abs(out[3]), 1e-15);
  // Power series J_0(1) = sum (-1)^j / (j!)^2 4^j, 20 terms: converged to eps.
  double s = 0, term = 1;
  for (int j = 0; j < 20; ++j) {
    s += term;
    term *= -0.25 / ((j + 1.0) * (j + 1.0));
  }
  EXPECT_NEAR(out[2], s, 2e-16);
  x[1] = -1.0;
  EXPECT_EQ(gpe_bessel_j(0, &xt, &ot), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(CoordinateC, ShiftedSimpleAndComplexMatchCpp) {
  gpe_shifted_basis_options axes[3] = {GPE_SHIFTED_BASIS_OPTIONS_INIT, GPE_SHIFTED_BASIS_OPTIONS_INIT,
                                       GPE_SHIFTED_BASIS_OPTIONS_INIT};
  const int32_t kinds[3] = {GPE_SHIFTED_GAUSSIAN, GPE_SHIFTED_TRIANGLE, GPE_SHIFTED_SINE};
  const int64_t shifts[3] = {5, 4, 3};
  std::vector<enc::ShiftedBasis1D> bases;
  for (int d = 0; d < 3; ++d) {
    axes[d].kind = kinds[d];
    axes[d].num_shifts = shifts[d];
    axes[d].width = 0.3;
    bases.push_back(*enc::ShiftedBasis1D::Create(static_cast<enc::ShiftedBasisKind>(kinds[d]),
                                                 shifts[d], 0.3, 0.0, 1.0));
  }
  for (int dims : {2, 3}) {
    std::vector<enc::ShiftedBasis1D> b(bases.begin(), bases.begin() + dims);
    const RowMatrixXd p = RandomPoints(8, dims, 0, 1, 7);
    gpe_coordinate_encoder* h = nullptr;
    Ok(gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, axes, dims, &h));
    ExpectMatchesCpp(h, *enc::SimpleShiftedEncoder::Create(b), p);
    gpe_coordinate_encoder_destroy(h);
    Ok(gpe_shifted_encoder_create(GPE_SHIFTED_COMPLEX, axes, dims, &h));
    const auto complex = enc::ComplexShiftedEncoder::Create(b);
    ExpectMatchesCpp(h, *complex, p);
    // Complex = Kronecker product of the per-axis rows, axis 0 fastest (gpe.h).
    RowMatrixXd features(8, complex->output_dim());
    Tensors t;
    RowMatrixXd pc = p;
    DLTensor pt = t.Make(pc.data(), kDLFloat, {8, dims}), ft = t.Make(features.data(), kDLFloat, {8, complex->output_dim()});
    Ok(gpe_coordinate_encode(h, &pt, &ft));
    for (int64_t n = 0; n < 8; ++n) {
      std::vector<RowMatrixXd> rows;
      for (int d = 0; d < dims; ++d) rows.push_back(*b[d].Encode(std::vector<double>{p(n, d)}));
      for (int64_t f = 0; f < complex->output_dim(); ++f) {
        int64_t rest = f;
        double want = 1;
        for (int d = 0; d < dims; ++d) {
          want *= rows[d](0, rest % shifts[d]);
          rest /= shifts[d];
        }
        // A product of dims factors in a possibly different order: 4 eps relative.
        EXPECT_NEAR(features(n, f), want, 4e-16 * std::abs(want) + 1e-300);
      }
    }
    gpe_coordinate_encoder_destroy(h);
  }
}

TEST(CoordinateC, SphericalHarmonicsMatchCppAndLowDegreeFormulas) {
  gpe_coordinate_encoder* h = nullptr;
  Ok(gpe_spherical_harmonics_create(3, &h));
  const RowMatrixXd p = RandomPoints(6, 3, -1, 1, 3);
  ExpectMatchesCpp(h, *enc::SphericalHarmonicsEncoder::Create(3), p);
  RowMatrixXd f(6, 16);
  Tensors t;
  RowMatrixXd pc = p;
  DLTensor pt = t.Make(pc.data(), kDLFloat, {6, 3}), ft = t.Make(f.data(), kDLFloat, {6, 16});
  Ok(gpe_coordinate_encode(h, &pt, &ft));
  for (int64_t n = 0; n < 6; ++n) {
    const Eigen::Vector3d u = p.row(n).transpose().normalized();
    // Y_00 = 1 / sqrt(4 pi); Y_1,{-1,0,1} = sqrt(3 / (4 pi)) (y, z, x) (no Condon-Shortley
    // phase). Closed forms in a few flops: 1e-15 absolute.
    EXPECT_NEAR(f(n, 0), 1 / std::sqrt(4 * M_PI), 1e-15);
    const double c1 = std::sqrt(3 / (4 * M_PI));
    EXPECT_NEAR(f(n, 1), c1 * u.y(), 1e-15);
    EXPECT_NEAR(f(n, 2), c1 * u.z(), 1e-15);
    EXPECT_NEAR(f(n, 3), c1 * u.x(), 1e-15);
  }
  // A zero vector has no direction: refused.
  pc.row(2).setZero();
  EXPECT_EQ(gpe_coordinate_encode(h, &pt, &ft), GPE_ERROR_INVALID_ARGUMENT);
  gpe_coordinate_encoder_destroy(h);
}

TEST(CoordinateC, LaplacianEigenvectorsOfACycle) {
  // C_n: eigenvalues 2 - 2 cos(2 pi j / n), each j and n - j a pair.
  const int64_t n = 8, k = 5;
  std::vector<int64_t> edges;
  for (int64_t i = 0; i < n; ++i) {
    edges.push_back(i);
    edges.push_back((i + 1) % n);
  }
  std::vector<double> vals(k);
  RowMatrixXd vecs(n, k);
  Tensors t;
  DLTensor et = t.Make(edges.data(), kDLInt, {n, 2}), vt = t.Make(vals.data(), kDLFloat, {k}),
           vv = t.Make(vecs.data(), kDLFloat, {n, k});
  gpe_laplacian_options o = GPE_LAPLACIAN_OPTIONS_INIT;
  Ok(gpe_laplacian_eigenvectors(&o, n, &et, nullptr, &vt, &vv));
  const double want[5] = {0, 2 - 2 * std::cos(2 * M_PI / n), 2 - 2 * std::cos(2 * M_PI / n),
                          2 - 2 * std::cos(4 * M_PI / n), 2 - 2 * std::cos(4 * M_PI / n)};
  // A dense symmetric eigensolver on an 8 x 8 matrix of norm 4: ~1e-15 absolute, 1e-12
  // with margin.
  for (int j = 0; j < k; ++j) EXPECT_NEAR(vals[j], want[j], 1e-12);
  // Orthonormal columns, and L v = lambda v with L = D - A = 2 I - shifts.
  EXPECT_LT((vecs.transpose() * vecs - Eigen::MatrixXd::Identity(k, k)).cwiseAbs().maxCoeff(), 1e-12);
  for (int j = 0; j < k; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      const double lv = 2 * vecs(i, j) - vecs((i + 1) % n, j) - vecs((i + n - 1) % n, j);
      EXPECT_NEAR(lv, vals[j] * vecs(i, j), 1e-12);
    }
    // Sign convention (gpe.h): the first entry within 1e-9 relative of the largest
    // magnitude is positive (a cycle's vectors tie at several entries).
    const double top = vecs.col(j).cwiseAbs().maxCoeff();
    int64_t first = 0;
    while (std::abs(vecs(first, j)) < (1 - 1e-9) * top) ++first;
    EXPECT_GT(vecs(first, j), 0);
  }
  // Weights of 2 double every eigenvalue.
  std::vector<double> w(n, 2.0);
  DLTensor wt = t.Make(w.data(), kDLFloat, {n});
  std::vector<double> vals2(k);
  DLTensor vt2 = t.Make(vals2.data(), kDLFloat, {k});
  Ok(gpe_laplacian_eigenvectors(&o, n, &et, &wt, &vt2, &vv));
  for (int j = 0; j < k; ++j) EXPECT_NEAR(vals2[j], 2 * want[j], 1e-12);
  // A self-loop is refused.
  edges[1] = 0;
  EXPECT_EQ(gpe_laplacian_eigenvectors(&o, n, &et, nullptr, &vt, &vv), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(CoordinateC, AnalysisMatchesFormulas) {
  const RowMatrixXd f = RandomPoints(5, 7, -1, 1, 8);
  RowMatrixXd d(5, 5);
  Tensors t;
  RowMatrixXd fc = f;
  DLTensor ft = t.Make(fc.data(), kDLFloat, {5, 7}), dt = t.Make(d.data(), kDLFloat, {5, 5});
  Ok(gpe_embedded_distance_matrix(&ft, 0.25, &dt));
  // 7-term dot products, ~7 eps: 1e-14 absolute on values below 2.
  EXPECT_LT((d - 0.25 * f * f.transpose()).cwiseAbs().maxCoeff(), 1e-14);
  double v = 0;
  // Zheng et al. eq. 23 and eq. 24, and the triangle/rectangle/RFF forms of the headers.
  Ok(gpe_embedder_stable_rank(GPE_EMBEDDER_GAUSSIAN, 0.01, 1000, &v));
  EXPECT_NEAR(v, 1 / (2 * std::sqrt(M_PI) * 0.01), 1e-12);
  Ok(gpe_embedder_stable_rank(GPE_EMBEDDER_RFF, 4.0, 1000, &v));
  EXPECT_NEAR(v, std::sqrt(2 * M_PI) * 4.0, 1e-12);
  Ok(gpe_embedder_stable_rank(GPE_EMBEDDER_GAUSSIAN, 1e-6, 10, &v));
  EXPECT_EQ(v, 10.0);  // capped at N
  Ok(gpe_embedder_distance(GPE_EMBEDDER_GAUSSIAN, 0.1, 0.05, &v));
  EXPECT_NEAR(v, std::sqrt(M_PI) * 0.1 * std::exp(-0.0025 / 0.04), 1e-15);
  Ok(gpe_embedder_distance(GPE_EMBEDDER_RECTANGLE, 0.2, 0.05, &v));
  EXPECT_NEAR(v, 0.15, 1e-15);
  Ok(gpe_embedder_distance(GPE_EMBEDDER_TRIANGLE, 0.2, 0.0, &v));
  EXPECT_NEAR(v, 0.2 / 3, 1e-15);  // int tri(2u / w)^2 du = w / 3
  Ok(gpe_embedder_distance(GPE_EMBEDDER_RFF, 2.0, 0.1, &v));
  EXPECT_NEAR(v, std::exp(-2 * M_PI * M_PI * 4 * 0.01), 1e-15);
  EXPECT_EQ(gpe_embedder_distance(7, 2.0, 0.1, &v), GPE_ERROR_INVALID_ARGUMENT);
}

TEST(CoordinateC, InrConditionNumberAndRcondFit) {
  // Psi = diag(1, 1e-3) padded with a zero row: cond 1e3 exactly (up to the SVD's eps).
  std::vector<double> psi = {1, 0, 0, 1e-3, 0, 0};
  Tensors t;
  DLTensor pt = t.Make(psi.data(), kDLFloat, {3, 2});
  double c = 0;
  Ok(gpe_inr_condition_number(&pt, &c));
  EXPECT_NEAR(c, 1e3, 1e-9);
  // rcond 1e-2 drops the 1e-3 direction: W = [[s00, 0], [0, 0]] for S with s00 at (0,0).
  std::vector<double> s(9, 0.0), w(4, -1.0);
  s[0] = 2.0;
  s[4] = 5.0;
  DLTensor st = t.Make(s.data(), kDLFloat, {3, 3}), wt = t.Make(w.data(), kDLFloat, {2, 2});
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  o.rcond = 1e-2;
  Ok(gpe_inr_fit_separable_2d(&o, &pt, &pt, &st, &wt));
  EXPECT_NEAR(w[0], 2.0, 1e-14);
  EXPECT_EQ(w[1], 0.0);
  EXPECT_EQ(w[2], 0.0);
  EXPECT_EQ(w[3], 0.0);
  // rcond 0 keeps it: w11 = 5 / 1e-6.
  o.rcond = 0.0;
  Ok(gpe_inr_fit_separable_2d(&o, &pt, &pt, &st, &wt));
  EXPECT_NEAR(w[3], 5e6, 1e-6);
  // An old caller's struct (0.3.0 layout, no rcond field) is still accepted.
  o.struct_size = 16;
  o.rcond = 0.5;  // beyond the caller's struct: must be ignored
  Ok(gpe_inr_fit_separable_2d(&o, &pt, &pt, &st, &wt));
  EXPECT_NEAR(w[3], 5e6, 1e-6);
}

TEST(CoordinateC, Separable3DAndBlended2DMatchCpp) {
  Tensors t;
  // 3D: three Gaussian factors, a random volume, ridge 1e-3.
  std::array<RowMatrixXd, 3> psi;
  const int64_t n[3] = {6, 5, 7}, k[3] = {4, 3, 5};
  for (int d = 0; d < 3; ++d) {
    std::vector<double> x(n[d]);
    for (int64_t i = 0; i < n[d]; ++i) x[i] = (i + 0.5) / n[d];
    psi[d] = *enc::ShiftedBasis1D::Create(enc::ShiftedBasisKind::kGaussian, k[d], 0.2)->Encode(x);
  }
  gpe::inr::Tensor3 v;
  v.dims = {6, 5, 7};
  v.data.resize(6 * 5 * 7);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  for (double& x : v.data) x = normal(rng);
  const gpe::inr::Tensor3 want = *gpe::inr::FitSeparable3D(psi, v, 1e-3);
  DLTensor p0 = t.Make(psi[0].data(), kDLFloat, {6, 4}), p1 = t.Make(psi[1].data(), kDLFloat, {5, 3}),
           p2 = t.Make(psi[2].data(), kDLFloat, {7, 5}), vt = t.Make(v.data.data(), kDLFloat, {6, 5, 7});
  std::vector<double> w(4 * 3 * 5);
  DLTensor wt = t.Make(w.data(), kDLFloat, {4, 3, 5});
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  o.lambda = 1e-3;
  Ok(gpe_inr_fit_separable_3d(&o, &p0, &p1, &p2, &vt, &wt));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], want.data[i]);  // same code
  std::vector<double> pred(6 * 5 * 7);
  DLTensor pt = t.Make(pred.data(), kDLFloat, {6, 5, 7});
  Ok(gpe_inr_predict_separable_3d(&p0, &p1, &p2, &wt, &pt));
  const gpe::inr::Tensor3 pw = *gpe::inr::PredictSeparable3D(psi, want);
  for (size_t i = 0; i < pred.size(); ++i) EXPECT_EQ(pred[i], pw.data[i]);

  // Blended 2D: one-axis shifted encoders through handles vs the C++ fit.
  gpe_shifted_basis_options ax = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  ax.kind = GPE_SHIFTED_GAUSSIAN;
  ax.num_shifts = 6;
  ax.width = 0.15;
  gpe_coordinate_encoder* e = nullptr;
  Ok(gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, &ax, 1, &e));
  const auto basis = *enc::ShiftedBasis1D::Create(enc::ShiftedBasisKind::kGaussian, 6, 0.15);
  const gpe::inr::AxisEncoder cpp = [&](absl::Span<const double> x) { return basis.Encode(x); };
  std::vector<double> grid(9);
  for (int i = 0; i < 9; ++i) grid[i] = i / 8.0;
  const RowMatrixXd pts = RandomPoints(40, 2, 0, 1, 12);
  std::vector<double> px(40), py(40), vals(40);
  for (int i = 0; i < 40; ++i) {
    px[i] = pts(i, 0);
    py[i] = pts(i, 1);
    vals[i] = std::sin(3 * px[i]) * py[i];
  }
  gpe::inr::BlendedFitOptions bo;
  const gpe::inr::BlendedFit bf = *gpe::inr::FitBlended2D(cpp, cpp, grid, grid, px, py, vals, bo);
  RowMatrixXd ptsc = pts;
  DLTensor gt = t.Make(grid.data(), kDLFloat, {9}), qt = t.Make(ptsc.data(), kDLFloat, {40, 2}),
           st = t.Make(vals.data(), kDLFloat, {40});
  RowMatrixXd bw(6, 6);
  DLTensor bwt = t.Make(bw.data(), kDLFloat, {6, 6});
  gpe_blended_fit_options bopt = GPE_BLENDED_FIT_OPTIONS_INIT;
  int32_t iterations = -1;
  double rms = -1;
  Ok(gpe_inr_fit_blended_2d(&bopt, e, e, &gt, &gt, &qt, &st, &bwt, &iterations, &rms));
  // The same arithmetic on the same doubles (the handle's encoder is the same basis).
  EXPECT_EQ((bw - bf.weights).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(iterations, bf.iterations);
  EXPECT_EQ(rms, bf.rms_residual);
  std::vector<double> f(40);
  DLTensor ft = t.Make(f.data(), kDLFloat, {40});
  Ok(gpe_inr_predict_blended_2d(e, e, &gt, &gt, &qt, &bwt, &ft));
  const std::vector<double> fw = *gpe::inr::PredictBlended2D(cpp, cpp, grid, grid, px, py, bf.weights);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(f[i], fw[i]);
  // A 2-D encoder is not an axis encoder.
  gpe_coordinate_encoder* sh = nullptr;
  Ok(gpe_spherical_harmonics_create(1, &sh));
  EXPECT_EQ(gpe_inr_fit_blended_2d(&bopt, sh, e, &gt, &gt, &qt, &st, &bwt, nullptr, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  gpe_coordinate_encoder_destroy(sh);
  gpe_coordinate_encoder_destroy(e);
}

}  // namespace

// Outputs that map two indices to one element (a zero stride), or share memory, are
// refused before anything is written; broadcast inputs standing for copies of more
// than 2^24 entries are refused before the copy (a few bytes describing 2^40 entries
// would exhaust memory), while small broadcast inputs still work.
TEST(CoordinateC, OutputsCheckedBeforeWritingAndBroadcastCopiesBounded) {
  gpe_so2_bessel_options o = GPE_SO2_BESSEL_OPTIONS_INIT;
  o.num_terms = 4;
  o.max_scale = 3.0;
  o.max_k = 5;
  gpe_coordinate_encoder* h = nullptr;
  Ok(gpe_so2_bessel_create_sampled(&o, &h));
  std::vector<int64_t> m(4, -7), k(4, -7);
  std::vector<double> c(4, -7.0);
  Tensors t;
  DLTensor mt = t.Make(m.data(), kDLInt, {4}), ct = t.Make(c.data(), kDLFloat, {4});
  DLTensor c0 = t.Make(c.data(), kDLFloat, {4}, {0});   // four scales into one element
  DLTensor mk = t.Make(m.data(), kDLInt, {4});          // weights aliasing orders
  EXPECT_EQ(gpe_so2_bessel_terms(h, &mt, &c0, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_so2_bessel_terms(h, &mt, &ct, &mk), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("weights"), std::string::npos)
      << gpe_last_error_message();
  for (int i = 0; i < 4; ++i) {  // nothing written by either refused call
    EXPECT_EQ(m[i], -7);
    EXPECT_EQ(c[i], -7.0);
  }
  DLTensor kt = t.Make(k.data(), kDLInt, {4});
  Ok(gpe_so2_bessel_terms(h, &mt, &ct, &kt));
  EXPECT_EQ(m[0], 0);
  gpe_coordinate_encoder_destroy(h);

  // Explicit terms from broadcast inputs: one order, one scale for every term (small).
  int64_t order = 0, weight = 2;
  double scale = 1.5;
  DLTensor mb = t.Make(&order, kDLInt, {3}, {0}), cb = t.Make(&scale, kDLFloat, {3}, {0}),
           kb = t.Make(&weight, kDLInt, {3}, {0});
  gpe_coordinate_encoder* hb = nullptr;
  Ok(gpe_so2_bessel_create(&mb, &cb, &kb, 0, &hb));
  gpe_coordinate_encoder_destroy(hb);
  // ... but not a broadcast standing for 2^25 terms.
  DLTensor mh = t.Make(&order, kDLInt, {int64_t{1} << 25}, {0});
  EXPECT_EQ(gpe_so2_bessel_create(&mh, &cb, &kb, 0, &hb), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("broadcast"), std::string::npos);

  // Frequencies [2^20, 2^20] from one double: refused, not a 8 TiB copy.
  double one = 1.0;
  DLTensor fb = t.Make(&one, kDLFloat, {int64_t{1} << 20, int64_t{1} << 20}, {0, 0});
  gpe_coordinate_encoder* hf = nullptr;
  EXPECT_EQ(gpe_fourier_features_create_from_frequencies(&fb, GPE_FREQUENCY_TWO_PI, &hf),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hf, nullptr);
  // Stable rank and the distance matrix of a broadcast matrix past the bound.
  double r = 0;
  DLTensor sb = t.Make(&one, kDLFloat, {int64_t{1} << 13, int64_t{1} << 12}, {0, 0});
  EXPECT_EQ(gpe_stable_rank(&sb, &r), GPE_ERROR_INVALID_ARGUMENT);
  std::vector<double> d(4);
  DLTensor feat = t.Make(&one, kDLFloat, {2, int64_t{1} << 24}, {0, 0}),
           dt = t.Make(d.data(), kDLFloat, {2, 2});
  EXPECT_EQ(gpe_embedded_distance_matrix(&feat, 1.0, &dt), GPE_ERROR_INVALID_ARGUMENT);
  // A small broadcast matrix still works: rank one, stable rank exactly 1 up to rounding.
  DLTensor ss = t.Make(&one, kDLFloat, {4, 3}, {0, 0});
  Ok(gpe_stable_rank(&ss, &r));
  EXPECT_NEAR(r, 1.0, 1e-12);

  // Laplacian: broadcast edges past the bound, and eigenvalues written into one element.
  int64_t edge[2] = {0, 1};
  DLTensor eb = t.Make(edge, kDLInt, {int64_t{1} << 24, 2}, {0, 1});
  std::vector<double> vals(2, -7.0);
  RowMatrixXd vecs = RowMatrixXd::Constant(3, 2, -7.0);
  DLTensor vt = t.Make(vals.data(), kDLFloat, {2}), vv = t.Make(vecs.data(), kDLFloat, {3, 2});
  gpe_laplacian_options lo = GPE_LAPLACIAN_OPTIONS_INIT;
  EXPECT_EQ(gpe_laplacian_eigenvectors(&lo, 3, &eb, nullptr, &vt, &vv),
            GPE_ERROR_INVALID_ARGUMENT);
  int64_t path[4] = {0, 1, 1, 2};
  DLTensor et = t.Make(path, kDLInt, {2, 2}), v0 = t.Make(vals.data(), kDLFloat, {2}, {0});
  EXPECT_EQ(gpe_laplacian_eigenvectors(&lo, 3, &et, nullptr, &v0, &vv),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(vals[0], -7.0);
  EXPECT_EQ(vecs(0, 0), -7.0);
  Ok(gpe_laplacian_eigenvectors(&lo, 3, &et, nullptr, &vt, &vv));
  // The path 0-1-2: eigenvalues 0, 1, 3; the two smallest to 1e-12 (3 x 3 dense solver).
  EXPECT_NEAR(vals[0], 0.0, 1e-12);
  EXPECT_NEAR(vals[1], 1.0, 1e-12);
}
