#include "inr/blended.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace inr {
namespace {

// Points are encoded in chunks so the P x K feature matrix is never whole in memory.
constexpr int64_t kChunk = 4096;

absl::Status CheckGrid(absl::Span<const double> grid, const char* name) {
  if (grid.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, " needs at least 2 coordinates"));
  }
  for (size_t i = 0; i < grid.size(); ++i) {
    if (!std::isfinite(grid[i])) {
      return absl::InvalidArgumentError(absl::StrCat(name, "[", i, "] is not finite"));
    }
    if (i > 0 && !(grid[i] > grid[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be strictly increasing (at ", i, ")"));
    }
  }
  return absl::OkStatus();
}

// The separable model and its blending at the samples.
struct Operator {
  RowMatrixXd psi_x, psi_y;  // N x K_x, M x K_y: encodings of the virtual grid
  RowMatrixXd psi_x_t, psi_y_t;  // their transposes, for the adjoint's BLAS products
  AxisBlend bx, by;

  int64_t n() const { return psi_x.rows(); }
  int64_t m() const { return psi_y.rows(); }

  // y = B (Psi_y W Psi_x^T) at the samples. PredictSeparable2D's refusals (a non-finite
  // W, from the caller or from iterates that overflowed) are returned, never dereferenced.
  absl::Status Forward(const RowMatrixXd& w, std::vector<double>* y) const {
    absl::StatusOr<RowMatrixXd> grid = PredictSeparable2D(psi_y, psi_x, w);  // M x N
    if (!grid.ok()) return grid.status();
    const RowMatrixXd& v = *grid;
    const size_t p = bx.cell.size();
    y->resize(p);
    for (size_t q = 0; q < p; ++q) {
      const int64_t i = bx.cell[q], j = by.cell[q];
      (*y)[q] = by.w0[q] * (bx.w0[q] * v(j, i) + bx.w1[q] * v(j, i + 1)) +
                by.w1[q] * (bx.w0[q] * v(j + 1, i) + bx.w1[q] * v(j + 1, i + 1));
    }
    return absl::OkStatus();
  }

  // g = Psi_y^T (B^T r) Psi_x.
  absl::StatusOr<RowMatrixXd> Adjoint(const std::vector<double>& r) const {
    RowMatrixXd grid = RowMatrixXd::Zero(m(), n());
    for (size_t q = 0; q < r.size(); ++q) {
      const int64_t i = bx.cell[q], j = by.cell[q];
      grid(j, i) += by.w0[q] * bx.w0[q] * r[q];
      grid(j, i + 1) += by.w0[q] * bx.w1[q] * r[q];
      grid(j + 1, i) += by.w1[q] * bx.w0[q] * r[q];
      grid(j + 1, i + 1) += by.w1[q] * bx.w1[q] * r[q];
    }
    return PredictSeparable2D(psi_y_t, psi_x_t, grid);  // Psi_y^T G Psi_x
  }
};

// The fit's iterates left double's range (finite values and encodings whose products
// overflow): said so, rather than returning the refusal of an intermediate.
absl::Status Overflowed(const absl::Status& s) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the blended fit's iterates are not finite (values or encodings too large for double): ",
      s.message()));
}

absl::StatusOr<Operator> MakeOperator(const AxisEncoder& encoder_x, const AxisEncoder& encoder_y,
                                      absl::Span<const double> grid_x,
                                      absl::Span<const double> grid_y,
                                      absl::Span<const double> points_x,
                                      absl::Span<const double> points_y) {
  if (!encoder_x || !encoder_y) return absl::InvalidArgumentError("an axis encoder is empty");
  if (points_x.size() != points_y.size() || points_x.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("need equal, non-zero numbers of x and y ",
                                                   "coordinates; got ", points_x.size(), " and ",
                                                   points_y.size()));
  }
  Operator op;
  absl::StatusOr<AxisBlend> bx = BlendAxis(encoder_x, grid_x, points_x);
  if (!bx.ok()) return bx.status();
  absl::StatusOr<AxisBlend> by = BlendAxis(encoder_y, grid_y, points_y);
  if (!by.ok()) return by.status();
  absl::StatusOr<RowMatrixXd> px = encoder_x(grid_x);
  if (!px.ok()) return px.status();
  absl::StatusOr<RowMatrixXd> py = encoder_y(grid_y);
  if (!py.ok()) return py.status();
  op.bx = std::move(*bx);
  op.by = std::move(*by);
  op.psi_x = std::move(*px);
  op.psi_y = std::move(*py);
  op.psi_x_t = op.psi_x.transpose();
  op.psi_y_t = op.psi_y.transpose();
  return op;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

absl::StatusOr<AxisBlend> BlendAxis(const AxisEncoder& encoder, absl::Span<const double> grid,
                                    absl::Span<const double> coords) {
  absl::Status s = CheckGrid(grid, "grid");
  if (!s.ok()) return s;
  if (!encoder) return absl::InvalidArgumentError("the axis encoder is empty");
  absl::StatusOr<RowMatrixXd> g = encoder(grid);
  if (!g.ok()) return g.status();
  if (g->rows() != static_cast<int64_t>(grid.size())) {
    return absl::InvalidArgumentError("the axis encoder returned the wrong number of rows");
  }
  const int64_t cells = static_cast<int64_t>(grid.size()) - 1;
  // Per cell: the 2 x 2 Gram matrix of eq. 45, inverted once.
  std::vector<std::array<double, 3>> inv(cells);  // (a, b, c) of [[a, b], [b, c]]^-1
  for (int64_t i = 0; i < cells; ++i) {
    const double g00 = g->row(i).squaredNorm(), g11 = g->row(i + 1).squaredNorm();
    const double g01 = g->row(i).dot(g->row(i + 1));
    const double det = g00 * g11 - g01 * g01;
    // Cauchy-Schwarz: det >= 0; near 0 the corner encodings are parallel.
    if (!(det > 1e-12 * g00 * g11)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the encodings of grid points ", i, " and ", i + 1,
          " are (nearly) linearly dependent: blending weights are undefined; use a finer "
          "basis or a coarser grid"));
    }
    inv[i] = {g11 / det, -g01 / det, g00 / det};
  }
  AxisBlend out;
  const size_t p = coords.size();
  out.cell.resize(p);
  out.w0.resize(p);
  out.w1.resize(p);
  for (size_t start = 0; start < p; start += kChunk) {
    const size_t end = std::min(p, start + kChunk);
    for (size_t q = start; q < end; ++q) {
      if (!std::isfinite(coords[q]) || coords[q] < grid.front() || coords[q] > grid.back()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "coordinate ", q, " (", coords[q], ") is outside the grid [", grid.front(), ", ",
            grid.back(), "]"));
      }
    }
    absl::StatusOr<RowMatrixXd> e = encoder(coords.subspan(start, end - start));
    if (!e.ok()) return e.status();
    for (size_t q = start; q < end; ++q) {
      const double x = coords[q];
      int64_t i = std::upper_bound(grid.begin(), grid.end(), x) - grid.begin() - 1;
      i = std::clamp<int64_t>(i, 0, cells - 1);
      // eq. 44: alpha = Gram^-1 [Psi(g_i) . Psi(x); Psi(g_{i+1}) . Psi(x)].
      const auto row = e->row(static_cast<int64_t>(q - start));
      const double r0 = g->row(i).dot(row), r1 = g->row(i + 1).dot(row);
      out.cell[q] = i;
      out.w0[q] = inv[i][0] * r0 + inv[i][1] * r1;
      out.w1[q] = inv[i][1] * r0 + inv[i][2] * r1;
    }
  }
  return out;
}

absl::StatusOr<BlendedFit> FitBlended2D(const AxisEncoder& encoder_x, const AxisEncoder& encoder_y,
                                        absl::Span<const double> grid_x,
                                        absl::Span<const double> grid_y,
                                        absl::Span<const double> points_x,
                                        absl::Span<const double> points_y,
                                        absl::Span<const double> values,
                                        const BlendedFitOptions& options) {
  if (!std::isfinite(options.lambda) || options.lambda < 0) {
    return absl::InvalidArgumentError(absl::StrCat("lambda must be finite and >= 0; got ",
                                                   options.lambda));
  }
  if (options.max_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be >= 1; got ", options.max_iterations));
  }
  if (!std::isfinite(options.tolerance) || options.tolerance < 0) {  // 0: run every iteration
    return absl::InvalidArgumentError(
        absl::StrCat("tolerance must be finite and >= 0; got ", options.tolerance));
  }
  if (values.size() != points_x.size()) {
    return absl::InvalidArgumentError(absl::StrCat(values.size(), " values for ",
                                                   points_x.size(), " points"));
  }
  for (size_t q = 0; q < values.size(); ++q) {
    if (!std::isfinite(values[q])) {
      return absl::InvalidArgumentError(absl::StrCat("value ", q, " is not finite"));
    }
  }
  absl::StatusOr<Operator> op = MakeOperator(encoder_x, encoder_y, grid_x, grid_y, points_x, points_y);
  if (!op.ok()) return op.status();
  const double lambda = options.lambda;
  const int64_t ky = op->psi_y.cols(), kx = op->psi_x.cols();

  // Preconditioning by orthonormalised factors: with G = Psi^T Psi = L L^T (plus 1e-12
  // of its largest diagonal, so rank deficiency shows as a failed factorisation, not as
  // noise), Q = Psi L^-T has orthonormal columns and W = L_y^-T Z L_x^-1 turns the problem
  // into one in Z whose normal matrix is (Q_y (x) Q_x)^T B^T B (Q_y (x) Q_x): close to a
  // multiple of I for evenly spread samples, so CGLS needs tens of iterations, not
  // hundreds.
  std::array<Eigen::LLT<Eigen::MatrixXd>, 2> chol;
  for (int axis = 0; axis < 2; ++axis) {
    RowMatrixXd& psi = axis == 0 ? op->psi_x : op->psi_y;
    Eigen::MatrixXd g = psi.transpose() * psi;
    const double jitter = 1e-12 * g.diagonal().maxCoeff();
    g.diagonal().array() += jitter;
    chol[axis].compute(g);
    if (chol[axis].info() != Eigen::Success || !(g.diagonal().maxCoeff() > 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", axis == 0 ? "x" : "y", " encoding of the virtual grid is rank deficient: "
          "use fewer basis functions than grid points or a wider basis"));
    }
    // Q = Psi L^-T, i.e. Q^T = L^-1 Psi^T.
    RowMatrixXd q = chol[axis].matrixL().solve(psi.transpose()).transpose();
    psi = std::move(q);
    (axis == 0 ? op->psi_x_t : op->psi_y_t) = psi.transpose();
  }

  // CGLS for min |A z - s|^2 + lambda |z|^2 (Hestenes-Stiefel on the normal equations),
  // on the values scaled by a power of two to a largest magnitude in [1, 2): z is linear
  // in s and the stopping rule relative, so the scaling is exact and changes nothing but
  // the range of the squared norms (values of 1e160 made |A^T s|^2 inf, and the loop
  // stopped at once with W = 0).
  double vmax = 0;
  for (double v : values) vmax = std::max(vmax, std::abs(v));
  const int vexp = vmax > 0 ? std::ilogb(vmax) : 0;
  std::vector<double> r(values.size());  // s - A z, z = 0
  for (size_t i = 0; i < r.size(); ++i) r[i] = std::ldexp(values[i], -vexp);
  RowMatrixXd w = RowMatrixXd::Zero(ky, kx);
  absl::StatusOr<RowMatrixXd> grad0 = op->Adjoint(r);   // A^T r - lambda z
  if (!grad0.ok()) return Overflowed(grad0.status());
  RowMatrixXd grad = *std::move(grad0);
  RowMatrixXd dir = grad;
  double gamma = grad.squaredNorm();
  const double gamma0 = gamma;
  if (!std::isfinite(gamma0)) {
    return Overflowed(absl::InvalidArgumentError("|A^T s|^2 overflows"));
  }
  BlendedFit fit;
  std::vector<double> q;
  int it = 0;
  while (it < options.max_iterations && gamma > options.tolerance * options.tolerance * gamma0 &&
         gamma0 > 0) {
    if (absl::Status s = op->Forward(dir, &q); !s.ok()) return Overflowed(s);
    const double delta = Dot(q, q) + lambda * dir.squaredNorm();
    if (!(delta > 0)) break;
    const double alpha = gamma / delta;
    w += alpha * dir;
    for (size_t i = 0; i < r.size(); ++i) r[i] -= alpha * q[i];
    absl::StatusOr<RowMatrixXd> adj = op->Adjoint(r);
    if (!adj.ok()) return Overflowed(adj.status());
    grad = *adj - lambda * w;
    const double gamma_new = grad.squaredNorm();
    dir = grad + (gamma_new / gamma) * dir;
    gamma = gamma_new;
    ++it;
    if (options.progress && it % 25 == 0) options.progress(it, std::sqrt(gamma / gamma0));
  }
  // Back to the weights of the unpreconditioned model: W = L_y^-T Z L_x^-1.
  Eigen::MatrixXd zw = chol[1].matrixU().solve(Eigen::MatrixXd(w));           // L_y^-T Z
  zw = chol[0].matrixU().solve(zw.transpose()).transpose();                    // ... L_x^-1
  w = zw.unaryExpr([vexp](double x) { return std::ldexp(x, vexp); });  // the values' scale
  if (!w.allFinite()) return Overflowed(absl::OutOfRangeError("the weights overflow"));
  fit.weights = std::move(w);
  fit.iterations = it;
  fit.relative_gradient = gamma0 > 0 ? std::sqrt(gamma / gamma0) : 0.0;
  fit.rms_residual =
      std::ldexp(std::sqrt(Dot(r, r) / static_cast<double>(r.size())), vexp);
  return fit;
}

absl::StatusOr<std::vector<double>> PredictBlended2D(
    const AxisEncoder& encoder_x, const AxisEncoder& encoder_y, absl::Span<const double> grid_x,
    absl::Span<const double> grid_y, absl::Span<const double> points_x,
    absl::Span<const double> points_y, const MatrixRef& weights) {
  absl::StatusOr<Operator> op = MakeOperator(encoder_x, encoder_y, grid_x, grid_y, points_x, points_y);
  if (!op.ok()) return op.status();
  if (weights.rows() != op->psi_y.cols() || weights.cols() != op->psi_x.cols()) {
    return absl::InvalidArgumentError(absl::StrCat("weights are ", weights.rows(), " x ",
                                                   weights.cols(), "; the encoders give ",
                                                   op->psi_y.cols(), " x ", op->psi_x.cols()));
  }
  std::vector<double> y;
  if (absl::Status s = op->Forward(RowMatrixXd(weights), &y); !s.ok()) return s;
  return y;
}

}  // namespace inr
}  // namespace gpe
