#include "group/angle.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace gpe {
namespace group {
namespace {

// 2 pi as an unevaluated sum of four doubles (212 bits), the Cody-Waite constants.
constexpr double kTwoPi1 = 0x1.921fb54442d18p+2;
constexpr double kTwoPi2 = 0x1.1a62633145c07p-52;
constexpr double kTwoPi3 = -0x1.f1976b7ed8fbcp-108;
constexpr double kTwoPi4 = 0x1.4cf98e804177dp-162;
constexpr double kInvTwoPi = 0x1.45f306dc9c883p-3;
constexpr double kPiDouble = 0x1.921fb54442d18p+1;  // fl(pi) < pi

// Knuth's error-free sum: s + e == a + b exactly.
inline void TwoSum(double a, double b, double* s, double* e) {
  *s = a + b;
  const double bb = *s - a;
  *e = (a - (*s - bb)) + (b - bb);
}

// Error-free product via fma: p + e == a * b exactly (barring underflow).
inline void TwoProd(double a, double b, double* p, double* e) {
  *p = a * b;
  *e = std::fma(a, b, -*p);
}

// A double-double accumulator; its terms must stay within a few thousand radians so
// the compensation term's own rounding (~2^-106 of the partial sums) is negligible.
class Accumulator {
 public:
  void Add(double x) {
    double s, e;
    TwoSum(hi_, x, &s, &e);
    hi_ = s;
    lo_ += e;
  }
  void Normalize() {
    double s, e;
    TwoSum(hi_, lo_, &s, &e);
    hi_ = s;
    lo_ = e;
  }
  double hi() const { return hi_; }
  double lo() const { return lo_; }

 private:
  double hi_ = 0.0;
  double lo_ = 0.0;
};

// Adds -k * 2 pi to acc, except for the leading product term, which the caller
// subtracts from its own argument exactly (Sterbenz) before calling. Returns that term.
inline double AddMinusKTwoPiTail(double k, Accumulator* acc) {
  double h1, l1, h2, l2, h3, l3;
  TwoProd(k, kTwoPi1, &h1, &l1);
  TwoProd(k, kTwoPi2, &h2, &l2);
  TwoProd(k, kTwoPi3, &h3, &l3);
  acc->Add(-l1);
  acc->Add(-h2);
  acc->Add(-l2);
  acc->Add(-h3);
  acc->Add(-l3);
  acc->Add(-k * kTwoPi4);
  return h1;
}

// Cody-Waite reduction of one exact term t: acc += t - k * 2 pi with k = round(t / 2pi).
inline void AddReduced(double t, Accumulator* acc) {
  if (std::fabs(t) <= kPiDouble) {
    acc->Add(t);
    return;
  }
  const double k = std::nearbyint(t * kInvTwoPi);
  Accumulator tail;
  const double h1 = AddMinusKTwoPiTail(k, &tail);
  // t and h1 = fl(k * 2pi1) are within a factor 2 of each other (or k == 0), so the
  // difference is exact; it is a few ulps of t, never the full magnitude.
  acc->Add(t - h1);
  acc->Add(tail.hi());
  acc->Add(tail.lo());
}

}  // namespace

double ReducedAngle(int64_t p, double theta) {
  if (!std::isfinite(theta)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0 || theta == 0.0) return 0.0;
  // p = p_hi * 2^32 + p_lo with both parts exact in double (31 and 32 bits).
  const double p_hi = static_cast<double>(p >> 32) * 4294967296.0;
  const double p_lo = static_cast<double>(static_cast<uint32_t>(p & 0xffffffff));
  // p * theta = a1 + b1 + a0 + b0 exactly.
  double a1, b1, a0, b0;
  TwoProd(p_hi, theta, &a1, &b1);
  TwoProd(p_lo, theta, &a0, &b0);
  if (!std::isfinite(a1) || !std::isfinite(a0)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  Accumulator acc;
  AddReduced(a1, &acc);
  AddReduced(b1, &acc);
  AddReduced(a0, &acc);
  AddReduced(b0, &acc);
  acc.Normalize();
  // The partial remainders sum to a few multiples of 2 pi at most; reduce once more,
  // then fix the boundary so the result lies in [-pi, pi].
  for (int pass = 0; pass < 2; ++pass) {
    double k = std::nearbyint(acc.hi() * kInvTwoPi);
    if (pass == 1) {
      if (acc.hi() > kPiDouble) {
        k = 1.0;
      } else if (acc.hi() < -kPiDouble) {
        k = -1.0;
      } else {
        break;
      }
    }
    if (k == 0.0) continue;
    Accumulator next;
    const double h1 = AddMinusKTwoPiTail(k, &next);
    next.Add(acc.hi() - h1);  // exact, as above
    next.Add(acc.lo());
    next.Normalize();
    acc = next;
  }
  const double r = acc.hi() + acc.lo();
  // Rounding cannot leave [-fl(pi), fl(pi)] once the double-double lies in [-pi, pi].
  return std::fmin(std::fmax(r, -kPiDouble), kPiDouble);
}

SinCos SinCosOfMultiple(int64_t p, double theta) {
  const double a = ReducedAngle(p, theta);
  return SinCos{std::sin(a), std::cos(a)};
}

int64_t FloorMod(int64_t p, int64_t n) {
  int64_t r = p % n;
  if (r < 0) r += n;
  return r;
}

double CyclicAngle(int64_t p, int64_t k, int64_t n) {
  if (n < 1) return std::numeric_limits<double>::quiet_NaN();
  const __int128 m128 = static_cast<__int128>(FloorMod(p, n)) * FloorMod(k, n);
  int64_t m = static_cast<int64_t>(m128 % n);
  // Centre the residue so the angle lies in [-pi, pi].
  if (m > n / 2) m -= n;
  return kTwoPi * (static_cast<double>(m) / static_cast<double>(n));
}

}  // namespace group
}  // namespace gpe
