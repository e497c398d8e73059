#include "attention/cpu/workspace.h"

#include <algorithm>

#include "attention/cpu/kernels.h"
#include "attention/cpu/split_bf16.h"

namespace gpe {
namespace attention {
namespace cpu {

int64_t Workspace::Floats(const Plan& p, bool decode) {
  const int64_t blocks = (p.max_lk + p.bk - 1) / p.bk;
  const int64_t packed = decode ? 0 : blocks * p.bk;  // keys in panels / pairs
  // (bf16 buffers counted in floats: two bf16 per float.)
  const int64_t bf16 = p.bf16_dot ? (packed * (RoundUp(p.d, 2) + p.dvp) +
                                     p.rows * RoundUp(p.d, 2) + TileRows(p) * p.bk + 1) / 2
                                  : 0;
  // The split-bf16 path (never decoding): split key panels, value pairs, query rows and
  // probability rows, and one block's rows before packing.
  const SplitWidths sw = SplitWidthsOf(p);
  const int64_t split = p.split_terms > 0 && !decode
                            ? (packed * (sw.qk + sw.v) + p.rows * sw.qk + TileRows(p) * sw.p +
                               p.bk * std::max(sw.qk, 3 * p.dv) + 1) / 2
                            : 0;
  const int64_t value_blocks = decode ? 1 : blocks;
  return split + packed * p.d + value_blocks * p.bk * p.dvp + p.bk * p.d + p.rows * p.d +
         2 * TileRows(p) * p.bk + p.rows * p.dvp + (2 + kSumLanes) * p.rows + bf16 +
         p.rows * ((p.nlk > 0 ? p.ldl : 0) + (p.nlv > 0 ? p.nlv + 1 : 0));
}

Workspace::Workspace(const Plan& p, bool decode) {
  const int64_t blocks = (p.max_lk + p.bk - 1) / p.bk;
  const int64_t packed_keys = decode ? 0 : blocks * p.bk;  // keys in panels / pairs
  auto alloc = [this](int64_t n) {
    auto buf = hwy::AllocateAligned<float>(std::max<int64_t>(n, 1));
    allocated = allocated && buf != nullptr;
    return buf;
  };
  panels = alloc(packed_keys * p.d);
  // Decoding copies one block's value rows at a time (CopyValues, direct blocks).
  values = alloc((decode ? 1 : blocks) * p.bk * p.dvp);
  rows = alloc(p.bk * p.d);
  qblk = alloc(p.rows * p.d);
  s = alloc(TileRows(p) * p.bk);
  bias = alloc(TileRows(p) * p.bk);
  oacc = alloc(p.rows * p.dvp);
  m = alloc(p.rows);
  l = alloc(p.rows * kSumLanes);
  alpha = alloc(p.rows);
  packed.resize(static_cast<size_t>(blocks));
  kmin.resize(static_cast<size_t>(blocks));
  kmax.resize(static_cast<size_t>(blocks));
  ksorted.resize(static_cast<size_t>(blocks));
  vfinite.resize(static_cast<size_t>(blocks));
  kfinite.resize(static_cast<size_t>(blocks));
  qlab.resize(static_cast<size_t>(p.nlk > 0 ? p.rows * p.ldl : 0));
  vmass.resize(static_cast<size_t>(p.rows * p.nlv));
  lab_ones.assign(static_cast<size_t>(p.nlv > 0 ? p.rows : 0), 1.0f);
  const bool poison = Bf16BufferPoisonForTest();  // split_bf16.h
  auto alloc16 = [this, poison](int64_t n) {
    auto buf = hwy::AllocateAligned<uint16_t>(std::max<int64_t>(n, 1));
    allocated = allocated && buf != nullptr;
    if (poison && buf != nullptr) std::fill(buf.get(), buf.get() + std::max<int64_t>(n, 1), 0x7FC0);
    return buf;
  };
  if (p.bf16_dot) {
    const int64_t deven = RoundUp(p.d, 2);
    panels16 = alloc16(packed_keys * deven);
    pairs16 = alloc16(packed_keys * p.dvp);
    q16 = alloc16(p.rows * deven);
    p16 = alloc16(TileRows(p) * p.bk);  // decoding's tiles hold every query head
  }
  if (p.split_terms > 0 && !decode) {
    const SplitWidths sw = SplitWidthsOf(p);
    panels16 = alloc16(packed_keys * sw.qk);
    pairs16 = alloc16(packed_keys * sw.v);
    q16 = alloc16(p.rows * sw.qk);
    p16 = alloc16(TileRows(p) * sw.p);
    split_rows = alloc16(p.bk * std::max(sw.qk, 3 * p.dv));
    split.resize(static_cast<size_t>(blocks));
  }
}

namespace {

// Elements of each bf16 dot-product buffer of the backward (workspace.h), in the order
// of the fields: qs16, do16, qst16, dot16, krows16, kpanels16, kpairs16, vpanels16, p16,
// ppairs16, ds16, dspairs16; then the floats dkt, dvt, ones.
struct BackwardDotSizes {
  int64_t u16[12];
  int64_t f32[3];
};

BackwardDotSizes DotSizes(const Plan& p, int64_t max_lq, int64_t group) {
  const int64_t qn = max_lq * group, pitch = std::max(p.dp, p.dvp);
  const int64_t lqt = RoundUp(max_lq, p.bq), bqe = RoundUp(p.bq, 2);
  return {{qn * pitch, qn * pitch, group * p.d * lqt, group * p.dv * lqt, p.bk * p.dp,
           p.bk * RoundUp(p.d, 2), p.bk * p.dp, p.bk * RoundUp(p.dv, 2), p.bq * p.bk,
           bqe * p.bk, p.bq * p.bk, bqe * p.bk},
          {p.dp * p.bk, p.dvp * p.bk, std::max({p.bq, p.dp, p.dvp})}};
}

int64_t BackwardDotFloats(const Plan& p, int64_t max_lq, int64_t group) {
  const BackwardDotSizes z = DotSizes(p, max_lq, group);
  int64_t u16 = 0, f32 = 0;
  for (int64_t n : z.u16) u16 += n;
  for (int64_t n : z.f32) f32 += n;
  return f32 + (u16 + 1) / 2;  // two bf16 per float
}

}  // namespace

int64_t BackwardWorkspace::Floats(const Plan& p, int64_t max_lq, int64_t group) {
  const int64_t qn = max_lq * group, pitch = std::max(p.dp, p.dvp);
  return 2 * qn * pitch + 2 * qn + 2 * p.bk * p.dp + p.bk * p.dvp + p.bk * (p.d + p.dv) +
         5 * p.bq * p.bk +
         std::max(p.bq, p.bk) + qn * (2 * p.ldl + p.nlk + p.nlv) + (p.nlk > 0 ? max_lq : 0) +
         (BackwardDotProducts(p) ? BackwardDotFloats(p, max_lq, group) : 0);
}

BackwardWorkspace::BackwardWorkspace(const Plan& p, int64_t max_lq, int64_t group) {
  auto alloc = [this](int64_t n) {
    auto buf = hwy::AllocateAligned<float>(std::max<int64_t>(n, 1));
    allocated = allocated && buf != nullptr;
    return buf;
  };
  const int64_t qn = max_lq * group;
  // Qs and dO rows share one pitch (backward.cc): the wider of head_dim and value_dim().
  const int64_t pitch = std::max(p.dp, p.dvp);
  qs = alloc(qn * pitch);
  dout = alloc(qn * pitch);
  lse2 = alloc(qn);
  dsum = alloc(qn);
  krows = alloc(p.bk * p.dp);
  kpanels = alloc(p.bk * p.d);
  vpanels = alloc(p.bk * p.dv);
  dk = alloc(p.bk * p.dp);
  dv = alloc(p.bk * p.dvp);
  s = alloc(p.bq * p.bk);
  dp = alloc(p.bq * p.bk);
  bias = alloc(p.bq * p.bk);
  loc = alloc(p.bq * p.bk);
  capd = alloc(p.bq * p.bk);
  const int64_t m = std::max(p.bq, p.bk);
  shift = alloc(m);
  qlab.resize(static_cast<size_t>(p.nlk > 0 ? qn * p.ldl : 0));
  kmass.resize(static_cast<size_t>(qn * p.nlk));
  dolab.resize(static_cast<size_t>(p.nlv > 0 ? qn * p.ldl : 0));
  pmass.resize(static_cast<size_t>(qn * p.nlv));
  lab_ones.assign(static_cast<size_t>(p.nlk > 0 ? max_lq : 0), 1.0f);
  if (BackwardDotProducts(p)) {
    const BackwardDotSizes z = DotSizes(p, max_lq, group);
    auto alloc16 = [this](int64_t n) {
      auto buf = hwy::AllocateAligned<uint16_t>(std::max<int64_t>(n, 1));
      allocated = allocated && buf != nullptr;
      return buf;
    };
    hwy::AlignedFreeUniquePtr<uint16_t[]>* u16[] = {&qs16, &do16, &qst16, &dot16,
                                                   &krows16, &kpanels16, &kpairs16, &vpanels16,
                                                   &p16, &ppairs16, &ds16, &dspairs16};
    for (int i = 0; i < 12; ++i) *u16[i] = alloc16(z.u16[i]);
    dkt = alloc(z.f32[0]);
    dvt = alloc(z.f32[1]);
    ones = alloc(z.f32[2]);
    if (ones != nullptr) std::fill(ones.get(), ones.get() + z.f32[2], 1.0f);
  }
}

}  // namespace cpu
}  // namespace attention
}  // namespace gpe
