#include "group/so_dense.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include <unsupported/Eigen/MatrixFunctions>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "group/angle.h"
#include "group/batch.h"

namespace gpe {
namespace group {
namespace {

absl::Status ValidateSquareFinite(const char* who, const Eigen::Ref<const Eigen::MatrixXd>& m) {
  if (m.rows() != m.cols() || m.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": expected a non-empty square matrix, got ", m.rows(), "x", m.cols()));
  }
  if (!m.allFinite()) return absl::InvalidArgumentError(absl::StrCat(who, ": non-finite entry"));
  return absl::OkStatus();
}

// Blocks of a real Schur form T = Q^T M Q of a normal matrix M: 2x2 blocks (complex
// eigenvalue pairs) and 1x1 blocks (real eigenvalues). For normal M the off-block part
// of T is rounding noise and is dropped.
struct SchurBlocks {
  Eigen::MatrixXd q;  // columns reordered: plane pairs first, then 1x1 blocks
  std::vector<Eigen::Matrix2d> planes;
  std::vector<double> reals;
};

SchurBlocks RealSchurBlocks(const Eigen::MatrixXd& m) {
  const Eigen::RealSchur<Eigen::MatrixXd> schur(m);
  const Eigen::MatrixXd& t = schur.matrixT();
  const Eigen::MatrixXd& u = schur.matrixU();
  const Eigen::Index n = m.rows();
  SchurBlocks out;
  out.q.resize(n, n);
  std::vector<Eigen::Index> fixed;
  Eigen::Index col = 0;
  for (Eigen::Index i = 0; i < n;) {
    if (i + 1 < n && t(i + 1, i) != 0.0) {
      out.planes.push_back(t.block<2, 2>(i, i));
      out.q.col(col++) = u.col(i);
      out.q.col(col++) = u.col(i + 1);
      i += 2;
    } else {
      out.reals.push_back(t(i, i));
      fixed.push_back(i);
      ++i;
    }
  }
  for (Eigen::Index i : fixed) out.q.col(col++) = u.col(i);
  return out;
}

}  // namespace

absl::Status ValidateSkew(const Eigen::Ref<const Eigen::MatrixXd>& s, double tol) {
  if (absl::Status st = ValidateSquareFinite("ValidateSkew", s); !st.ok()) return st;
  const double scale = std::max(1.0, s.cwiseAbs().maxCoeff());
  const double asym = (s + s.transpose()).cwiseAbs().maxCoeff();
  if (asym > tol * scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("generator is not skew-symmetric: |S + S^T|_max = ", asym));
  }
  return absl::OkStatus();
}

absl::Status ValidateOrthogonal(const Eigen::Ref<const Eigen::MatrixXd>& w, double tol) {
  if (absl::Status st = ValidateSquareFinite("ValidateOrthogonal", w); !st.ok()) return st;
  const double defect =
      (w.transpose() * w - Eigen::MatrixXd::Identity(w.rows(), w.cols())).cwiseAbs().maxCoeff();
  if (defect > tol) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrix is not orthogonal: |W^T W - I|_max = ", defect));
  }
  return absl::OkStatus();
}

absl::StatusOr<Eigen::MatrixXd> SkewExp(const Eigen::Ref<const Eigen::MatrixXd>& s) {
  if (absl::Status st = ValidateSkew(s); !st.ok()) return st;
  // The skew part (S - S^T) / 2, as SchurRotation takes it: S within ValidateSkew's
  // tolerance but not exactly skew gave exp(S) off orthogonal by its asymmetry times |S|
  // (2.3e-10 at |S| = 1000, refused downstream as not orthogonal).
  const Eigen::MatrixXd m = 0.5 * (s - s.transpose());
  return Eigen::MatrixXd(m.exp());
}

absl::StatusOr<Eigen::MatrixXd> OrthogonalLog(const Eigen::Ref<const Eigen::MatrixXd>& w) {
  if (absl::Status st = ValidateOrthogonal(w); !st.ok()) return st;
  const SchurBlocks blocks = RealSchurBlocks(w);
  const Eigen::Index n = w.rows();
  Eigen::MatrixXd t = Eigen::MatrixXd::Zero(n, n);
  constexpr double kPiMargin = 1e-9;
  for (size_t k = 0; k < blocks.planes.size(); ++k) {
    const Eigen::Matrix2d& b = blocks.planes[k];
    // A rotation block [[c, -s], [s, c]] (Eigen standardises equal diagonals).
    const double angle = std::atan2(0.5 * (b(1, 0) - b(0, 1)), 0.5 * (b(0, 0) + b(1, 1)));
    if (kPi - std::fabs(angle) <= kPiMargin) {
      return absl::FailedPreconditionError(
          "OrthogonalLog: eigenvalue -1 (rotation by pi); no unique principal logarithm");
    }
    t(2 * k, 2 * k + 1) = -angle;
    t(2 * k + 1, 2 * k) = angle;
  }
  for (double r : blocks.reals) {
    if (r < 0.0) {
      return absl::FailedPreconditionError(
          "OrthogonalLog: eigenvalue -1 (reflection or rotation by pi); no principal "
          "logarithm in so(d)");
    }
  }
  const Eigen::MatrixXd l = blocks.q * t * blocks.q.transpose();
  return Eigen::MatrixXd(0.5 * (l - l.transpose()));
}

absl::StatusOr<SchurRotation> SchurRotation::Create(const Eigen::Ref<const Eigen::MatrixXd>& s) {
  if (absl::Status st = ValidateSkew(s); !st.ok()) return st;
  const Eigen::MatrixXd skew = 0.5 * (s - s.transpose());
  SchurBlocks blocks = RealSchurBlocks(skew);
  std::vector<double> phi;
  phi.reserve(blocks.planes.size());
  // Block [[0, -phi], [phi, 0]] = phi J; Eigen's standardised block has equal diagonals.
  for (const Eigen::Matrix2d& b : blocks.planes) phi.push_back(0.5 * (b(1, 0) - b(0, 1)));
  return SchurRotation(std::move(blocks.q), std::move(phi));
}

Eigen::MatrixXd SchurRotation::Generator() const {
  const Eigen::Index n = dim();
  Eigen::MatrixXd t = Eigen::MatrixXd::Zero(n, n);
  for (size_t k = 0; k < phi_.size(); ++k) {
    t(2 * k, 2 * k + 1) = -phi_[k];
    t(2 * k + 1, 2 * k) = phi_[k];
  }
  return q_ * t * q_.transpose();
}

Eigen::MatrixXd SchurRotation::Matrix(int64_t p) const {
  const Eigen::Index n = dim();
  Eigen::MatrixXd r = Eigen::MatrixXd::Identity(n, n);
  for (size_t k = 0; k < phi_.size(); ++k) {
    const SinCos sc = SinCosOfMultiple(p, phi_[k]);
    r(2 * k, 2 * k) = sc.cos;
    r(2 * k, 2 * k + 1) = -sc.sin;
    r(2 * k + 1, 2 * k) = sc.sin;
    r(2 * k + 1, 2 * k + 1) = sc.cos;
  }
  return q_ * r * q_.transpose();
}

template <class T>
absl::Status SchurRotation::Apply(absl::Span<const int64_t> positions, const T* in,
                                  int64_t in_stride, T* out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  if (absl::Status s = internal::ValidateBatch("SchurRotation::Apply", n, d, in, in_stride, out,
                                               out_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  constexpr int64_t kBlock = 64;
  Eigen::MatrixXd x(d, kBlock), y(d, kBlock);
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t m = std::min(kBlock, n - j0);
    for (int64_t j = 0; j < m; ++j) {
      const T* src = in + (j0 + j) * in_stride;
      for (int64_t i = 0; i < d; ++i) x(i, j) = static_cast<double>(src[i]);
    }
    // y = Q^T x, rotate plane coordinates, x = Q y.
    y.leftCols(m).noalias() = q_.transpose() * x.leftCols(m);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t p = positions[j0 + j];
      for (size_t k = 0; k < phi_.size(); ++k) {
        const SinCos sc = SinCosOfMultiple(p, phi_[k]);
        const double y1 = y(2 * k, j), y2 = y(2 * k + 1, j);
        y(2 * k, j) = y1 * sc.cos - y2 * sc.sin;
        y(2 * k + 1, j) = y1 * sc.sin + y2 * sc.cos;
      }
    }
    x.leftCols(m).noalias() = q_ * y.leftCols(m);
    for (int64_t j = 0; j < m; ++j) {
      T* dst = out + (j0 + j) * out_stride;
      for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<T>(x(i, j));
    }
  }
  return absl::OkStatus();
}

template absl::Status SchurRotation::Apply<float>(absl::Span<const int64_t>, const float*,
                                                  int64_t, float*, int64_t) const;
template absl::Status SchurRotation::Apply<double>(absl::Span<const int64_t>, const double*,
                                                   int64_t, double*, int64_t) const;

absl::StatusOr<Eigen::MatrixXd> MatrixPowerBySquaring(const Eigen::Ref<const Eigen::MatrixXd>& w,
                                                      int64_t p) {
  if (absl::Status st = ValidateSquareFinite("MatrixPowerBySquaring", w); !st.ok()) return st;
  constexpr int64_t kMaxPower = int64_t{1} << 31;
  if (p > kMaxPower || p < -kMaxPower) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatrixPowerBySquaring: |p| must be <= 2^31, got ", p));
  }
  Eigen::MatrixXd base = w;
  if (p < 0) {
    if (absl::Status st = ValidateOrthogonal(w); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MatrixPowerBySquaring: negative power needs an orthogonal W; ",
                       st.message()));
    }
    base.transposeInPlace();
    p = -p;
  }
  Eigen::MatrixXd result = Eigen::MatrixXd::Identity(w.rows(), w.cols());
  bool first = true;
  while (p > 0) {
    if (p & 1) {
      if (first) {
        result = base;
        first = false;
      } else {
        result = result * base;
      }
    }
    p >>= 1;
    if (p > 0) base = base * base;
  }
  return result;
}

absl::StatusOr<std::vector<Eigen::MatrixXd>> AllPowers(const Eigen::Ref<const Eigen::MatrixXd>& w,
                                                       int64_t max_power) {
  if (absl::Status st = ValidateSquareFinite("AllPowers", w); !st.ok()) return st;
  if (max_power < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllPowers: max_power must be >= 0, got ", max_power));
  }
  const int64_t d = w.rows();
  constexpr int64_t kMaxDoubles = int64_t{1} << 27;
  if (max_power >= kMaxDoubles / (d * d)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "AllPowers: ", max_power + 1, " matrices of ", d, "x", d, " exceed 2^27 doubles"));
  }
  std::vector<Eigen::MatrixXd> powers(max_power + 1);
  powers[0] = Eigen::MatrixXd::Identity(d, d);
  if (max_power >= 1) powers[1] = w;
  for (int64_t m = 2; m <= max_power; m *= 2) {
    powers[m] = powers[m / 2] * powers[m / 2];
    // Independent products: one parallel step of depth 1.
    const int64_t last = std::min(2 * m - 1, max_power);
    for (int64_t i = m + 1; i <= last; ++i) powers[i] = powers[m] * powers[i - m];
  }
  return powers;
}

absl::StatusOr<Eigen::MatrixXd> ExpFrechet(const Eigen::Ref<const Eigen::MatrixXd>& s,
                                           const Eigen::Ref<const Eigen::MatrixXd>& e) {
  if (absl::Status st = ValidateSquareFinite("ExpFrechet", s); !st.ok()) return st;
  if (absl::Status st = ValidateSquareFinite("ExpFrechet", e); !st.ok()) return st;
  if (s.rows() != e.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("ExpFrechet: S is ", s.rows(), "x", s.cols(),
                                                   ", E is ", e.rows(), "x", e.cols()));
  }
  const Eigen::Index n = s.rows();
  // L is linear in E: scale E to S's size so the scaling-and-squaring of the block
  // matrix is chosen for S, not for an arbitrarily large or small E.
  const double norm_e = e.cwiseAbs().colwise().sum().maxCoeff();
  if (norm_e == 0.0) return Eigen::MatrixXd(Eigen::MatrixXd::Zero(n, n));
  const double norm_s = s.cwiseAbs().colwise().sum().maxCoeff();
  // The scale is a power of two, 2^k ~ max(|S|, 1) / |E|, applied with ldexp: exact, and
  // no overflow for tiny E (|E| = 1e-308 made the quotient inf, then inf * e and NaN).
  int exp_s = 0, exp_e = 0;
  std::frexp(std::max(norm_s, 1.0), &exp_s);
  std::frexp(norm_e, &exp_e);
  const int k = exp_s - exp_e;
  Eigen::MatrixXd big = Eigen::MatrixXd::Zero(2 * n, 2 * n);
  big.topLeftCorner(n, n) = s;
  big.bottomRightCorner(n, n) = s;
  big.topRightCorner(n, n) = e.unaryExpr([k](double x) { return std::ldexp(x, k); });
  const Eigen::MatrixXd eb = big.exp();
  return Eigen::MatrixXd(eb.topRightCorner(n, n).unaryExpr([k](double x) { return std::ldexp(x, -k); }));
}

absl::StatusOr<Eigen::MatrixXd> ExpVjp(const Eigen::Ref<const Eigen::MatrixXd>& s,
                                       const Eigen::Ref<const Eigen::MatrixXd>& upstream) {
  // <G, L(S, E)> = <L(S^T, G), E>: the adjoint of the Frechet derivative.
  const Eigen::MatrixXd st = s.transpose();
  return ExpFrechet(st, upstream);
}

}  // namespace group
}  // namespace gpe
