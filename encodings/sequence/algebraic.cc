#include "encodings/sequence/algebraic.h"

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "group/batch.h"
#include "absl/types/span.h"
#include "group/direct_sum.h"
#include "group/free_group.h"
#include "group/angle.h"
#include "group/free_representation.h"
#include "group/so_dense.h"
#include "group/so_planes.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {


constexpr int64_t kMaxTableDoubles = int64_t{1} << 27;  // 1 GiB

}  // namespace

// ----------------------------------------------------------------------------------
// Sequences
// ----------------------------------------------------------------------------------

absl::StatusOr<AlgebraicSequence> AlgebraicSequence::Create(
    const Eigen::Ref<const Eigen::MatrixXd>& skew) {
  if (skew.rows() < 1) return absl::InvalidArgumentError("AlgebraicSequence: empty generator");
  if (absl::Status s = group::ValidateSkew(skew); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("AlgebraicSequence: ", s.message()));
  }
  absl::StatusOr<group::SchurRotation> rotation = group::SchurRotation::Create(skew);
  if (!rotation.ok()) return rotation.status();
  return AlgebraicSequence(Eigen::MatrixXd(skew), *std::move(rotation));
}

template <class T>
absl::Status AlgebraicSequence::Apply(absl::Span<const int64_t> positions, const T* in,
                                      int64_t in_stride, T* out, int64_t out_stride) const {
  return rotation_.Apply<T>(positions, in, in_stride, out, out_stride);
}

template <class T>
absl::Status AlgebraicSequence::Backward(absl::Span<const int64_t> positions, const T* in,
                                         int64_t in_stride, const T* grad_out,
                                         int64_t grad_out_stride, T* grad_in,
                                         int64_t grad_in_stride,
                                         Eigen::MatrixXd* grad_skew) const {
  const char* who = "AlgebraicSequence::Backward";
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t d = dim();
  if (grad_skew == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null grad_skew"));
  if (absl::Status s = group::internal::ValidateBackwardBatch(
          who, n, d, in, in_stride, grad_out, grad_out_stride, grad_in,
          grad_in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  // dl/dS = sum_j p_j ExpVjp(p_j S, g_j x_j^T) (the adjoint Frechet derivative), taken in
  // the eigenbasis of S (Daleckii-Krein) so that every exponential is a reduced angle.
  // S = V diag(i mu) V^*, V unitary: plane k of the real Schur form gives
  // (u_k -/+ i v_k) / sqrt(2) with mu = +/-phi_k; fixed columns give mu = 0. Then
  //   ExpVjp(p S, U) = L(-p S, U) = V ((V^* U V) o conj(Phi)) V^*,
  //   Phi_ab = (e^{i p mu_a} - e^{i p mu_b}) / (i p (mu_a - mu_b))   (e^{i p mu_a} if equal).
  const Eigen::MatrixXd& q = rotation_.basis();
  const int64_t planes = rotation_.num_planes();
  const std::complex<double> iu(0.0, 1.0);
  const double r2 = 1.0 / std::sqrt(2.0);
  Eigen::MatrixXcd v(d, d);
  std::vector<double> mu(static_cast<size_t>(d), 0.0);
  for (int64_t k = 0; k < planes; ++k) {
    const double phi = rotation_.plane_angles()[k];
    v.col(2 * k) = r2 * (q.col(2 * k).cast<std::complex<double>>() - iu * q.col(2 * k + 1));
    v.col(2 * k + 1) = r2 * (q.col(2 * k).cast<std::complex<double>>() + iu * q.col(2 * k + 1));
    mu[2 * k] = phi;
    mu[2 * k + 1] = -phi;
  }
  for (int64_t c = 2 * planes; c < d; ++c) v.col(c) = q.col(c).cast<std::complex<double>>();
  const Eigen::MatrixXcd vh = v.adjoint();
  const Eigen::MatrixXcd vt = v.transpose();
  Eigen::MatrixXcd m = Eigen::MatrixXcd::Zero(d, d);
  std::vector<std::complex<double>> e(static_cast<size_t>(d));
  Eigen::VectorXd gj(d), xj(d);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t p = positions[j];
    if (p == 0) continue;  // exp(0 S) = I does not depend on S
    const double pd = static_cast<double>(p);
    for (int64_t i = 0; i < d; ++i) {
      gj[i] = static_cast<double>(grad_out[j * grad_out_stride + i]);
      xj[i] = static_cast<double>(in[j * in_stride + i]);
    }
    const Eigen::VectorXcd gh = vh * gj.cast<std::complex<double>>();  // V^* g
    const Eigen::VectorXcd xh = vt * xj.cast<std::complex<double>>();  // V^T x
    for (int64_t a = 0; a < d; ++a) {
      const group::SinCos sc = group::SinCosOfMultiple(p, mu[a]);
      e[a] = std::complex<double>(sc.cos, sc.sin);
    }
    for (int64_t a = 0; a < d; ++a) {
      for (int64_t b = 0; b < d; ++b) {
        const double eps = pd * (mu[a] - mu[b]);
        std::complex<double> phi_ab;
        if (eps == 0.0) {
          phi_ab = e[a];
        } else if (std::fabs(eps) < 1.0) {
          // e^{i p mu_b} (e^{i eps} - 1) / (i eps) without cancellation.
          const double sh = std::sin(0.5 * eps);
          phi_ab = e[b] * std::complex<double>(std::sin(eps) / eps, 2.0 * sh * sh / eps);
        } else {
          phi_ab = (e[a] - e[b]) / (iu * eps);
        }
        m(a, b) += pd * gh[a] * xh[b] * std::conj(phi_ab);
      }
    }
  }
  Eigen::MatrixXd grad = (v * m * vh).real();
  if (grad_in != nullptr && n > 0) {
    // W^{-p} g = (W^p)^T g. Through a temporary so grad_in may alias grad_out.
    std::vector<double> tmp(static_cast<size_t>(n * d));
    for (int64_t j = 0; j < n; ++j) {
      const T* g = grad_out + j * grad_out_stride;
      double* t = tmp.data() + j * d;
      for (int64_t i = 0; i < d; ++i) t[i] = static_cast<double>(g[i]);
      if (positions[j] == std::numeric_limits<int64_t>::min()) {
        const Eigen::VectorXd back =
            rotation_.Matrix(positions[j]).transpose() * Eigen::Map<const Eigen::VectorXd>(t, d);
        for (int64_t i = 0; i < d; ++i) t[i] = back[i];
      } else {
        const int64_t neg[1] = {-positions[j]};
        if (absl::Status s = rotation_.Apply<double>(neg, t, d, t, d); !s.ok()) return s;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < d; ++i) grad_in[j * grad_in_stride + i] = static_cast<T>(tmp[j * d + i]);
    }
  }
  *grad_skew = std::move(grad);
  return absl::OkStatus();
}

template absl::Status AlgebraicSequence::Apply<float>(absl::Span<const int64_t>, const float*,
                                                      int64_t, float*, int64_t) const;
template absl::Status AlgebraicSequence::Apply<double>(absl::Span<const int64_t>, const double*,
                                                       int64_t, double*, int64_t) const;
template absl::Status AlgebraicSequence::Backward<float>(absl::Span<const int64_t>, const float*,
                                                         int64_t, const float*, int64_t, float*,
                                                         int64_t, Eigen::MatrixXd*) const;
template absl::Status AlgebraicSequence::Backward<double>(absl::Span<const int64_t>,
                                                          const double*, int64_t, const double*,
                                                          int64_t, double*, int64_t,
                                                          Eigen::MatrixXd*) const;

// ----------------------------------------------------------------------------------
// Trees
// ----------------------------------------------------------------------------------

absl::StatusOr<AlgebraicTree> AlgebraicTree::Create(
    const std::vector<Eigen::MatrixXd>& skew_generators) {
  if (skew_generators.empty()) {
    return absl::InvalidArgumentError("AlgebraicTree: at least one generator (branch) is required");
  }
  const int64_t d = skew_generators[0].rows();
  for (size_t c = 0; c < skew_generators.size(); ++c) {
    const Eigen::MatrixXd& s = skew_generators[c];
    if (s.rows() < 1 || s.rows() != d || s.cols() != d) {
      return absl::InvalidArgumentError(absl::StrCat("AlgebraicTree: generator ", c, " is ",
                                                     s.rows(), " x ", s.cols(), "; expected ", d,
                                                     " x ", d, " with d >= 1"));
    }
    if (absl::Status st = group::ValidateSkew(s); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("AlgebraicTree: generator ", c, ": ", st.message()));
    }
  }
  // The skew parts, exactly skew (SkewExp's, and the backward's S).
  std::vector<Eigen::MatrixXd> skews;
  skews.reserve(skew_generators.size());
  for (const Eigen::MatrixXd& s : skew_generators) skews.push_back(0.5 * (s - s.transpose()));
  absl::StatusOr<group::FreeGroupRepresentation> rep =
      group::FreeGroupRepresentation::CreateFromSkew(skews);
  if (!rep.ok()) return rep.status();
  return AlgebraicTree(*std::move(rep), std::move(skews));
}

absl::StatusOr<group::FreeWord> AlgebraicTree::Word(absl::Span<const int64_t> address) const {
  return representation_.group().FromTreeAddress(address);
}

absl::StatusOr<Eigen::MatrixXd> AlgebraicTree::Matrix(absl::Span<const int64_t> address) const {
  absl::StatusOr<group::FreeWord> w = Word(address);
  if (!w.ok()) return w.status();
  return representation_.Matrix(*w);
}

template <class T>
absl::Status AlgebraicTree::Apply(absl::Span<const Address> addresses, const T* in,
                                  int64_t in_stride, T* out, int64_t out_stride) const {
  std::vector<group::FreeWord> words;
  words.reserve(addresses.size());
  for (size_t j = 0; j < addresses.size(); ++j) {
    absl::StatusOr<group::FreeWord> w = Word(addresses[j]);
    if (!w.ok()) {
      return absl::Status(w.status().code(), absl::StrCat("AlgebraicTree::Apply: address ", j,
                                                          ": ", w.status().message()));
    }
    words.push_back(*std::move(w));
  }
  return representation_.Apply<T>(words, in, in_stride, out, out_stride);
}

template <class T>
absl::Status AlgebraicTree::Backward(absl::Span<const Address> addresses, const T* in,
                                     int64_t in_stride, const T* grad_out,
                                     int64_t grad_out_stride, T* grad_in, int64_t grad_in_stride,
                                     std::vector<Eigen::MatrixXd>* grad_skews) const {
  const char* who = "AlgebraicTree::Backward";
  const int64_t n = static_cast<int64_t>(addresses.size());
  const int64_t d = dim();
  const int32_t k = branching();
  if (grad_skews == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null grad_skews"));
  }
  if (absl::Status s = group::internal::ValidateBackwardBatch(
          who, n, d, in, in_stride, grad_out, grad_out_stride, grad_in, grad_in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  std::vector<group::FreeWord> words;
  words.reserve(addresses.size());
  for (int64_t j = 0; j < n; ++j) {
    absl::StatusOr<group::FreeWord> w = Word(addresses[j]);
    if (!w.ok()) {
      return absl::Status(w.status().code(),
                          absl::StrCat(who, ": address ", j, ": ", w.status().message()));
    }
    words.push_back(*std::move(w));
  }
  // dl/dW_c, accumulated over every occurrence of branch c on every path.
  std::vector<Eigen::MatrixXd> grad_w(static_cast<size_t>(k), Eigen::MatrixXd::Zero(d, d));
  Eigen::VectorXd a(d), next(d);
  std::vector<Eigen::VectorXd> z;  // z[s] = W_{c_s} ... W_{c_m} x (z[m] = x)
  for (int64_t j = 0; j < n; ++j) {
    const group::FreeWord& letters = words[j];
    const size_t m = letters.size();
    z.assign(m + 1, Eigen::VectorXd(d));
    for (int64_t i = 0; i < d; ++i) z[m][i] = static_cast<double>(in[j * in_stride + i]);
    for (size_t s = m; s-- > 0;) z[s].noalias() = representation_.generator(letters[s]) * z[s + 1];
    for (int64_t i = 0; i < d; ++i) a[i] = static_cast<double>(grad_out[j * grad_out_stride + i]);
    for (size_t s = 0; s < m; ++s) {
      // Tree addresses are words of positive letters (FromTreeAddress): branch c is
      // letter c + 1.
      const Eigen::MatrixXd& w = representation_.generator(letters[s]);
      grad_w[static_cast<size_t>(letters[s] - 1)].noalias() += a * z[s + 1].transpose();
      next.noalias() = w.transpose() * a;
      a.swap(next);
    }
    // a = rho^T g: written after every read of this row's grad_out (exact aliasing).
    if (grad_in != nullptr) {
      for (int64_t i = 0; i < d; ++i) grad_in[j * grad_in_stride + i] = static_cast<T>(a[i]);
    }
  }
  grad_skews->assign(static_cast<size_t>(k), Eigen::MatrixXd());
  for (int32_t c = 0; c < k; ++c) {
    if (grad_w[c].isZero(0.0)) {
      (*grad_skews)[c] = Eigen::MatrixXd::Zero(d, d);
      continue;
    }
    absl::StatusOr<Eigen::MatrixXd> g = group::ExpVjp(skews_[c], grad_w[c]);
    if (!g.ok()) return g.status();
    (*grad_skews)[c] = *std::move(g);
  }
  return absl::OkStatus();
}

template absl::Status AlgebraicTree::Backward<float>(absl::Span<const Address>, const float*,
                                                     int64_t, const float*, int64_t, float*,
                                                     int64_t, std::vector<Eigen::MatrixXd>*) const;
template absl::Status AlgebraicTree::Backward<double>(absl::Span<const Address>, const double*,
                                                      int64_t, const double*, int64_t, double*,
                                                      int64_t,
                                                      std::vector<Eigen::MatrixXd>*) const;

template absl::Status AlgebraicTree::Apply<float>(absl::Span<const Address>, const float*,
                                                  int64_t, float*, int64_t) const;
template absl::Status AlgebraicTree::Apply<double>(absl::Span<const Address>, const double*,
                                                   int64_t, double*, int64_t) const;

absl::StatusOr<int64_t> AlgebraicTree::NumNodes(int64_t max_depth) const {
  if (max_depth < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AlgebraicTree::AllNodeMatrices: max_depth must be >= 0, got ", max_depth));
  }
  const int64_t k = branching();
  const int64_t d2 = dim() * dim();
  // Count nodes, stopping as soon as the table would exceed the memory limit.
  int64_t total = 0, level = 1;
  for (int64_t t = 0; t <= max_depth; ++t) {
    total += level;
    if (total > kMaxTableDoubles / d2) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "AlgebraicTree::AllNodeMatrices: depth ", max_depth, " with branching ", k,
          " and dim ", dim(), " exceeds ", kMaxTableDoubles, " doubles"));
    }
    level *= k;  // level <= total * k <= 2^27 * k: no overflow for int32 k
  }
  return total;
}

absl::StatusOr<std::vector<Eigen::MatrixXd>> AlgebraicTree::AllNodeMatrices(
    int64_t max_depth) const {
  absl::StatusOr<int64_t> total = NumNodes(max_depth);
  if (!total.ok()) return total.status();
  const int64_t k = branching();
  std::vector<Eigen::MatrixXd> all;
  all.reserve(static_cast<size_t>(*total));
  all.push_back(Eigen::MatrixXd::Identity(dim(), dim()));
  int64_t begin = 0, size = 1;
  for (int64_t t = 1; t <= max_depth; ++t) {
    const int64_t next_begin = static_cast<int64_t>(all.size());
    // Kogkalidis et al., sec. 3.2.3: every node of depth t - 1 right-multiplied by the
    // generator of each branch gives depth t (parent-major, child-minor order).
    for (int64_t parent = begin; parent < begin + size; ++parent) {
      for (int32_t c = 1; c <= k; ++c) {
        Eigen::MatrixXd child = all[parent] * representation_.generator(c);
        all.push_back(std::move(child));
      }
    }
    begin = next_begin;
    size *= k;
  }
  return all;
}

absl::StatusOr<int64_t> AlgebraicTree::LevelOrderIndex(absl::Span<const int64_t> address) const {
  const int64_t k = branching();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t offset = 0, level = 1, within = 0;
  for (size_t s = 0; s < address.size(); ++s) {
    if (address[s] < 0 || address[s] >= k) {
      return absl::InvalidArgumentError(absl::StrCat("AlgebraicTree::LevelOrderIndex: child index ",
                                                     address[s], " at depth ", s + 1,
                                                     " is outside [0, ", k, ")"));
    }
    // offset += k^s, level = k^(s+1), within = within * k + c, all overflow-checked;
    // level is not needed after the last step (checking it there refused indices that
    // fit: 63 zeros in a binary tree, index 2^63 - 1).
    const bool last = s + 1 == address.size();
    if (offset > kMax - level || (!last && level > kMax / k) ||
        within > (kMax - address[s]) / k) {
      return absl::OutOfRangeError("AlgebraicTree::LevelOrderIndex: index overflows int64");
    }
    offset += level;
    if (!last) level *= k;
    within = within * k + address[s];
  }
  if (offset > kMax - within) {
    return absl::OutOfRangeError("AlgebraicTree::LevelOrderIndex: index overflows int64");
  }
  return offset + within;
}

// ----------------------------------------------------------------------------------
// Grids and periodic domains
// ----------------------------------------------------------------------------------

namespace {
absl::StatusOr<group::SchurRotation> AxisRotation(const char* who, int axis,
                                                  const Eigen::Ref<const Eigen::MatrixXd>& s) {
  if (s.rows() < 1) return absl::InvalidArgumentError(absl::StrCat(who, ": axis ", axis, " is empty"));
  absl::StatusOr<group::SchurRotation> r = group::SchurRotation::Create(s);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat(who, ": axis ", axis, ": ", r.status().message()));
  }
  return r;
}
}  // namespace

absl::StatusOr<AlgebraicGrid2D> MakeAlgebraicGrid2D(const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_y) {
  auto x = AxisRotation("MakeAlgebraicGrid2D", 0, skew_x);
  if (!x.ok()) return x.status();
  auto y = AxisRotation("MakeAlgebraicGrid2D", 1, skew_y);
  if (!y.ok()) return y.status();
  return AlgebraicGrid2D(*std::move(x), *std::move(y));
}

absl::StatusOr<AlgebraicGrid3D> MakeAlgebraicGrid3D(const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_y,
                                                    const Eigen::Ref<const Eigen::MatrixXd>& skew_z) {
  auto x = AxisRotation("MakeAlgebraicGrid3D", 0, skew_x);
  if (!x.ok()) return x.status();
  auto y = AxisRotation("MakeAlgebraicGrid3D", 1, skew_y);
  if (!y.ok()) return y.status();
  auto z = AxisRotation("MakeAlgebraicGrid3D", 2, skew_z);
  if (!z.ok()) return z.status();
  return AlgebraicGrid3D(*std::move(x), *std::move(y), *std::move(z));
}

absl::StatusOr<AlgebraicSequenceOfTrees> MakeAlgebraicSequenceOfTrees(
    const Eigen::Ref<const Eigen::MatrixXd>& sequence_skew,
    const std::vector<Eigen::MatrixXd>& tree_skews) {
  auto seq = AxisRotation("MakeAlgebraicSequenceOfTrees", 0, sequence_skew);
  if (!seq.ok()) return seq.status();
  // AlgebraicTree::Create validates the branch generators (shape, skew).
  absl::StatusOr<AlgebraicTree> tree = AlgebraicTree::Create(tree_skews);
  if (!tree.ok()) return tree.status();
  return AlgebraicSequenceOfTrees(*std::move(seq), tree->representation());
}

absl::StatusOr<AlgebraicTreeOfGrids> MakeAlgebraicTreeOfGrids(
    const std::vector<Eigen::MatrixXd>& tree_skews, const Eigen::Ref<const Eigen::MatrixXd>& skew_x,
    const Eigen::Ref<const Eigen::MatrixXd>& skew_y) {
  absl::StatusOr<AlgebraicTree> tree = AlgebraicTree::Create(tree_skews);
  if (!tree.ok()) return tree.status();
  auto x = AxisRotation("MakeAlgebraicTreeOfGrids", 1, skew_x);
  if (!x.ok()) return x.status();
  auto y = AxisRotation("MakeAlgebraicTreeOfGrids", 2, skew_y);
  if (!y.ok()) return y.status();
  return AlgebraicTreeOfGrids(tree->representation(), *std::move(x), *std::move(y));
}

template <class T>
absl::Status AlgebraicGridBackward(absl::Span<const AlgebraicSequence> axes,
                                   absl::Span<const int64_t> positions, const T* in,
                                   int64_t in_stride, const T* grad_out, int64_t grad_out_stride,
                                   T* grad_in, int64_t grad_in_stride,
                                   std::vector<Eigen::MatrixXd>* grad_skews) {
  const char* who = "AlgebraicGridBackward";
  if (grad_skews == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null grad_skews"));
  }
  const size_t num_axes = axes.size();
  if (num_axes == 0) return absl::InvalidArgumentError(absl::StrCat(who, ": no axes"));
  if (positions.size() % num_axes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", positions.size(),
                                                   " positions is not a multiple of ",
                                                   num_axes, " axes"));
  }
  const int64_t n = static_cast<int64_t>(positions.size() / num_axes);
  int64_t d = 0;
  for (const AlgebraicSequence& axis : axes) d += axis.dim();
  if (absl::Status s = group::internal::ValidateBackwardBatch(
          who, n, d, in, in_stride, grad_out, grad_out_stride, grad_in, grad_in_stride, sizeof(T));
      !s.ok()) {
    return s;
  }
  // blockdiag(W_a^{p_a}): block a of out depends only on block a of in and on S_a, so the
  // backward splits into one sequence backward per block (same row strides, offset
  // pointers). Each block of grad_in is written after that block of grad_out is read.
  grad_skews->assign(num_axes, Eigen::MatrixXd());
  std::vector<int64_t> axis_positions(static_cast<size_t>(n));
  int64_t offset = 0;
  for (size_t a = 0; a < num_axes; ++a) {
    for (int64_t j = 0; j < n; ++j) axis_positions[j] = positions[j * num_axes + a];
    if (absl::Status s = axes[a].Backward<T>(
            axis_positions, in + offset, in_stride, grad_out + offset, grad_out_stride,
            grad_in == nullptr ? nullptr : grad_in + offset, grad_in_stride, &(*grad_skews)[a]);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(who, ": axis ", a, ": ", s.message()));
    }
    offset += axes[a].dim();
  }
  return absl::OkStatus();
}

template absl::Status AlgebraicGridBackward<float>(absl::Span<const AlgebraicSequence>,
                                                   absl::Span<const int64_t>, const float*,
                                                   int64_t, const float*, int64_t, float*,
                                                   int64_t, std::vector<Eigen::MatrixXd>*);
template absl::Status AlgebraicGridBackward<double>(absl::Span<const AlgebraicSequence>,
                                                    absl::Span<const int64_t>, const double*,
                                                    int64_t, const double*, int64_t, double*,
                                                    int64_t, std::vector<Eigen::MatrixXd>*);

absl::StatusOr<group::CyclicPlanes> MakeAlgebraicPeriodic(int64_t dim, int64_t n,
                                                          std::vector<int64_t> multipliers) {
  return group::CyclicPlanes::Create(dim, dim, n, std::move(multipliers),
                                     group::PlanePairing::kInterleaved);
}

// ----------------------------------------------------------------------------------
// Locality scaling
// ----------------------------------------------------------------------------------

namespace {
absl::Status ValidateLocality(const char* who, double c) {
  if (!std::isfinite(c) || c <= 0.0 || c > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": c must be in (0, 1], got ", c));
  }
  return absl::OkStatus();
}
double Factor(uint64_t distance, double log_c) {
  return distance == 0 ? 1.0 : std::exp(static_cast<double>(distance) * log_c);
}
}  // namespace

absl::StatusOr<double> LocalityFactor(uint64_t distance, double c) {
  if (absl::Status s = ValidateLocality("LocalityFactor", c); !s.ok()) return s;
  return Factor(distance, std::log(c));
}

template <class T>
absl::Status ApplyLocalityScaling(absl::Span<const int64_t> query_positions,
                                  absl::Span<const int64_t> key_positions, double c, T* scores,
                                  int64_t stride) {
  const char* who = "ApplyLocalityScaling";
  if (absl::Status s = ValidateLocality(who, c); !s.ok()) return s;
  const int64_t nq = static_cast<int64_t>(query_positions.size());
  const int64_t nk = static_cast<int64_t>(key_positions.size());
  if (nq == 0 || nk == 0) return absl::OkStatus();
  if (scores == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null scores"));
  if (stride < 0 || (nq > 1 && stride < nk)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": stride ", stride, " must be >= number of keys ", nk));
  }
  const double log_c = std::log(c);
  for (int64_t a = 0; a < nq; ++a) {
    const int64_t i = query_positions[a];
    T* row = scores + a * stride;
    for (int64_t b = 0; b < nk; ++b) {
      const int64_t j = key_positions[b];
      const uint64_t dist = i >= j ? static_cast<uint64_t>(i) - static_cast<uint64_t>(j)
                                   : static_cast<uint64_t>(j) - static_cast<uint64_t>(i);
      // c^d > 0 even where it underflows to 0: an infinite score (a masked -inf) stays
      // infinite rather than becoming inf * 0 = NaN.
      const double f = Factor(dist, log_c), x = static_cast<double>(row[b]);
      row[b] = static_cast<T>(f == 0.0 && std::isinf(x) ? x : x * f);
    }
  }
  return absl::OkStatus();
}

template absl::Status ApplyLocalityScaling<float>(absl::Span<const int64_t>,
                                                  absl::Span<const int64_t>, double, float*,
                                                  int64_t);
template absl::Status ApplyLocalityScaling<double>(absl::Span<const int64_t>,
                                                   absl::Span<const int64_t>, double, double*,
                                                   int64_t);

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
