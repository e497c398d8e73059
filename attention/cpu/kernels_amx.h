// bfloat16 attention tiles on Intel AMX (Advanced Matrix Extensions: AMX-TILE and
// AMX-BF16, Sapphire Rapids and later): the forward's two products, S = Q K^T and
// O = diag(alpha) O + P V, as TDPBF16PS on 16 x 16 float tiles, with the layouts the bf16
// dot-product kernels already pack (kernels_bf16.h): 16 keys of a key panel over 16 pair
// rows (32 components; 64 bytes a row, the panel's rows 4 kPanel bytes apart) are a B
// tile of TDPBF16PS as they stand, and so are 16 pair rows of 16 value columns of the
// value pairs. Query and probability rows are A tiles.
// Internal to attention/cpu.
//
// Semantics of TDPBF16PS (Intel SDM, vol. 2, its Operation section): for each row m and
// column n of the float tile C, the even and the odd products of the pairs are summed
// apart, each from 0, in order of k:
//   E += A[m][2k] B[k][2n];  O += A[m][2k+1] B[k][2n+1]
// each a fused multiply-add rounded to nearest even (the products of two bf16 values are
// exact in float); then C[m][n] += (E + O). bf16 inputs that are subnormal count as 0,
// every result's subnormals are flushed to 0, C's subnormals read as 0; MXCSR is neither
// read nor written. (The intrinsics guide's shorter loop, adding each product into C in
// turn, rounds differently.)
//
// What the tiles take, the rest goes to the bf16 dot-product kernels: whole blocks of 16
// rows; components in steps of 32 (head_dim with (d + 1) / 2 a multiple of 16, else the
// whole score tile on the dot products); keys of P V in steps of 32. Every call loads the
// tile configuration (palette 1, eight tiles of 16 rows x 64 bytes) and releases it
// before returning, so code that shares the thread's tiles (other libraries) finds them
// unconfigured, as the ABI expects.
//
// Availability: measure::HasAmxBf16Tiles (CPUID leaf 7's AMX-TILE and AMX-BF16, the OS's
// XCR0 tile state, and Linux's per-process permission, arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA), requested once); a refusal leaves the tiles unused. The
// emulation (SetAmxEmulationForTest) runs the same kernels with the tile instructions
// computed per the semantics above: tests run it on every CPU with AVX512_BF16 (the
// remainders' kernels need it), and the tile instructions themselves where the CPU has
// them. With neither usable the two kernels below are the dot-product ones.
#ifndef ATTENTION_CPU_KERNELS_AMX_H_
#define ATTENTION_CPU_KERNELS_AMX_H_

#include <cstdint>

namespace gpe {
namespace attention {
namespace cpu {

// The CPU has AMX-TILE and AMX-BF16, the OS saves the tile state, and this process may
// use it (the permission is requested on the first call; its answer is kept).
bool AmxHardwareUsable();
// AmxHardwareUsable(), or the emulation is on.
bool AmxUsable();
// Tests: run the kernels below on the emulated tiles (true) or on the hardware's (false,
// the default; where the hardware is not usable the kernels must not be called).
void SetAmxEmulationForTest(bool on);
bool AmxEmulated();
// Emulated TDPBF16PS executed so far in this process (tests: that a path used the tiles).
int64_t AmxEmulatedDotsForTest();

// kernels_bf16.h's ScoreTileBf16 without init (same arguments and result; float sums in
// another order) with the products on tiles.
void ScoreTileAmx(const uint16_t* q, int64_t ldq, int64_t mq, int64_t d,
                  const uint16_t* panels, int64_t num_panels, float* s, int64_t lds);
// kernels_bf16.h's AccumulateTileBf16 (alpha non-null) with the products on tiles.
void AccumulateTileAmx(const uint16_t* p, int64_t ldp, int64_t mq, int64_t nk,
                       const uint16_t* pairs, int64_t dp, const float* alpha, float* o,
                       int64_t ldo);

// One TDPBF16PS on explicit tiles, as the emulation computes it (c: 16 x 16 floats, row
// stride 16; a: 16 rows of 32 bf16; b: 16 rows of 32 bf16), for tests of the emulation
// against the instruction's definition and, where the CPU has it, the instruction.
void TileDotBf16Emulated(float* c, const uint16_t* a, const uint16_t* b);
// The same on the hardware's tiles (AmxHardwareUsable() must be true).
void TileDotBf16Hardware(float* c, const uint16_t* a, const uint16_t* b);

}  // namespace cpu
}  // namespace attention
}  // namespace gpe

#endif  // ATTENTION_CPU_KERNELS_AMX_H_
