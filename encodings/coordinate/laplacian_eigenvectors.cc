#include "encodings/coordinate/laplacian_eigenvectors.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>
#include <Eigen/Sparse>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gpe {
namespace encodings {
namespace {

constexpr int64_t kMaxDenseNodes = 4096;
constexpr int64_t kMaxNodes = int64_t{1} << 31;

}  // namespace

absl::StatusOr<Eigen::SparseMatrix<double>> GraphLaplacian(int64_t num_nodes,
                                                           absl::Span<const GraphEdge> edges,
                                                           LaplacianKind kind) {
  if (num_nodes < 1 || num_nodes >= kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("GraphLaplacian: num_nodes must be in [1, 2^31), got ", num_nodes));
  }
  std::vector<double> degree(num_nodes, 0.0);
  for (size_t e = 0; e < edges.size(); ++e) {
    const GraphEdge& g = edges[e];
    if (g.u < 0 || g.u >= num_nodes || g.v < 0 || g.v >= num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("GraphLaplacian: edge ", e, " (", g.u, ", ",
                                                     g.v, ") has a node outside [0, ",
                                                     num_nodes, ")"));
    }
    if (g.u == g.v) {
      return absl::InvalidArgumentError(absl::StrCat("GraphLaplacian: edge ", e, " is a self-loop"));
    }
    if (!(std::isfinite(g.weight) && g.weight > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GraphLaplacian: edge ", e, " weight must be finite and > 0"));
    }
    degree[g.u] += g.weight;
    degree[g.v] += g.weight;
  }
  for (double d : degree) {
    if (!std::isfinite(d)) return absl::InvalidArgumentError("GraphLaplacian: degree overflows");
  }
  std::vector<double> scale(num_nodes, 1.0);
  if (kind == LaplacianKind::kSymmetric) {
    for (int64_t i = 0; i < num_nodes; ++i) scale[i] = degree[i] > 0 ? 1 / std::sqrt(degree[i]) : 0;
  }
  std::vector<Eigen::Triplet<double>> triplets;
  triplets.reserve(2 * edges.size() + num_nodes);
  for (const GraphEdge& g : edges) {
    const double off = -g.weight * scale[g.u] * scale[g.v];
    triplets.emplace_back(g.u, g.v, off);
    triplets.emplace_back(g.v, g.u, off);
  }
  for (int64_t i = 0; i < num_nodes; ++i) {
    const double diag = kind == LaplacianKind::kSymmetric ? (degree[i] > 0 ? 1.0 : 0.0) : degree[i];
    if (diag != 0) triplets.emplace_back(i, i, diag);
  }
  Eigen::SparseMatrix<double> lap(num_nodes, num_nodes);
  lap.setFromTriplets(triplets.begin(), triplets.end());  // sums duplicates
  return lap;
}

absl::StatusOr<LaplacianEigenpairs> LaplacianEigenvectorEncoding(
    int64_t num_nodes, absl::Span<const GraphEdge> edges, int64_t k,
    const LaplacianEncodingOptions& options) {
  const int64_t skip = options.skip_first ? 1 : 0;
  if (k < 1 || k > num_nodes - skip) {  // (k + skip could overflow)
    return absl::InvalidArgumentError(absl::StrCat("LaplacianEigenvectorEncoding: k = ", k,
                                                   " (skip ", skip, ") for ", num_nodes,
                                                   " nodes"));
  }
  if (num_nodes > kMaxDenseNodes) {
    return absl::UnimplementedError(absl::StrCat(
        "LaplacianEigenvectorEncoding: ", num_nodes,
        " nodes exceeds the dense solver's limit of 4096; a sparse eigensolver is needed"));
  }
  absl::StatusOr<Eigen::SparseMatrix<double>> lap = GraphLaplacian(num_nodes, edges, options.kind);
  if (!lap.ok()) return lap.status();
  const Eigen::MatrixXd dense(*lap);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(dense);
  if (eig.info() != Eigen::Success) {
    return absl::InternalError("LaplacianEigenvectorEncoding: eigensolver did not converge");
  }
  LaplacianEigenpairs out;
  out.eigenvalues = eig.eigenvalues().segment(skip, k);
  out.eigenvectors = eig.eigenvectors().middleCols(skip, k);
  for (int64_t j = 0; j < k; ++j) {
    auto col = out.eigenvectors.col(j);
    const double top = col.cwiseAbs().maxCoeff();
    for (int64_t i = 0; i < num_nodes; ++i) {
      if (std::abs(col(i)) >= top * (1 - 1e-9)) {
        if (col(i) < 0) col *= -1;
        break;
      }
    }
  }
  return out;
}

}  // namespace encodings
}  // namespace gpe
