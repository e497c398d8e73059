// Laplacian eigenvector encodings of graph nodes (Lim et al. Table 1, "Graph" row;
// Belkin & Niyogi; Dwivedi & Bresson): node i gets (v_1(i), ..., v_k(i)) from the
// eigenvectors of the graph Laplacian with the k smallest eigenvalues.
//
// Laplacians (undirected; edge weights w > 0; duplicate edges add; self-loops are
// rejected):
//   kCombinatorial  L = D - A
//   kSymmetric      L = I - D^{-1/2} A D^{-1/2}; an isolated node gets a zero row and
//                   column (as networkx's normalized_laplacian_matrix does).
//
// Ambiguities (Lim et al. 2023, "Sign and basis invariant networks"): eigenvectors are
// defined only up to sign, and within a repeated eigenvalue only up to an orthogonal
// change of basis. This function fixes the sign of each returned vector so that its
// entry of largest magnitude (the first one, among entries within 1e-9 relative of the
// largest) is positive; that is deterministic for a given input but can flip under tiny
// perturbations when two entries tie. Repeated eigenvalues (a cycle's pairs, symmetric
// graphs) return an arbitrary orthonormal basis of the eigenspace: downstream models
// should be invariant to it, or use the projector onto the eigenspace instead.
//
// Solver: Eigen's dense SelfAdjointEigenSolver on the assembled sparse Laplacian, exact
// for all eigenpairs and O(n^3): fine for n up to a few thousand nodes (larger graphs
// return Unimplemented; a sparse Lanczos solver such as Spectra is the route there).
#ifndef ENCODINGS_COORDINATE_LAPLACIAN_EIGENVECTORS_H_
#define ENCODINGS_COORDINATE_LAPLACIAN_EIGENVECTORS_H_

#include <cstdint>

#include <Eigen/Dense>
#include <Eigen/Sparse>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encodings/coordinate/encoder.h"

namespace gpe {
namespace encodings {

struct GraphEdge {
  int64_t u = 0;
  int64_t v = 0;
  double weight = 1.0;
};

enum class LaplacianKind { kCombinatorial, kSymmetric };

// Sparse n x n Laplacian. Node ids in [0, num_nodes); weights finite and > 0.
absl::StatusOr<Eigen::SparseMatrix<double>> GraphLaplacian(int64_t num_nodes,
                                                           absl::Span<const GraphEdge> edges,
                                                           LaplacianKind kind);

struct LaplacianEigenpairs {
  Eigen::VectorXd eigenvalues;  // ascending, size k
  RowMatrixXd eigenvectors;     // num_nodes x k, unit columns: row i encodes node i
};

struct LaplacianEncodingOptions {
  LaplacianKind kind = LaplacianKind::kCombinatorial;
  // Skip the first eigenpair (eigenvalue 0, constant on a connected graph for
  // kCombinatorial), which carries no positional information.
  bool skip_first = false;
};

// The k smallest eigenpairs (after skipping, if asked); 1 <= k, and k (+1 if skipping)
// <= num_nodes <= 4096.
absl::StatusOr<LaplacianEigenpairs> LaplacianEigenvectorEncoding(
    int64_t num_nodes, absl::Span<const GraphEdge> edges, int64_t k,
    const LaplacianEncodingOptions& options = {});

}  // namespace encodings
}  // namespace gpe

#endif  // ENCODINGS_COORDINATE_LAPLACIAN_EIGENVECTORS_H_
