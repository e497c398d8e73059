// Fuzz target: the DLTensor descriptions every entry point parses (device, dtype, ndim,
// shape, strides, byte_offset, NULL data), one fuzzed argument at a time with the others
// valid, through gpe_so_rep_apply, gpe_so_rep_matrix, gpe_learned_positions_lookup,
// gpe_sinusoidal_encode, gpe_shaw_key_scores, gpe_stable_rank and
// gpe_inr_predict_separable_2d. The harness keeps the caller's side of the contract: it
// passes a description only when the memory it spans lies inside the harness's buffer,
// or when the description is one the library must reject before touching memory
// (negative sizes, byte extents that overflow int64). Each call must return a known
// status with a message on failure; ASan checks that nothing outside is touched.
#include <cstdint>
#include <cstring>
#include <vector>

#include "c_api/fuzz/fuzz_input.h"
#include "gpe/gpe.h"

namespace {

using gpe::fuzz::CheckStatus;
using gpe::fuzz::FuzzInput;

constexpr int64_t kBufferDoubles = 1 << 13;  // 64 KiB, data pointer in the middle

struct Fuzzed {
  std::vector<double> buffer = std::vector<double>(kBufferDoubles, 0.25);
  int64_t shape[8] = {0};
  int64_t strides[8] = {0};
  DLTensor t{};
  bool call = true;  // false: the description spans memory the harness does not own
};

// Builds a fuzzed description of a tensor the callee expects as `ndim`-dimensional
// `code`/`bits` with sizes near `like`.
void Describe(FuzzInput* in, int ndim, uint8_t code, uint8_t bits, const int64_t* like, Fuzzed* f) {
  DLTensor& t = f->t;
  // Any int32 on the wire (as a C or ctypes caller may pass), written without forming an
  // out-of-range C++ enum value.
  const int32_t device_type = in->Read<uint8_t>() % 16 == 0 ? in->Read<int32_t>() : kDLCPU;
  std::memcpy(&t.device.device_type, &device_type, sizeof device_type);
  t.device.device_id = 0;
  t.dtype = {code, bits, 1};
  if (in->Read<uint8_t>() % 8 == 0) t.dtype = {in->Read<uint8_t>(), in->Read<uint8_t>(), in->Read<uint16_t>()};
  t.ndim = in->Read<uint8_t>() % 8 == 0 ? in->Read<int32_t>() : ndim;
  for (int i = 0; i < 8; ++i) f->shape[i] = in->Read<uint8_t>() % 4 == 0 ? in->Size(12) : like[i < 2 ? i : 1];
  const uint8_t stride_mode = in->Read<uint8_t>() % 4;
  for (int i = 0; i < 8; ++i) {
    f->strides[i] = stride_mode == 0 ? in->Size(16) : static_cast<int64_t>(in->Read<int8_t>());
  }
  t.shape = in->Read<uint8_t>() % 32 == 0 ? nullptr : f->shape;
  t.strides = stride_mode == 1 ? nullptr : f->strides;
  switch (in->Read<uint8_t>() % 16) {
    case 0: t.byte_offset = 8u * (in->Read<uint16_t>() % 64); break;
    case 1: t.byte_offset = in->Read<uint16_t>() % 512; break;  // often misaligned
    case 2: t.byte_offset = in->Read<uint64_t>(); break;        // anything
    default: t.byte_offset = 0; break;
  }
  t.data = in->Read<uint8_t>() % 32 == 0 ? nullptr : f->buffer.data() + kBufferDoubles / 2;

  // Does the description stay inside the buffer? (int128: no overflow in the harness.)
  if (t.ndim < 0 || t.ndim > 8 || t.shape == nullptr || t.data == nullptr) return;
  const __int128 es = t.dtype.bits / 8 > 0 ? t.dtype.bits / 8 : 1;
  __int128 numel = 1, lo = 0, hi = 0;
  bool negative = false;
  for (int i = 0; i < t.ndim; ++i) {
    if (f->shape[i] < 0) negative = true;
    numel *= f->shape[i] < 0 ? 0 : f->shape[i];
    if (numel > (__int128{1} << 63)) numel = __int128{1} << 63;  // past int64 either way
  }
  if (negative || numel == 0) return;  // rejected, or no element is touched
  __int128 compact = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const __int128 s = t.strides ? f->strides[i] : compact;
    // |s| <= 2^63 and shape < 2^63: |reach| < 2^126, clamped to 2^100 so sums stay exact
    // enough (anything past 2^64 is an overflow the library must reject either way).
    const __int128 cap = __int128{1} << 100;
    __int128 reach = s * (f->shape[i] - 1);
    reach = reach > cap ? cap : reach < -cap ? -cap : reach;
    (reach < 0 ? lo : hi) += reach;
    compact *= f->shape[i];
    if (compact > (__int128{1} << 62)) compact = __int128{1} << 62;
  }
  const __int128 first = static_cast<__int128>(t.byte_offset) + lo * es;
  const __int128 last = static_cast<__int128>(t.byte_offset) + (hi + 1) * es;
  const __int128 half = static_cast<__int128>(kBufferDoubles / 2) * 8;
  const __int128 int64_max = INT64_MAX;
  const bool overflows = numel * es > int64_max || -lo * es > int64_max || (hi + 1) * es > int64_max ||
                         t.byte_offset > (uint64_t{1} << 62);
  // Zero strides let a tiny buffer describe a huge (broadcast) input that is valid but
  // would take hours (a 2^30 x 2^30 stable rank): only small element counts are called.
  f->call = overflows || (first >= -half && last <= half && numel <= (1 << 16));
}

DLTensor Valid(void* data, uint8_t code, std::vector<int64_t>* shape) {
  DLTensor t{};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype = {code, 64, 1};
  t.shape = shape->data();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const int64_t n = 3, dim = 4;
  std::vector<int64_t> pos = {0, 1, 2}, ps = {n}, xs = {n, dim}, ms = {dim, dim};
  std::vector<double> x(n * dim, 0.5), y(n * dim), m(dim * dim);
  DLTensor tp = Valid(pos.data(), kDLInt, &ps), tx = Valid(x.data(), kDLFloat, &xs),
           ty = Valid(y.data(), kDLFloat, &xs), tm = Valid(m.data(), kDLFloat, &ms);
  Fuzzed f;
  const int64_t batch[2] = {n, dim}, square[2] = {dim, dim}, vec[2] = {n, n};
  const uint32_t which = in.Below(11);
  const int64_t* like = which == 1 ? vec : (which == 3 || which >= 9) ? square : batch;
  const bool is_positions = which == 1 || which == 5;
  Describe(&in, is_positions ? 1 : 2, is_positions ? kDLInt : kDLFloat, 64, like, &f);
  if (!f.call) return 0;

  static gpe_so_rep* rep = [] {
    gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
    o.dim = 4;
    gpe_so_rep* r = nullptr;
    if (gpe_so_rep_create_planes(&o, &r) != GPE_OK) __builtin_trap();
    return r;
  }();
  static gpe_learned_positions* table = [] {
    std::vector<double> v(8 * 4, 1.0);
    std::vector<int64_t> s = {8, 4};
    DLTensor t = Valid(v.data(), kDLFloat, &s);
    gpe_learned_positions* h = nullptr;
    if (gpe_learned_positions_create(&t, &h) != GPE_OK) __builtin_trap();
    return h;
  }();
  // The fuzzed tensor's buffer holds int64 bit patterns when it stands for positions:
  // keep them small so lookups are in range half the time.
  if (is_positions) {
    int64_t* p = reinterpret_cast<int64_t*>(f.buffer.data());
    for (int64_t i = 0; i < kBufferDoubles; ++i) p[i] = i % 9;
  }
  gpe_sinusoidal_options so = GPE_SINUSOIDAL_OPTIONS_INIT;
  std::vector<double> labels(3 * dim, 1.0), scores(n * n);
  std::vector<int64_t> ls = {3, dim}, ss = {n, n};
  DLTensor tl = Valid(labels.data(), kDLFloat, &ls), ts = Valid(scores.data(), kDLFloat, &ss);
  // INR prediction: psi_y, psi_x, w, out all [4, 4] in separate buffers.
  std::vector<double> w(dim * dim, 0.5), o(dim * dim);
  DLTensor tw = Valid(w.data(), kDLFloat, &ms), to = Valid(o.data(), kDLFloat, &ms);
  double rank = 0.0;
  switch (which) {
    case 0: CheckStatus(gpe_so_rep_apply(rep, &tp, &f.t, &ty)); break;
    case 1: CheckStatus(gpe_so_rep_apply(rep, &f.t, &tx, &ty)); break;
    case 2: CheckStatus(gpe_so_rep_apply(rep, &tp, &tx, &f.t)); break;
    case 3: CheckStatus(gpe_so_rep_matrix(rep, 5, &f.t)); break;
    case 4: CheckStatus(gpe_learned_positions_lookup(table, &tp, &f.t)); break;
    case 5: CheckStatus(gpe_learned_positions_lookup(table, &f.t, &ty)); break;
    case 6: CheckStatus(gpe_sinusoidal_encode(&so, &tp, &f.t)); break;
    case 7: CheckStatus(gpe_shaw_key_scores(&f.t, &tl, &tp, &tp, &ts)); break;
    case 8: CheckStatus(gpe_stable_rank(&f.t, &rank)); break;
    case 9: CheckStatus(gpe_inr_predict_separable_2d(&f.t, &tm, &tw, &to)); break;
    default: CheckStatus(gpe_inr_predict_separable_2d(&tm, &tm, &tw, &f.t)); break;
  }
  return 0;
}
