#include "encodings/sequence/bias.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "build_defs/target_clones.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

constexpr int64_t kMaxHeads = int64_t{1} << 20;
constexpr int64_t kMaxBuckets = int64_t{1} << 20;

// Checks shared by every tiled call (forward and backward).
absl::Status ValidateTile(const char* who, int64_t num_heads, int64_t head,
                          absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                          const void* tile, int64_t ld) {
  if (head < 0 || head >= num_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": head ", head, " outside [0, ", num_heads, ")"));
  }
  const int64_t n = static_cast<int64_t>(k.size());
  if (ld < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": row stride ", ld, " is less than the tile width ", n));
  }
  if (q.empty() || k.empty()) return absl::OkStatus();
  if (tile == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": null tile"));
  const auto [qmin, qmax] = std::minmax_element(q.begin(), q.end());
  const auto [kmin, kmax] = std::minmax_element(k.begin(), k.end());
  // Both signs: biases take q - k (ALiBi) or k - q (T5, FoX); they differ in range only
  // at -2^63, whose negation overflows (an unseeded attention_fuzzer run found T5's
  // k - q = 2^63 after q - k = -2^63 had passed).
  int64_t d;
  if (__builtin_sub_overflow(*qmax, *kmin, &d) || __builtin_sub_overflow(*qmin, *kmax, &d) ||
      __builtin_sub_overflow(*kmax, *qmin, &d) || __builtin_sub_overflow(*kmin, *qmax, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": query minus key position overflows int64"));
  }
  return absl::OkStatus();
}

// ValidateTile for a gradient tile, then the size of each gradient buffer, in order.
absl::Status ValidateGradientTile(const char* who, int64_t num_heads, int64_t head,
                                  absl::Span<const int64_t> q, absl::Span<const int64_t> k,
                                  const void* grad_tile, int64_t ld, int64_t expected,
                                  std::initializer_list<absl::Span<double>> buffers) {
  if (absl::Status s = ValidateTile(who, num_heads, head, q, k, grad_tile, ld); !s.ok()) return s;
  for (absl::Span<double> buf : buffers) {
    if (static_cast<int64_t>(buf.size()) != expected) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": gradient buffer has ", buf.size(),
                                                     " entries, expected ", expected));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenRange(const char* who, absl::Span<const int64_t> positions, int64_t first,
                             int64_t length) {
  for (int64_t p : positions) {
    // p - first cannot overflow: first + length fits in int64 (checked at creation), so
    // compare without subtracting.
    if (p < first || p >= first + length) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": position ", p, " outside [", first, ", ", first + length, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSequence(const char* who, int64_t length, int64_t num_heads,
                           int64_t first_position) {
  if (length < 1) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": length must be >= 1, got ", length));
  }
  if (num_heads < 1 || num_heads > kMaxHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": num_heads must be in [1, ", kMaxHeads, "], got ", num_heads));
  }
  int64_t end;
  if (__builtin_add_overflow(first_position, length, &end)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": first_position + length overflows int64"));
  }
  return absl::OkStatus();
}

// sigmoid(x) without overflow.
double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// One row of FoX's tile: row[j] = (ci - ck[j]) + (ci_lo - ck_lo[j]) rounded to T (the
// double-double difference of prefix sums, FoxBias::Fill), in fixed blocks of 8 (GCC
// vectorises those at -O2, not a loop of unknown length), then the tail.
template <class T>
inline void FoxRowBlocks(double ci, double ci_lo, const double* ck, const double* ck_lo,
                         int64_t n, T* row) {
  constexpr int64_t kBlock = 8;
  int64_t col = 0;
  for (; col + kBlock <= n; col += kBlock) {
    T t[kBlock];
    for (int64_t l = 0; l < kBlock; ++l) {
      t[l] = static_cast<T>((ci - ck[col + l]) + (ci_lo - ck_lo[col + l]));
    }
    for (int64_t l = 0; l < kBlock; ++l) row[col + l] = t[l];
  }
  for (; col < n; ++col) row[col] = static_cast<T>((ci - ck[col]) + (ci_lo - ck_lo[col]));
}

// The float rows (the attention kernels' tiles, every score of every tile) cloned for
// AVX-512, AVX2 and the baseline, chosen when the library loads. (A plain function, not a
// template: clang multiversions no function templates.)
GPE_TARGET_CLONES("avx512f", "avx2", "default") void FoxRowF32(
    double ci, double ci_lo, const double* ck, const double* ck_lo, int64_t n, float* row) {
  FoxRowBlocks(ci, ci_lo, ck, ck_lo, n, row);
}

// row[j] = qi + kp[j] (FoxBias::Fill's anchored float tiles), in blocks of 16 through a
// buffer (row may be kp: the first row is finished in place), cloned as FoxRowF32.
GPE_TARGET_CLONES("avx512f", "avx2", "default") void FoxRowAnchoredF32(
    float qi, const float* kp, int64_t n, float* row) {
  constexpr int64_t kBlock = 16;
  int64_t col = 0;
  for (; col + kBlock <= n; col += kBlock) {
    float t[kBlock];
    for (int64_t l = 0; l < kBlock; ++l) t[l] = qi + kp[col + l];
    for (int64_t l = 0; l < kBlock; ++l) row[col + l] = t[l];
  }
  for (; col < n; ++col) row[col] = qi + kp[col];
}

}  // namespace

// ----------------------------------- AdditiveBias ----------------------------------

absl::Status AdditiveBias::FillDistances(int64_t head, int64_t first_distance, int64_t width,
                                         float* out) const {
  constexpr char kWho[] = "AdditiveBias::FillDistances";
  if (!relative()) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": the bias is not relative"));
  }
  if (head < 0 || head >= num_heads()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": head ", head, " outside [0, ", num_heads(), ")"));
  }
  if (width < 0) return absl::InvalidArgumentError(absl::StrCat(kWho, ": width ", width, " < 0"));
  if (width == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(kWho, ": null out"));
  // Distances first .. first + width - 1, each negatable (FillTile's q - k and k - q).
  int64_t last;
  if (first_distance == std::numeric_limits<int64_t>::min() ||
      __builtin_add_overflow(first_distance, width - 1, &last)) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": distances overflow int64"));
  }
  return DoFillDistances(head, first_distance, width, out);
}

absl::Status AdditiveBias::DoFillDistances(int64_t head, int64_t first_distance, int64_t width,
                                           float* out) const {
  std::vector<int64_t> keys(static_cast<size_t>(width));
  for (int64_t t = 0; t < width; ++t) keys[t] = first_distance + t;
  const int64_t zero = 0;
  return DoFillTile(head, absl::MakeConstSpan(&zero, 1), keys, out, width);
}

absl::Status AdditiveBias::FillTile(int64_t head, absl::Span<const int64_t> q_positions,
                                    absl::Span<const int64_t> k_positions, float* out,
                                    int64_t ld) const {
  if (absl::Status s = ValidateTile("AdditiveBias::FillTile", num_heads(), head, q_positions,
                                    k_positions, out, ld);
      !s.ok()) {
    return s;
  }
  if (q_positions.empty() || k_positions.empty()) return absl::OkStatus();
  return DoFillTile(head, q_positions, k_positions, out, ld);
}

absl::Status AdditiveBias::FillTile(int64_t head, absl::Span<const int64_t> q_positions,
                                    absl::Span<const int64_t> k_positions, double* out,
                                    int64_t ld) const {
  if (absl::Status s = ValidateTile("AdditiveBias::FillTile", num_heads(), head, q_positions,
                                    k_positions, out, ld);
      !s.ok()) {
    return s;
  }
  if (q_positions.empty() || k_positions.empty()) return absl::OkStatus();
  return DoFillTile(head, q_positions, k_positions, out, ld);
}

absl::StatusOr<Eigen::MatrixXd> DenseBias(const AdditiveBias& bias, int64_t head,
                                          absl::Span<const int64_t> q_positions,
                                          absl::Span<const int64_t> k_positions) {
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t m = static_cast<int64_t>(q_positions.size());
  const int64_t n = static_cast<int64_t>(k_positions.size());
  RowMajor out = RowMajor::Zero(m, n);
  if (absl::Status s = bias.FillTile(head, q_positions, k_positions, out.data(), n); !s.ok()) {
    return s;
  }
  return Eigen::MatrixXd(out);
}

// -------------------------------------- ALiBi --------------------------------------

absl::StatusOr<std::vector<double>> AlibiSlopes(int64_t num_heads) {
  if (num_heads < 1 || num_heads > kMaxHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat("AlibiSlopes: num_heads must be in [1, ", kMaxHeads, "], got ", num_heads));
  }
  // Press et al.: for a power of two n, m_h = 2^(-8h/n), h = 1..n.
  auto power_of_two = [](int64_t n) {
    std::vector<double> s(n);
    for (int64_t h = 1; h <= n; ++h) {
      s[h - 1] = std::exp2(-8.0 * static_cast<double>(h) / static_cast<double>(n));
    }
    return s;
  };
  int64_t c = 1;
  while (c * 2 <= num_heads) c *= 2;
  std::vector<double> slopes = power_of_two(c);
  if (c == num_heads) return slopes;
  const std::vector<double> twice = power_of_two(2 * c);
  for (int64_t i = 0; static_cast<int64_t>(slopes.size()) < num_heads; i += 2) {
    slopes.push_back(twice[i]);
  }
  return slopes;
}

absl::StatusOr<AlibiBias> AlibiBias::Create(std::vector<double> slopes, AlibiForm form) {
  if (slopes.empty() || static_cast<int64_t>(slopes.size()) > kMaxHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat("AlibiBias: need between 1 and ", kMaxHeads, " slopes, got ", slopes.size()));
  }
  for (size_t h = 0; h < slopes.size(); ++h) {
    if (!std::isfinite(slopes[h])) {
      return absl::InvalidArgumentError(absl::StrCat("AlibiBias: slope ", h, " is not finite"));
    }
  }
  if (form != AlibiForm::kCausal && form != AlibiForm::kSymmetric) {
    return absl::InvalidArgumentError("AlibiBias: unknown form");
  }
  return AlibiBias(std::move(slopes), form);
}

absl::StatusOr<AlibiBias> AlibiBias::CreateStandard(int64_t num_heads, AlibiForm form) {
  absl::StatusOr<std::vector<double>> slopes = AlibiSlopes(num_heads);
  if (!slopes.ok()) return slopes.status();
  return Create(*std::move(slopes), form);
}

template <class T>
absl::Status AlibiBias::Fill(int64_t head, absl::Span<const int64_t> q,
                             absl::Span<const int64_t> k, T* out, int64_t ld) const {
  const double m = slopes_[head];
  const bool symmetric = form_ == AlibiForm::kSymmetric;
  for (size_t r = 0; r < q.size(); ++r) {
    T* row = out + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k.size(); ++c) {
      // i - j is exact in int64 (ValidateTile); one rounding to double, one product.
      const double d = static_cast<double>(q[r] - k[c]);
      row[c] = static_cast<T>(-m * (symmetric ? std::fabs(d) : d));
    }
  }
  return absl::OkStatus();
}

absl::Status AlibiBias::DoFillDistances(int64_t head, int64_t first_distance, int64_t width,
                                        float* out) const {
  // Fill's arithmetic at q = 0, k = first_distance + t: d = q - k, exact in int64.
  const double m = slopes_[head];
  const bool symmetric = form_ == AlibiForm::kSymmetric;
  for (int64_t t = 0; t < width; ++t) {
    const double d = static_cast<double>(-(first_distance + t));
    out[t] = static_cast<float>(-m * (symmetric ? std::fabs(d) : d));
  }
  return absl::OkStatus();
}

template <class T>
absl::Status AlibiBias::AccumulateSlopeGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                                absl::Span<const int64_t> k_positions,
                                                const T* grad_tile, int64_t ld,
                                                absl::Span<double> grad_slopes) const {
  if (absl::Status s = ValidateGradientTile("AlibiBias::AccumulateSlopeGradient", num_heads(),
                                            head, q_positions, k_positions, grad_tile, ld,
                                            num_heads(), {grad_slopes});
      !s.ok()) {
    return s;
  }
  const bool symmetric = form_ == AlibiForm::kSymmetric;
  double acc = 0.0;
  for (size_t r = 0; r < q_positions.size(); ++r) {
    const T* row = grad_tile + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k_positions.size(); ++c) {
      const double d = static_cast<double>(q_positions[r] - k_positions[c]);
      acc -= static_cast<double>(row[c]) * (symmetric ? std::fabs(d) : d);
    }
  }
  grad_slopes[head] += acc;
  return absl::OkStatus();
}

template absl::Status AlibiBias::AccumulateSlopeGradient<float>(int64_t, absl::Span<const int64_t>,
                                                                absl::Span<const int64_t>,
                                                                const float*, int64_t,
                                                                absl::Span<double>) const;
template absl::Status AlibiBias::AccumulateSlopeGradient<double>(int64_t, absl::Span<const int64_t>,
                                                                 absl::Span<const int64_t>,
                                                                 const double*, int64_t,
                                                                 absl::Span<double>) const;

// ---------------------------------------- T5 ---------------------------------------

absl::Status ValidateT5BucketConfig(const T5BucketConfig& config) {
  const int64_t min_buckets = config.bidirectional ? 4 : 2;
  if (config.num_buckets < min_buckets || config.num_buckets > kMaxBuckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "T5 buckets: num_buckets must be in [", min_buckets, ", ", kMaxBuckets, "] (",
        config.bidirectional ? "bidirectional" : "causal", "), got ", config.num_buckets));
  }
  const int64_t nb = config.bidirectional ? config.num_buckets / 2 : config.num_buckets;
  const int64_t max_exact = nb / 2;
  // ln(max_distance / max_exact) must be positive for the logarithmic buckets.
  if (config.max_distance <= max_exact) {
    return absl::InvalidArgumentError(
        absl::StrCat("T5 buckets: max_distance must exceed max_exact = ", max_exact, ", got ",
                     config.max_distance));
  }
  return absl::OkStatus();
}

int64_t T5Bucket(int64_t rel, const T5BucketConfig& config) {
  int64_t nb = config.num_buckets;
  int64_t bucket = 0;
  uint64_t n;  // |rel| as unsigned: rel may be INT64_MIN
  if (config.bidirectional) {
    nb /= 2;
    if (rel > 0) bucket = nb;
    n = rel < 0 ? 0 - static_cast<uint64_t>(rel) : static_cast<uint64_t>(rel);
  } else {
    n = rel < 0 ? 0 - static_cast<uint64_t>(rel) : 0;
  }
  const int64_t max_exact = nb / 2;
  if (n < static_cast<uint64_t>(max_exact)) return bucket + static_cast<int64_t>(n);
  // At or beyond max_distance the logarithmic rule gives >= nb (the ratio below is >= 1,
  // exactly 1 at n = max_distance): the last bucket, without a log.
  if (n >= static_cast<uint64_t>(config.max_distance)) return bucket + nb - 1;
  // Raffel et al.: logarithmic buckets from max_exact up to max_distance.
  const double large =
      static_cast<double>(max_exact) +
      std::floor(
          std::log(static_cast<double>(n) / static_cast<double>(max_exact)) /
          std::log(static_cast<double>(config.max_distance) / static_cast<double>(max_exact)) *
          static_cast<double>(nb - max_exact));
  const double capped = std::min(large, static_cast<double>(nb - 1));
  return bucket + static_cast<int64_t>(capped);
}

absl::StatusOr<T5RelativeBias> T5RelativeBias::Create(std::vector<double> table, int64_t num_heads,
                                                      T5BucketConfig config) {
  if (absl::Status s = ValidateT5BucketConfig(config); !s.ok()) return s;
  if (num_heads < 1 || num_heads > kMaxHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat("T5RelativeBias: num_heads must be in [1, ", kMaxHeads, "], got ", num_heads));
  }
  if (static_cast<int64_t>(table.size()) != config.num_buckets * num_heads) {
    return absl::InvalidArgumentError(absl::StrCat("T5RelativeBias: table has ", table.size(),
                                                   " entries, expected ", config.num_buckets,
                                                   " buckets x ", num_heads, " heads"));
  }
  for (size_t i = 0; i < table.size(); ++i) {
    if (!std::isfinite(table[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("T5RelativeBias: table entry ", i, " is not finite"));
    }
  }
  return T5RelativeBias(std::move(table), num_heads, config);
}

template <class T>
absl::Status T5RelativeBias::Fill(int64_t head, absl::Span<const int64_t> q,
                                  absl::Span<const int64_t> k, T* out, int64_t ld) const {
  for (size_t r = 0; r < q.size(); ++r) {
    T* row = out + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k.size(); ++c) {
      const int64_t b = T5Bucket(k[c] - q[r], config_);
      row[c] = static_cast<T>(table_[b * num_heads_ + head]);
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::Status T5RelativeBias::AccumulateTableGradient(int64_t head,
                                                     absl::Span<const int64_t> q_positions,
                                                     absl::Span<const int64_t> k_positions,
                                                     const T* grad_tile, int64_t ld,
                                                     absl::Span<double> grad_table) const {
  if (absl::Status s = ValidateGradientTile("T5RelativeBias::AccumulateTableGradient",
                                            num_heads_, head, q_positions, k_positions,
                                            grad_tile, ld, config_.num_buckets * num_heads_,
                                            {grad_table});
      !s.ok()) {
    return s;
  }
  for (size_t r = 0; r < q_positions.size(); ++r) {
    const T* row = grad_tile + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k_positions.size(); ++c) {
      const int64_t b = T5Bucket(k_positions[c] - q_positions[r], config_);
      grad_table[b * num_heads_ + head] += static_cast<double>(row[c]);
    }
  }
  return absl::OkStatus();
}

template absl::Status T5RelativeBias::AccumulateTableGradient<float>(int64_t,
                                                                     absl::Span<const int64_t>,
                                                                     absl::Span<const int64_t>,
                                                                     const float*, int64_t,
                                                                     absl::Span<double>) const;
template absl::Status T5RelativeBias::AccumulateTableGradient<double>(int64_t,
                                                                      absl::Span<const int64_t>,
                                                                      absl::Span<const int64_t>,
                                                                      const double*, int64_t,
                                                                      absl::Span<double>) const;

// ---------------------------------------- FoX --------------------------------------

double LogSigmoid(double x) {
  // ln sigmoid(x) = -softplus(-x) = min(x, 0) - ln(1 + e^-|x|).
  return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
}

absl::StatusOr<FoxBias> FoxBias::Create(absl::Span<const double> gate_logits, int64_t length,
                                        int64_t num_heads, int64_t first_position) {
  if (absl::Status s = CheckSequence("FoxBias", length, num_heads, first_position); !s.ok()) {
    return s;
  }
  if (static_cast<int64_t>(gate_logits.size()) / num_heads != length ||
      static_cast<int64_t>(gate_logits.size()) % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FoxBias: ", gate_logits.size(),
                                                   " gate logits, expected ", length, " tokens x ",
                                                   num_heads, " heads"));
  }
  FoxBias fox;
  fox.num_heads_ = num_heads;
  fox.first_ = first_position;
  fox.sum_.assign(num_heads, 0.0);
  fox.comp_.assign(num_heads, 0.0);
  fox.c_.assign(num_heads, {});
  fox.c_lo_.assign(num_heads, {});
  if (absl::Status s = fox.Append(gate_logits); !s.ok()) return s;
  return fox;
}

absl::Status FoxBias::Append(absl::Span<const double> gate_logits) {
  const int64_t size = static_cast<int64_t>(gate_logits.size());
  if (size % num_heads_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FoxBias::Append: ", size,
                                                   " gate logits is not a whole number of "
                                                   "tokens of ",
                                                   num_heads_, " heads"));
  }
  const int64_t added = size / num_heads_;
  int64_t end;
  if (__builtin_add_overflow(first_, length_ + added, &end)) {
    return absl::InvalidArgumentError("FoxBias::Append: last position overflows int64");
  }
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(gate_logits[i])) {
      return absl::InvalidArgumentError(absl::StrCat("FoxBias: gate logit ", i, " is not finite"));
    }
  }
  logits_.insert(logits_.end(), gate_logits.begin(), gate_logits.end());
  // No reserve: an exact reserve per call would copy the whole history on every
  // one-token Append of a decoding loop; push_back's growth amortises it.
  for (int64_t t = 0; t < added; ++t) {
    for (int64_t h = 0; h < num_heads_; ++h) {
      // Neumaier-compensated prefix sums: the running sum grows like t while each term
      // is O(1); compensation keeps c_t within an ulp or two of the exact sum. The state
      // (sum, comp) carries over between Append calls, so appending is bit-identical to
      // building the whole sequence at once.
      const double term = LogSigmoid(gate_logits[t * num_heads_ + h]);
      double& sum = sum_[h];
      const double next = sum + term;
      comp_[h] += std::fabs(sum) >= std::fabs(term) ? (sum - next) + term : (term - next) + sum;
      sum = next;
      // c_t kept as hi + lo = sum + comp exactly (Knuth's TwoSum): one rounded double
      // would lose every later gate once one term is huge (a logit of -1e16 makes
      // ulp(c) = 2, and c_i - c_j of later tokens a multiple of 2).
      const double hi = sum + comp_[h];
      const double bb = hi - sum;
      const double lo = (sum - (hi - bb)) + (comp_[h] - bb);
      c_[h].push_back(hi);
      c_lo_[h].push_back(lo);
      // Carry the pair on renormalised (sum, comp) = (hi, lo): left apart, a sum frozen by
      // one huge term (later terms below half its ulp) sends every later gate into comp
      // uncompensated, and the error grows with the length (2e-5 relative after 1e5
      // tokens behind a logit of -1e16).
      sum = hi;
      comp_[h] = lo;
    }
  }
  length_ += added;
  return absl::OkStatus();
}

absl::Status FoxBias::CheckPositions(absl::Span<const int64_t> q,
                                     absl::Span<const int64_t> k) const {
  if (absl::Status s = CheckTokenRange("FoxBias query", q, first_, length_); !s.ok()) return s;
  return CheckTokenRange("FoxBias key", k, first_, length_);
}

int64_t FoxBias::Anchor(int64_t qmin, int64_t qmax, int64_t kmin, int64_t kmax) const {
  if (kmax <= qmin) return kmax - first_;  // keys first: a = the last key
  if (kmin >= qmax) return kmin - first_;  // keys last: a = the first key
  return -1;
}

int64_t FoxBias::Anchor(absl::Span<const int64_t> q, absl::Span<const int64_t> k) const {
  if (q.empty() || k.empty()) return -1;
  const auto [qmin, qmax] = std::minmax_element(q.begin(), q.end());
  const auto [kmin, kmax] = std::minmax_element(k.begin(), k.end());
  return Anchor(*qmin, *qmax, *kmin, *kmax);
}

absl::StatusOr<bool> FoxBias::SeparableTile(int64_t head, absl::Span<const int64_t> q,
                                            absl::Span<const int64_t> k, float* row_part,
                                            float* col_part) const {
  // Called per tile and head by the kernels: one pass over each position list gives
  // every check FillTile makes (positions inside [first, first + length), which keeps
  // every q - k inside int64) and the anchor.
  if (head < 0 || head >= num_heads_) {
    return absl::InvalidArgumentError(absl::StrCat("FoxBias::SeparableTile: head ", head,
                                                   " outside [0, ", num_heads_, ")"));
  }
  if (q.empty() || k.empty()) return false;
  if (row_part == nullptr || col_part == nullptr) {
    return absl::InvalidArgumentError("FoxBias::SeparableTile: null row or column parts");
  }
  const auto [qmin, qmax] = std::minmax_element(q.begin(), q.end());
  const auto [kmin, kmax] = std::minmax_element(k.begin(), k.end());
  if (*qmin < first_ || *qmax >= first_ + length_ || *kmin < first_ ||
      *kmax >= first_ + length_) {
    return CheckPositions(q, k);  // names the first position outside
  }
  const int64_t a = Anchor(*qmin, *qmax, *kmin, *kmax);
  if (a < 0) return false;
  for (size_t r = 0; r < q.size(); ++r) row_part[r] = DifferenceF32(head, q[r] - first_, a);
  for (size_t c = 0; c < k.size(); ++c) col_part[c] = DifferenceF32(head, a, k[c] - first_);
  return true;
}

template <class T>
absl::Status FoxBias::Fill(int64_t head, absl::Span<const int64_t> q,
                           absl::Span<const int64_t> k, T* out, int64_t ld) const {
  if (absl::Status s = CheckPositions(q, k); !s.ok()) return s;
  const double* c = c_[head].data();
  const double* c_lo = c_lo_[head].data();
  if constexpr (std::is_same_v<T, float>) {
    // Separable tiles (SeparableTile): the parts, then one float addition per entry.
    if (const int64_t a = Anchor(q, k); a >= 0) {
      const int64_t n = static_cast<int64_t>(k.size());
      float* kp = out;  // the first row holds c_a - c_j until it is finished last
      for (int64_t col = 0; col < n; ++col) kp[col] = DifferenceF32(head, a, k[col] - first_);
      for (int64_t r = static_cast<int64_t>(q.size()) - 1; r >= 0; --r) {
        FoxRowAnchoredF32(DifferenceF32(head, q[r] - first_, a), kp, n, out + r * ld);
      }
      return absl::OkStatus();
    }
  }
  // The keys' prefix sums gathered once, so the row loop is a broadcast subtraction.
  std::vector<double> ck(k.size()), ck_lo(k.size());
  for (size_t col = 0; col < k.size(); ++col) {
    ck[col] = c[k[col] - first_];
    ck_lo[col] = c_lo[k[col] - first_];
  }
  for (size_t r = 0; r < q.size(); ++r) {
    const double ci = c[q[r] - first_];
    const double ci_lo = c_lo[q[r] - first_];
    T* row = out + static_cast<int64_t>(r) * ld;
    // Lin et al.: D_ij = c_i - c_j (a difference of prefix sums of ln f), in
    // double-double: the leading parts' difference is exact when c_i and c_j are close
    // (Sterbenz), and the low parts carry the gates a single double would round away.
    const int64_t n = static_cast<int64_t>(k.size());
    if constexpr (std::is_same_v<T, float>) {
      FoxRowF32(ci, ci_lo, ck.data(), ck_lo.data(), n, row);
    } else {
      FoxRowBlocks(ci, ci_lo, ck.data(), ck_lo.data(), n, row);
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::Status FoxBias::AccumulatePrefixGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                               absl::Span<const int64_t> k_positions,
                                               const T* grad_tile, int64_t ld,
                                               absl::Span<double> grad_prefix) const {
  if (absl::Status s = ValidateGradientTile("FoxBias::AccumulatePrefixGradient", num_heads_,
                                            head, q_positions, k_positions, grad_tile, ld,
                                            length_ * num_heads_, {grad_prefix});
      !s.ok()) {
    return s;
  }
  if (q_positions.empty() || k_positions.empty()) return absl::OkStatus();
  if (absl::Status s = CheckPositions(q_positions, k_positions); !s.ok()) return s;
  const int64_t m = static_cast<int64_t>(q_positions.size());
  const int64_t n = static_cast<int64_t>(k_positions.size());
  std::vector<double> col_sum(n, 0.0);
  for (int64_t r = 0; r < m; ++r) {
    const T* row = grad_tile + r * ld;
    double row_sum = 0.0;
    for (int64_t c = 0; c < n; ++c) {
      row_sum += static_cast<double>(row[c]);
      col_sum[c] += static_cast<double>(row[c]);
    }
    grad_prefix[(q_positions[r] - first_) * num_heads_ + head] += row_sum;
  }
  for (int64_t c = 0; c < n; ++c) {
    grad_prefix[(k_positions[c] - first_) * num_heads_ + head] -= col_sum[c];
  }
  return absl::OkStatus();
}

template absl::Status FoxBias::AccumulatePrefixGradient<float>(int64_t, absl::Span<const int64_t>,
                                                               absl::Span<const int64_t>,
                                                               const float*, int64_t,
                                                               absl::Span<double>) const;
template absl::Status FoxBias::AccumulatePrefixGradient<double>(int64_t, absl::Span<const int64_t>,
                                                                absl::Span<const int64_t>,
                                                                const double*, int64_t,
                                                                absl::Span<double>) const;

absl::StatusOr<std::vector<double>> FoxBias::LogitGradient(
    absl::Span<const double> grad_prefix) const {
  if (static_cast<int64_t>(grad_prefix.size()) != length_ * num_heads_) {
    return absl::InvalidArgumentError(absl::StrCat("FoxBias::LogitGradient: ", grad_prefix.size(),
                                                   " entries, expected ", length_ * num_heads_));
  }
  std::vector<double> grad(grad_prefix.size());
  for (int64_t h = 0; h < num_heads_; ++h) {
    double suffix = 0.0;  // sum_{t >= l} dL/dc_t
    for (int64_t l = length_ - 1; l >= 0; --l) {
      const int64_t idx = l * num_heads_ + h;
      suffix += grad_prefix[idx];
      grad[idx] = Sigmoid(-logits_[idx]) * suffix;
    }
  }
  return grad;
}

// ------------------------------------- GRAPE-AP ------------------------------------

absl::StatusOr<GrapeApBias> GrapeApBias::Create(std::vector<double> w, std::vector<double> u,
                                                int64_t length, int64_t num_heads, int64_t rank,
                                                int64_t first_position) {
  if (absl::Status s = CheckSequence("GrapeApBias", length, num_heads, first_position); !s.ok()) {
    return s;
  }
  if (rank < 1 || rank > (int64_t{1} << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GrapeApBias: rank must be in [1, 65536], got ", rank));
  }
  int64_t per_token = num_heads * rank, expected = 0;  // num_heads, rank <= 2^20, 2^16
  if (__builtin_mul_overflow(length, per_token, &expected) ||
      static_cast<int64_t>(w.size()) != expected || static_cast<int64_t>(u.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrapeApBias: w has ", w.size(), " and u has ", u.size(), " entries, expected ", length,
        " tokens x ", num_heads, " heads x rank ", rank));
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || !std::isfinite(u[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("GrapeApBias: entry ", i, " of w or u is not finite"));
    }
  }
  GrapeApBias ap;
  ap.w_ = std::move(w);
  ap.u_ = std::move(u);
  ap.length_ = length;
  ap.num_heads_ = num_heads;
  ap.rank_ = rank;
  ap.first_ = first_position;
  return ap;
}

double GrapeApBias::Dot(int64_t head, int64_t t, int64_t l) const {
  const double* wt = w_.data() + (t * num_heads_ + head) * rank_;
  const double* ul = u_.data() + (l * num_heads_ + head) * rank_;
  double z = 0.0;
  for (int64_t r = 0; r < rank_; ++r) z += wt[r] * ul[r];
  return z;
}

double GrapeApBias::Psi(int64_t head, int64_t t, int64_t l) const {
  // psi = -softplus(z) = ln sigmoid(-z).
  return LogSigmoid(-Dot(head, t, l));
}

absl::Status GrapeApBias::CheckPositions(absl::Span<const int64_t> q,
                                         absl::Span<const int64_t> k) const {
  if (absl::Status s = CheckTokenRange("GrapeApBias query", q, first_, length_); !s.ok()) {
    return s;
  }
  return CheckTokenRange("GrapeApBias key", k, first_, length_);
}

template <class T>
absl::Status GrapeApBias::Fill(int64_t head, absl::Span<const int64_t> q,
                               absl::Span<const int64_t> k, T* out, int64_t ld) const {
  if (absl::Status s = CheckPositions(q, k); !s.ok()) return s;
  const auto [kmin_it, kmax_it] = std::minmax_element(k.begin(), k.end());
  const int64_t kmin = *kmin_it - first_, kmax = *kmax_it - first_;
  std::vector<double> running;  // running[l - lo] = P_t(l), reused across rows
  for (size_t r = 0; r < q.size(); ++r) {
    const int64_t t = q[r] - first_;
    const int64_t lo = std::min(t, kmin), hi = std::max(t, kmax);
    running.assign(static_cast<size_t>(hi - lo + 1), 0.0);
    // P_t(lo) = 0; P_t(l) = P_t(l - 1) + psi(t, l): the path integral along row t.
    for (int64_t l = lo + 1; l <= hi; ++l) {
      running[l - lo] = running[l - lo - 1] + Psi(head, t, l);
    }
    const double pt = running[t - lo];
    T* row = out + static_cast<int64_t>(r) * ld;
    for (size_t c = 0; c < k.size(); ++c) {
      row[c] = static_cast<T>(pt - running[k[c] - first_ - lo]);
    }
  }
  return absl::OkStatus();
}

template <class T>
absl::Status GrapeApBias::AccumulateGradient(int64_t head, absl::Span<const int64_t> q_positions,
                                             absl::Span<const int64_t> k_positions,
                                             const T* grad_tile, int64_t ld,
                                             absl::Span<double> grad_w,
                                             absl::Span<double> grad_u) const {
  if (absl::Status s = ValidateGradientTile("GrapeApBias::AccumulateGradient", num_heads_, head,
                                            q_positions, k_positions, grad_tile, ld,
                                            length_ * num_heads_ * rank_, {grad_w, grad_u});
      !s.ok()) {
    return s;
  }
  if (q_positions.empty() || k_positions.empty()) return absl::OkStatus();
  if (absl::Status s = CheckPositions(q_positions, k_positions); !s.ok()) return s;
  const auto [kmin_it, kmax_it] = std::minmax_element(k_positions.begin(), k_positions.end());
  const int64_t kmin = *kmin_it - first_, kmax = *kmax_it - first_;
  std::vector<double> coef;  // dL/dpsi(t, l) for l in (lo, hi], as a difference array
  for (size_t r = 0; r < q_positions.size(); ++r) {
    const int64_t t = q_positions[r] - first_;
    const int64_t lo = std::min(t, kmin), hi = std::max(t, kmax);
    coef.assign(static_cast<size_t>(hi - lo + 2), 0.0);
    // b(t, j) = P_t(t) - P_t(j), P_t(x) = sum_{l in (lo, x]} psi(t, l): each entry adds
    // +g on (lo, t] and -g on (lo, j].
    const T* row = grad_tile + static_cast<int64_t>(r) * ld;
    double total = 0.0;
    for (size_t c = 0; c < k_positions.size(); ++c) {
      const double g = static_cast<double>(row[c]);
      total += g;
      coef[k_positions[c] - first_ - lo + 1] += g;  // the -g on (lo, j] ends at j
    }
    coef[t - lo + 1] -= total;  // the +total on (lo, t] ends at t
    // Running sum from the right: a(l) = sum of differences at indices > l - lo.
    double a = 0.0;
    const double* wt = w_.data() + (t * num_heads_ + head) * rank_;
    double* gwt = grad_w.data() + (t * num_heads_ + head) * rank_;
    for (int64_t l = hi; l > lo; --l) {
      a -= coef[l - lo + 1];
      if (a == 0.0) continue;
      const double z = Dot(head, t, l);
      const double gz = -a * Sigmoid(z);  // d(-softplus(z))/dz = -sigmoid(z)
      const double* ul = u_.data() + (l * num_heads_ + head) * rank_;
      double* gul = grad_u.data() + (l * num_heads_ + head) * rank_;
      for (int64_t i = 0; i < rank_; ++i) {
        gwt[i] += gz * ul[i];
        gul[i] += gz * wt[i];
      }
    }
  }
  return absl::OkStatus();
}

template absl::Status GrapeApBias::AccumulateGradient<float>(int64_t, absl::Span<const int64_t>,
                                                             absl::Span<const int64_t>,
                                                             const float*, int64_t,
                                                             absl::Span<double>,
                                                             absl::Span<double>) const;
template absl::Status GrapeApBias::AccumulateGradient<double>(int64_t, absl::Span<const int64_t>,
                                                              absl::Span<const int64_t>,
                                                              const double*, int64_t,
                                                              absl::Span<double>,
                                                              absl::Span<double>) const;

template class AdditiveBiasFromFill<AlibiBias>;
template class AdditiveBiasFromFill<T5RelativeBias>;
template class AdditiveBiasFromFill<FoxBias>;
template class AdditiveBiasFromFill<GrapeApBias>;

}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
