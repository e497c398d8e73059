// Random inputs and matrix checks shared by group/'s tests (testonly).
#ifndef GROUP_TEST_UTIL_H_
#define GROUP_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Dense>

namespace gpe {
namespace group {
namespace testing {

inline Eigen::MatrixXd RandomMatrix(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = normal(rng);
  }
  return m;
}

inline std::vector<double> RandomVector(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// A random skew-symmetric matrix with entries of size ~scale.
inline Eigen::MatrixXd RandomSkew(int64_t n, double scale, std::mt19937_64& rng) {
  const Eigen::MatrixXd a = RandomMatrix(n, n, rng);
  return scale * 0.5 * (a - a.transpose());
}

// max |M^T M - I|.
inline double OrthogonalityError(const Eigen::MatrixXd& m) {
  return (m.transpose() * m - Eigen::MatrixXd::Identity(m.cols(), m.cols()))
      .cwiseAbs()
      .maxCoeff();
}

inline double MaxAbsDiff(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return (a - b).cwiseAbs().maxCoeff();
}

// A random position with a random magnitude up to 2^max_bits (either sign).
inline int64_t RandomPosition(int max_bits, std::mt19937_64& rng) {
  const int bits = static_cast<int>(rng() % (max_bits + 1));
  int64_t p = bits == 0 ? 0 : static_cast<int64_t>(rng() >> (64 - bits));
  return (rng() % 2) ? -p : p;
}

// <rho(i) q, rho(j) k> - <q, rho(j - i) k>: zero for an orthogonal representation of Z
// (relativity). NaN when an Apply fails, so any tolerance check fails too.
template <class Rep>
double RelativityError(const Rep& rho, int64_t d, int64_t i, int64_t j,
                       const std::vector<double>& q, const std::vector<double>& k) {
  std::vector<double> qi(d), kj(d), kd(d);
  const int64_t pd = j - i;
  if (!rho.template Apply<double>({&i, 1}, q.data(), d, qi.data(), d).ok() ||
      !rho.template Apply<double>({&j, 1}, k.data(), d, kj.data(), d).ok() ||
      !rho.template Apply<double>({&pd, 1}, k.data(), d, kd.data(), d).ok()) {
    return std::nan("");
  }
  double lhs = 0, rhs = 0;
  for (int64_t c = 0; c < d; ++c) {
    lhs += qi[c] * kj[c];
    rhs += q[c] * kd[c];
  }
  return lhs - rhs;
}

}  // namespace testing
}  // namespace group
}  // namespace gpe

#endif  // GROUP_TEST_UTIL_H_
