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


// The bits of 1/(2 pi) after the binary point, most significant first: word i holds the
// bits of weight 2^-(64 i + 1) .. 2^-(64 i + 64). 21 words (1,344 bits) cover the
// largest exponent a double can have (2^971 for its integer significand) plus the 256
// bits the product below needs. Generated with mpmath at 3,000 bits and checked against
// Machin's formula in integers (1/(2 pi) = 0x0.28be60db9391054a7f09d5f4..., fdlibm's
// ipio2 table of 2/pi shifted right by two bits).
constexpr uint64_t kInvTwoPiBits[21] = {
    0x28be60db9391054aULL,
    0x7f09d5f47d4d3770ULL,
    0x36d8a5664f10e410ULL,
    0x7f9458eaf7aef158ULL,
    0x6dc91b8e909374b8ULL,
    0x01924bba82746487ULL,
    0x3f877ac72c4a69cfULL,
    0xba208d7d4baed121ULL,
    0x3a671c09ad17df90ULL,
    0x4e64758e60d4ce7dULL,
    0x272117e2ef7e4a0eULL,
    0xc7fe25fff7816603ULL,
    0xfbcbc462d6829b47ULL,
    0xdb4d9fb3c9f2c26dULL,
    0xd3d18fd9a797fa8bULL,
    0x5d49eeb1faf97c5eULL,
    0xcf41ce7de294a4baULL,
    0x9afed7ec47e35742ULL,
    0x1580cc11bf1edaeaULL,
    0xfc33ef0826bd0d87ULL,
    0x6a78e45857b986c2ULL
};
constexpr int kInvTwoPiBitCount = 64 * 21;
// The largest e below is 1023 - 53 = 970; the last word read starts at bit e + 1 + 192
// and spills into the next table word.
static_assert(970 + 1 + 192 + 63 + 64 <= kInvTwoPiBitCount, "1/(2 pi) table too short");

// The 64 bits of 1/(2 pi) starting at bit position k (weight 2^-k, so k = 1 is the first
// bit after the binary point), most significant first. Positions k <= 0 hold zeros
// (1/(2 pi) < 1); the caller keeps k + 63 <= kInvTwoPiBitCount.
uint64_t InvTwoPiBitsFrom(int k) {
  if (k + 63 <= 0) return 0;
  if (k <= 0) return InvTwoPiBitsFrom(1) >> (1 - k);
  const int index = (k - 1) / 64, offset = (k - 1) % 64;
  uint64_t w = kInvTwoPiBits[index] << offset;
  if (offset != 0) w |= kInvTwoPiBits[index + 1] >> (64 - offset);
  return w;
}

// Payne and Hanek's reduction ("Radian reduction for trigonometric functions", SIGNUM
// Newsletter 18(1), 1983), for products too large for the Cody-Waite path: theta =
// m 2^e with m an integer of at most 53 bits, so p theta = N 2^e with N = p m an integer
// of at most 116 bits, and (p theta) / (2 pi) = N 2^e (1/(2 pi)). The bits of 1/(2 pi)
// of weight >= 2^-e times N give integers and drop out mod 1, so
// frac(p theta / (2 pi)) = frac(N c'), c' = the next 256 bits of 1/(2 pi) from 2^-(e+1)
// on. N c' is formed exactly (2 x 4 words) and its fraction kept to 128 bits: the
// truncation of c' costs < 2^116 2^-256 and that of the fraction < 2^-128, so the
// fraction f in [-1/2, 1/2) is within 2^-127 of the exact one and r = 2 pi f within
// ~2^-100 + 1 ulp(r) of p theta mod 2 pi, for every int64 p and finite theta.
double PayneHanekAngle(int64_t p, double theta) {
  int exponent = 0;
  const double fraction = std::frexp(theta, &exponent);  // theta = fraction 2^exponent
  const int64_t m = static_cast<int64_t>(std::ldexp(fraction, 53));  // exact, |m| < 2^53
  const int e = exponent - 53;                                        // theta = m 2^e
  const bool negative = (p < 0) != (m < 0);
  // |N| = |p| |m| < 2^63 2^53; |p| computed in unsigned so p = INT64_MIN is fine.
  const uint64_t abs_p = p < 0 ? 0 - static_cast<uint64_t>(p) : static_cast<uint64_t>(p);
  const uint64_t abs_m = static_cast<uint64_t>(m < 0 ? -m : m);
  using u128 = unsigned __int128;
  const u128 n = static_cast<u128>(abs_p) * abs_m;
  const uint64_t n_words[2] = {static_cast<uint64_t>(n), static_cast<uint64_t>(n >> 64)};
  // c' = sum_i c[i] 2^-(64 (i + 1)); c[0] most significant.
  uint64_t c[4];
  for (int i = 0; i < 4; ++i) c[i] = InvTwoPiBitsFrom(e + 1 + 64 * i);
  // N c' 2^256 as six little-endian words; words 3 and 2 are the fraction's top 128 bits
  // (words 4 and 5, the integer part, drop out mod 1).
  uint64_t w[6] = {0, 0, 0, 0, 0, 0};
  for (int j = 0; j < 2; ++j) {
    uint64_t carry = 0;
    for (int i = 3; i >= 0; --i) {  // least significant word first, for the carry
      const int k = j + (3 - i);     // c[i] has weight 2^(64 (3 - i)) in c' 2^256
      const u128 t = static_cast<u128>(n_words[j]) * c[i] + w[k] + carry;
      w[k] = static_cast<uint64_t>(t);
      carry = static_cast<uint64_t>(t >> 64);
    }
    w[j + 4] += carry;
  }
  u128 f = (static_cast<u128>(w[3]) << 64) | w[2];  // frac(N c') 2^128
  if (negative) f = 0 - f;                          // frac(-x) = 1 - frac(x), mod 1
  // As a signed number, f 2^-128 is the fraction centred in [-1/2, 1/2).
  const __int128 centred = static_cast<__int128>(f);
  // To a double-double: the top 53 bits exactly, the remaining 75 rounded once.
  const __int128 top = centred >> 75;  // floor; |top| <= 2^52
  const __int128 rest = centred - top * (static_cast<__int128>(1) << 75);  // in [0, 2^75)
  const double hi = std::ldexp(static_cast<double>(top), -53);
  const double lo = std::ldexp(static_cast<double>(rest), -128);
  // r = 2 pi (hi + lo), the leading product exact by TwoProd.
  double r_hi, r_err;
  TwoProd(kTwoPi1, hi, &r_hi, &r_err);
  const double r = r_hi + (r_err + (kTwoPi2 * hi + kTwoPi1 * lo));
  return std::fmin(std::fmax(r, -kPiDouble), kPiDouble);
}

}  // namespace

double ReducedAngle(int64_t p, double theta) {
  if (!std::isfinite(theta)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0 || theta == 0.0) return 0.0;
  // Beyond 2^100 the Cody-Waite path below (a 212-bit 2 pi) cannot hold k 2 pi exactly:
  // reduce with the bits of 1/(2 pi) instead. The double product decides which path;
  // either is accurate at the boundary.
  if (std::fabs(static_cast<double>(p) * theta) > 0x1p100) return PayneHanekAngle(p, theta);
  // p theta = |p| (sign(p) theta), |p| = u_hi * 2^32 + u_lo with both parts exact in
  // double (at most 2^31 and 32 bits) and non-negative, so the two partial products add
  // rather than cancel. (Two's-complement halves of a small negative p, -2^32 and
  // 2^32 - 1, made partial products 2^32 times p theta whose reductions by k 2 pi lost
  // the angle between 2^79 and 2^100: +-pi for any answer.)
  const uint64_t u = p < 0 ? uint64_t{0} - static_cast<uint64_t>(p) : static_cast<uint64_t>(p);
  const double t = p < 0 ? -theta : theta;
  const double p_hi = static_cast<double>(u >> 32) * 4294967296.0;
  const double p_lo = static_cast<double>(static_cast<uint32_t>(u & 0xffffffff));
  // p * theta = a1 + b1 + a0 + b0 exactly.
  double a1, b1, a0, b0;
  TwoProd(p_hi, t, &a1, &b1);
  TwoProd(p_lo, t, &a0, &b0);
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
