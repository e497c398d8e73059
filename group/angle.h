// Exact angle arithmetic for positions: p * theta reduced mod 2 pi.
//
// A position p is an int64 group element and theta a frequency in radians per step.
// Forming p * theta in double loses the angle entirely once |p * theta| is large
// (at p = 2^40 one ulp of the product is already ~1e-4 rad); forming it in float32
// is off by ~0.03 rad at p = 10^6. The functions here compute the exact real number
// p * theta (theta taken exactly as the double it is) and reduce it mod 2 pi: with a
// 4-part 2 pi (212 bits, Cody-Waite) while |p * theta| <= 2^100, and beyond that with
// the bits of 1/(2 pi) (Payne-Hanek), so the result is correctly rounded up to ~1 ulp
// for every int64 p and every finite theta. "Exact" is relative to the double theta:
// a frequency that was itself rounded to double (base^(-2i/d), a schedule's scaling)
// carries that rounding, |p| ulp(theta) / 2 radians at position p, into the angle.
#ifndef GROUP_ANGLE_H_
#define GROUP_ANGLE_H_

#include <cstdint>

namespace gpe {
namespace group {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kTwoPi = 6.28318530717958647692;

// Returns r in [-pi, pi] with r = p * theta (mod 2 pi), where p * theta is the exact
// product of the integer p and the double theta.
//
// Accuracy: |r - exact| <= 1 ulp(r) + 2^-90 for every int64 p and every finite theta
// (up to 2^100 by Cody-Waite against a 212-bit 2 pi; beyond, including products past
// double's range, by Payne-Hanek against 1,344 bits of 1/(2 pi)). Returns NaN when theta
// is not finite, 0 when p or theta is 0.
double ReducedAngle(int64_t p, double theta);

// sin and cos of ReducedAngle(p, theta).
struct SinCos {
  double sin;
  double cos;
};
SinCos SinCosOfMultiple(int64_t p, double theta);

// The Z_n angle 2 pi * (k * p mod n) / n in [-pi, pi], formed from exact integer
// residues, so p and p + n give bit-identical angles (rho(n) = I to rounding).
// Requires n >= 1 (returns NaN otherwise).
double CyclicAngle(int64_t p, int64_t k, int64_t n);

// Floor modulus: the representative of p mod n in [0, n). Requires n >= 1.
int64_t FloorMod(int64_t p, int64_t n);

}  // namespace group
}  // namespace gpe

#endif  // GROUP_ANGLE_H_
