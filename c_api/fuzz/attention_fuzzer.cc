// Fuzz target: the 0.3.0 entry points that parse sizes, shapes and options: RoPE
// (gpe_rope_create with every schedule's fields, gpe_rope_forward / _backward and the
// tables on fuzzed layouts and positions), the additive biases (gpe_bias_create_*,
// gpe_bias_fill_tile) and attention (gpe_attention_forward / _backward on fuzzed shapes,
// dtypes, layouts, positions, cu_seqlens, encodings and biases; 16-bit KV caches with
// float32 or bfloat16 q; Shaw tables; 0.9.0's gpe_rope handles (any schedule, xPos,
// M-RoPE with per-axis coordinates), sliding windows, softcaps, sinks, score masks, KV
// lengths and paged caches; 0.10.0's algebraic sequences, trees and grids and the CPU
// arithmetic (bf16_arithmetic, float32_arithmetic);
// gpe_attention_backward_v2 and gpe_attention_backward_with_parameters with fuzzed
// gradient outputs, the sinks' and the algebraic generators' included), and the same RoPE
// and attention calls on tensors claiming a CUDA device at addresses never mapped here (the
// library must check and refuse them, or reach the CUDA plugin, kept absent, without
// reading them: a read faults). The harness keeps its
// side of the contract: a tensor's data holds every element its shape promises, or is
// NULL when the shape is negative or too large to allocate (the library must reject it
// before reading). Each call must return a known status and leave a message on failure.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "c_api/fuzz/fuzz_input.h"
#include "gpe/gpe.h"

namespace {

using gpe::fuzz::CheckStatus;
using gpe::fuzz::FuzzInput;

constexpr int64_t kMaxElements = int64_t{1} << 14;  // what the harness allocates per tensor

// a * b, or INT64_MAX when it overflows: the harness's own size arithmetic stays defined
// whatever the fuzzed sizes (the library must refuse them, not the harness trip on them).
int64_t SatMul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

uint32_t StructSize(FuzzInput* in, uint32_t real) {
  switch (in->Read<uint8_t>() % 10) {
    case 0: return in->Read<uint32_t>();
    case 1: return real + 8;
    case 2: return real - 8;
    default: return real;
  }
}

// A tensor whose buffer matches its shape (or has NULL data when the shape cannot be
// allocated): owns shape and storage.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> storage;  // 8-byte elements cover every dtype used here
  DLTensor t{};
  Tensor(std::vector<int64_t> s, uint8_t code, uint8_t bits) : shape(std::move(s)) {
    int64_t n = 1;
    bool ok = true;
    for (int64_t d : shape) {
      if (d < 0 || d > kMaxElements || (d > 0 && n > kMaxElements / d)) ok = false;
      if (ok) n *= d;
    }
    if (ok && n > 0) storage.assign(static_cast<size_t>(n), 0.0);
    t.data = ok && n > 0 ? storage.data() : nullptr;
    t.device.device_type = kDLCPU;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {code, bits, 1};
    t.shape = shape.data();
  }
  // Fills float elements of the tensor's dtype with fuzzed finite-or-not values.
  void FillReal(FuzzInput* in) {
    if (t.data == nullptr) return;
    const size_t n = storage.size();
    for (size_t i = 0; i < n && !in->empty(); ++i) {
      const double v = in->Real();
      if (t.dtype.bits == 64) {
        static_cast<double*>(t.data)[i] = v;
      } else if (t.dtype.bits == 32) {
        static_cast<float*>(t.data)[i] = static_cast<float>(v);
      } else {
        static_cast<uint16_t*>(t.data)[i] = static_cast<uint16_t>(in->Read<uint16_t>());
      }
    }
  }
  void FillInt(FuzzInput* in, int64_t mod) {
    if (t.data == nullptr || t.dtype.code != kDLInt) return;
    int64_t* p = static_cast<int64_t*>(t.data);
    for (size_t i = 0; i < storage.size(); ++i) {
      p[i] = mod > 0 ? static_cast<int64_t>(in->Read<uint16_t>() % mod) : in->Read<int64_t>();
    }
  }
};

// Device addresses for the CUDA calls: 16 MiB apart (every tensor here is at most 128
// KiB), in a range no mapping of this process uses.
constexpr uintptr_t kFakeDevice = uintptr_t{0x10000000};
constexpr uintptr_t kFakeSpacing = uintptr_t{1} << 24;

// t described as lying on CUDA device 0 at kFakeDevice + slot * kFakeSpacing (NULL data
// stays NULL).
DLTensor OnDevice(const DLTensor& t, int slot) {
  DLTensor d = t;
  d.device.device_type = kDLCUDA;
  d.device.device_id = 0;
  if (d.data != nullptr) {
    d.data = reinterpret_cast<void*>(kFakeDevice + static_cast<uintptr_t>(slot) * kFakeSpacing);
  }
  return d;
}

void FloatType(FuzzInput* in, uint8_t* code, uint8_t* bits) {
  switch (in->Below(5)) {
    case 0: *code = kDLFloat; *bits = 64; break;
    case 1: *code = kDLBfloat; *bits = 16; break;
    case 2: *code = kDLFloat; *bits = 16; break;
    case 3: *code = kDLInt; *bits = 64; break;  // wrong type
    default: *code = kDLFloat; *bits = 32; break;
  }
}

void RopeCalls(FuzzInput* in) {
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.pairing = static_cast<int32_t>(in->Below(3));
  o.head_dim = in->Size(16);
  o.rotary_dim = in->Size(16);
  o.base = in->Below(4) == 0 ? in->Real() : 10000.0;
  o.schedule = static_cast<int32_t>(in->Below(7));
  o.num_threads = static_cast<int32_t>(in->Size(3));
  if (in->Below(2)) o.factor = in->Real();
  if (in->Below(2)) o.original_max_position = in->Size(64);
  if (in->Below(2)) o.current_length = in->Size(128);
  if (in->Below(3) == 0) {
    o.beta_fast = in->Real();
    o.beta_slow = in->Real();
  }
  o.has_attention_factor = static_cast<int32_t>(in->Below(2));
  if (o.has_attention_factor) o.attention_factor = in->Real();
  // LongRoPE factor lists: the lengths the harness promises are the lengths it holds.
  const int64_t nf = in->Size(8);
  std::vector<double> factors(nf > 0 && nf <= 64 ? static_cast<size_t>(nf) : 0, 1.0);
  for (double& f : factors) f = in->Below(4) == 0 ? in->Real() : 1.0;
  if (!factors.empty()) {
    o.short_factor = o.long_factor = factors.data();
    o.short_factor_len = o.long_factor_len = nf;
  }
  if (in->Below(3) == 0) {
    o.low_freq_factor = in->Real();
    o.high_freq_factor = in->Real();
  }
  o.xpos = static_cast<int32_t>(in->Below(4) == 0);
  o.axes = static_cast<int32_t>(in->Below(5));
  o.num_axes = static_cast<int32_t>(in->Size(4));
  const int64_t ns = in->Size(4);
  std::vector<int64_t> sections(ns > 0 && ns <= 16 ? static_cast<size_t>(ns) : 0);
  for (int64_t& s : sections) s = in->Size(8);
  if (!sections.empty()) {
    o.mrope_sections = sections.data();
    o.num_mrope_sections = ns;
  }
  gpe_rope* rope = nullptr;
  const gpe_status s = gpe_rope_create(&o, &rope);
  CheckStatus(s);
  if (s != GPE_OK) return;
  int64_t head_dim = 0, rotary = 0, axes = 0;
  CheckStatus(gpe_rope_shape(rope, &head_dim, &rotary, &axes));
  std::vector<double> thetas(static_cast<size_t>(rotary / 2));
  CheckStatus(gpe_rope_frequencies(rope, thetas.data(), rotary / 2, nullptr));
  // A tensor in a fuzzed layout (with fuzzed sizes, sometimes the wrong head_dim).
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.struct_size = StructSize(in, tok.struct_size);
  tok.layout = static_cast<int32_t>(in->Below(4));
  tok.role = static_cast<int32_t>(in->Below(3));
  const int64_t b = in->Size(3), sl = in->Size(6), h = in->Size(3);
  const int64_t d = in->Below(4) == 0 ? in->Size(16) : head_dim;
  uint8_t code, bits;
  FloatType(in, &code, &bits);
  std::vector<int64_t> shape = tok.layout == GPE_ROPE_LAYOUT_THD ? std::vector<int64_t>{sl, h, d}
                                                                  : std::vector<int64_t>{b, sl, h, d};
  Tensor x(shape, code, bits), y(shape, code, bits);
  x.FillReal(in);
  Tensor ids({in->Below(2) ? axes : 1, in->Size(12)}, kDLInt, 64);
  if (ids.shape[0] == 1 && in->Below(2)) {
    ids.shape.erase(ids.shape.begin());
    ids.t.ndim = 1;
  }
  ids.FillInt(in, in->Below(2) ? 0 : 1000);
  Tensor offsets({in->Size(3)}, kDLInt, 64), cu({in->Size(4)}, kDLInt, 64);
  offsets.FillInt(in, in->Below(2) ? 0 : 100);
  cu.FillInt(in, 8);
  switch (in->Below(4)) {
    case 0: tok.position_ids = &ids.t; break;
    case 1: tok.offsets = &offsets.t; break;
    case 2: tok.position_ids = &ids.t; tok.offsets = &offsets.t; break;
    default: break;
  }
  if (in->Below(2)) tok.cu_seqlens = &cu.t;
  CheckStatus(gpe_rope_forward(rope, &tok, &x.t, &y.t));
  CheckStatus(gpe_rope_backward(rope, &tok, &y.t, &y.t));  // in place
  gpe_rope_table* table = nullptr;
  const gpe_status ts = gpe_rope_table_create(rope, &tok, &x.t, &table);
  CheckStatus(ts);
  if (ts == GPE_OK) {
    CheckStatus(gpe_rope_table_forward(table, &x.t, &y.t));
    gpe_rope_table_destroy(table);
  }
  // The same call on device memory (drawn last: older inputs keep their meaning).
  if (in->Below(4) == 0) {
    const DLTensor dx = OnDevice(x.t, 0);
    DLTensor dy = OnDevice(y.t, 1);
    CheckStatus(gpe_rope_forward(rope, &tok, &dx, &dy));
    CheckStatus(gpe_rope_backward(rope, &tok, &dy, &dy));
  }
  gpe_rope_destroy(rope);
}

// A bias of a fuzzed kind with fuzzed sizes; parameters hold what the sizes promise.
gpe_bias* MakeBias(FuzzInput* in, std::vector<double>* params) {
  gpe_bias* bias = nullptr;
  const int64_t heads = in->Size(4), length = in->Size(10), rank = in->Size(3);
  auto fill = [&](int64_t n) {
    params->assign(n > 0 && n <= kMaxElements ? static_cast<size_t>(n) : 0, 0.0);
    for (double& p : *params) p = in->Below(8) == 0 ? in->Real() : 0.25;
    return params->empty() ? nullptr : params->data();
  };
  gpe_status s = GPE_OK;
  switch (in->Below(4)) {
    case 0: {
      gpe_alibi_options o = GPE_ALIBI_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.form = static_cast<int32_t>(in->Below(3));
      o.num_heads = heads;
      if (in->Below(2)) o.slopes = heads > 0 ? fill(heads) : nullptr;
      s = gpe_bias_create_alibi(&o, &bias);
      break;
    }
    case 1: {
      gpe_t5_options o = GPE_T5_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.bidirectional = static_cast<int32_t>(in->Below(2));
      o.num_heads = heads;
      o.num_buckets = in->Size(40);
      o.max_distance = in->Size(200);
      o.table = o.num_buckets > 0 && heads > 0 && SatMul(o.num_buckets, heads) <= kMaxElements
                    ? fill(o.num_buckets * heads)
                    : nullptr;
      s = gpe_bias_create_t5(&o, &bias);
      break;
    }
    case 2: {
      gpe_fox_options o = GPE_FOX_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.length = length;
      o.num_heads = heads;
      o.first_position = in->Size(100);
      o.gate_logits = length > 0 && heads > 0 && SatMul(length, heads) <= kMaxElements
                          ? fill(length * heads)
                          : nullptr;
      s = gpe_bias_create_fox(&o, &bias);
      break;
    }
    default: {
      gpe_grape_ap_options o = GPE_GRAPE_AP_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.length = length;
      o.num_heads = heads;
      o.rank = rank;
      o.first_position = in->Size(100);
      const bool fits = length > 0 && heads > 0 && rank > 0 &&
                        SatMul(SatMul(length, heads), rank) <= kMaxElements / 2;
      // w and u, [length, heads, rank] each, back to back in one buffer.
      const double* wu = fits ? fill(2 * length * heads * rank) : nullptr;
      o.w = wu;
      o.u = fits ? wu + length * heads * rank : nullptr;
      s = gpe_bias_create_grape_ap(&o, &bias);
      break;
    }
  }
  CheckStatus(s);
  return s == GPE_OK ? bias : nullptr;
}

void BiasCalls(FuzzInput* in) {
  std::vector<double> params;
  gpe_bias* bias = MakeBias(in, &params);
  if (bias == nullptr) return;
  Tensor qp({in->Size(5)}, kDLInt, 64), kp({in->Size(5)}, kDLInt, 64);
  qp.FillInt(in, in->Below(2) ? 0 : 12);
  kp.FillInt(in, in->Below(2) ? 0 : 12);
  uint8_t code = kDLFloat, bits = in->Below(2) ? 32 : 64;
  Tensor out({in->Below(4) == 0 ? in->Size(5) : qp.shape[0], kp.shape[0]}, code, bits);
  CheckStatus(gpe_bias_fill_tile(bias, in->Size(4), &qp.t, &kp.t, &out.t));
  gpe_bias_destroy(bias);
}

// A gpe_rope handle for attention (NULL when creation fails): head_dim mostly the call's,
// a fuzzed schedule with its published parameters, sometimes xPos or M-RoPE sections.
gpe_rope* MakeAttentionRope(FuzzInput* in, int64_t head_dim) {
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = in->Below(6) == 0 ? in->Size(12) : head_dim;
  if (in->Below(3) == 0) o.rotary_dim = in->Size(12);
  o.pairing = static_cast<int32_t>(in->Below(2));
  if (gpe_rope_options_use_schedule(static_cast<int32_t>(in->Below(6)), &o) != GPE_OK) {
    return nullptr;
  }
  if (in->Below(2)) o.factor = in->Below(4) == 0 ? in->Real() : 2.0;
  if (in->Below(2)) o.original_max_position = in->Size(16);
  o.xpos = static_cast<int32_t>(in->Below(4) == 0);
  static const int64_t kSections[] = {1, 1, 2};
  if (in->Below(4) == 0) {
    o.axes = GPE_ROPE_AXES_MROPE;
    o.mrope_sections = kSections;
    o.num_mrope_sections = 1 + in->Below(3);
  }
  gpe_rope* rope = nullptr;
  const gpe_status s = gpe_rope_create(&o, &rope);
  CheckStatus(s);
  return s == GPE_OK ? rope : nullptr;
}

// count skew m x m matrices ([count, m, m] row-major) in t: mostly skew-symmetric from
// fuzzed values (NaN and infinities included), sometimes any values (refused).
void FillSkews(FuzzInput* in, Tensor* t) {
  if (t->t.data == nullptr || t->shape.size() != 3) return;
  if (in->Below(6) == 0) {
    t->FillReal(in);
    return;
  }
  double* s = static_cast<double*>(t->t.data);
  const int64_t count = t->shape[0], m = t->shape[1];
  for (int64_t c = 0; c < count; ++c) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = i + 1; j < m && !in->empty(); ++j) {
        const double v = in->Real();
        s[(c * m + i) * m + j] = v;
        s[(c * m + j) * m + i] = -v;
      }
    }
  }
}

void AttentionCalls(FuzzInput* in) {
  gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.causal = static_cast<int32_t>(in->Below(3));
  if (in->Below(4) == 0) o.softmax_scale = in->Real();
  o.num_threads = static_cast<int32_t>(in->Size(2));
  if (in->Below(3) == 0) {
    o.rope_dim = in->Size(10);
    if (in->Below(4) == 0) o.rope_base = in->Real();
    o.rope_pairing = static_cast<int32_t>(in->Below(3));
  }
  const bool packed = in->Below(3) == 0;
  const int64_t batch = in->Size(3), sq = in->Size(7), sk = in->Size(9);
  const int64_t hq = in->Size(4), hkv = in->Size(2), d = in->Size(10);
  uint8_t code, bits;
  FloatType(in, &code, &bits);
  std::vector<int64_t> qs = packed ? std::vector<int64_t>{sq, hq, d} : std::vector<int64_t>{batch, sq, hq, d};
  std::vector<int64_t> ks = packed ? std::vector<int64_t>{sk, hkv, d} : std::vector<int64_t>{batch, sk, hkv, d};
  if (in->Below(8) == 0) ks.back() = in->Size(10);  // mismatched head_dim
  // K and V: mostly q's dtype; sometimes a 16-bit KV cache (bfloat16 or float16 k and v
  // with float32 q, float16 with bfloat16 q: the accepted pairs) or any other pair,
  // occasionally k and v of different dtypes (refused).
  uint8_t kcode = code, kbits = bits, vcode = code, vbits = bits;
  switch (in->Below(4)) {
    case 0:
      kcode = vcode = in->Below(2) ? kDLBfloat : kDLFloat;
      kbits = vbits = 16;
      break;
    case 1:
      FloatType(in, &kcode, &kbits);
      vcode = kcode;
      vbits = kbits;
      if (in->Below(4) == 0) FloatType(in, &vcode, &vbits);
      break;
    default: break;
  }
  Tensor q(qs, code, bits), k(ks, kcode, kbits), v(ks, vcode, vbits), out(qs, code, bits);
  q.FillReal(in);
  k.FillReal(in);
  v.FillReal(in);
  const int64_t tq = packed ? sq : SatMul(batch, sq);
  const int64_t tk = packed ? sk : SatMul(batch, sk);
  Tensor cq({in->Size(4)}, kDLInt, 64), ck({cq.shape[0]}, kDLInt, 64);
  if (packed) {
    // Mostly valid cumulative lengths (0 .. total, non-decreasing), sometimes anything.
    const bool small = tq >= 0 && tq <= kMaxElements && tk >= 0 && tk <= kMaxElements;
    if (cq.t.data != nullptr && small && in->Below(3) != 0) {
      int64_t* a = static_cast<int64_t*>(cq.t.data);
      int64_t* c = static_cast<int64_t*>(ck.t.data);
      const int64_t n = cq.shape[0];
      for (int64_t i = 0; i < n; ++i) {
        a[i] = n > 1 ? tq * i / (n - 1) : 0;
        c[i] = n > 1 ? tk * i / (n - 1) : 0;
      }
    } else {
      cq.FillInt(in, 0);
      ck.FillInt(in, 0);
    }
    o.cu_seqlens_q = &cq.t;
    o.cu_seqlens_k = &ck.t;
  }
  Tensor pq({tq}, kDLInt, 64), pk({tk}, kDLInt, 64);
  if (in->Below(3) == 0) {
    pq.FillInt(in, in->Below(2) ? 0 : 50);
    pk.FillInt(in, in->Below(2) ? 0 : 50);
    o.q_positions = &pq.t;
    if (in->Below(8) != 0) o.k_positions = &pk.t;
  }
  std::vector<double> params;
  gpe_bias* bias = in->Below(3) == 0 ? MakeBias(in, &params) : nullptr;
  o.bias = bias;
  // Shaw's relative-position tables (float64 [2k + 1, head_dim]), sometimes misshapen.
  const int64_t shaw_k = in->Size(4);
  const int64_t two_k = SatMul(shaw_k, 2);  // saturated: 2k + 1 must not overflow either
  const int64_t shaw_rows =
      in->Below(6) == 0 ? in->Size(9)
                        : (two_k == std::numeric_limits<int64_t>::max() ? two_k : two_k + 1);
  const int64_t shaw_cols = in->Below(6) == 0 ? in->Size(10) : d;
  Tensor skt({shaw_rows, shaw_cols}, kDLFloat, 64), svt({shaw_rows, shaw_cols}, kDLFloat, 64);
  if (in->Below(4) == 0) {
    o.shaw_max_distance = shaw_k;
    skt.FillReal(in);
    svt.FillReal(in);
    if (in->Below(3) != 0) o.shaw_key_table = &skt.t;
    if (in->Below(3) != 0) o.shaw_value_table = &svt.t;
  }
  // 0.9.0: a gpe_rope handle (sometimes with rope_dim as well, refused) and its per-axis
  // coordinates; the window (flag 0, 1 or bad; bounds from -2 up, or any int64); the
  // softcap (any double); the sinks (float32 [heads_q], sometimes misshapen or float64).
  gpe_rope* rope = in->Below(4) == 0 ? MakeAttentionRope(in, d) : nullptr;
  o.rope = rope;
  const int64_t axes = 1 + in->Below(3);
  Tensor qa({tq, axes}, kDLInt, 64), ka({tk, axes}, kDLInt, 64);
  if (rope != nullptr && in->Below(2)) {
    qa.FillInt(in, 16);
    ka.FillInt(in, 16);
    o.q_axes = &qa.t;
    o.k_axes = &ka.t;
  }
  if (in->Below(3) == 0) {
    o.window = static_cast<int32_t>(in->Below(3));
    o.window_left = in->Below(4) == 0 ? in->Read<int64_t>() : in->Size(12) - 2;
    o.window_right = in->Below(4) == 0 ? in->Read<int64_t>() : in->Size(12) - 2;
  }
  if (in->Below(4) == 0) o.softcap = in->Real();
  Tensor sinks({in->Below(6) == 0 ? in->Size(4) : hq}, kDLFloat, in->Below(8) == 0 ? 64 : 32);
  if (in->Below(3) == 0) {
    sinks.FillReal(in);
    o.sinks = &sinks.t;
  }
  // 0.9.0 too: attn_mask (float32 additive, uint8 or bool allowed, sometimes float64;
  // each dimension the call's extent or 1, sometimes any size; sometimes zero strides),
  // kv_lengths ([batch], any values) and block_table (k and v read as [num_pages,
  // page_size, ...] pages; [batch, any], page ids in and out of range).
  std::vector<int64_t> ms = {in->Below(2) ? batch : 1, in->Below(2) ? hq : 1,
                             in->Below(2) ? sq : 1, in->Below(2) ? sk : 1};
  if (in->Below(6) == 0) ms[in->Below(4)] = in->Size(9);
  const uint32_t mk = in->Below(4);  // float32, uint8, bool, float64
  Tensor mask(ms, mk == 0 || mk == 3 ? kDLFloat : mk == 1 ? kDLUInt : 6,
              mk == 0 ? 32 : mk == 3 ? 64 : 8);
  std::vector<int64_t> mask_strides = {0, 0, ms[3], 1};
  if (in->Below(3) == 0) {
    if (mk == 1 || mk == 2) {
      if (mask.t.data != nullptr) {
        uint8_t* m = static_cast<uint8_t*>(mask.t.data);
        for (size_t i = 0; i < mask.storage.size() && !in->empty(); ++i) m[i] = in->Read<uint8_t>();
      }
    } else {
      mask.FillReal(in);
    }
    // Batch and head strides 0 (broadcast) read only the first [sq, sk] block.
    if (in->Below(4) == 0) mask.t.strides = mask_strides.data();
    o.attn_mask = &mask.t;
  }
  Tensor kv_lengths({in->Below(6) == 0 ? in->Size(4) : batch}, kDLInt, 64);
  if (in->Below(4) == 0) {
    kv_lengths.FillInt(in, in->Below(2) && sk >= 0 && sk < (int64_t{1} << 20) ? sk + 2 : 0);
    o.kv_lengths = &kv_lengths.t;
  }
  Tensor block_table({in->Below(6) == 0 ? in->Size(4) : batch, in->Size(4)}, kDLInt, 64);
  if (in->Below(5) == 0) {
    block_table.FillInt(in, in->Below(2) && batch >= 0 && batch < (int64_t{1} << 20) ? batch + 1 : 0);
    o.block_table = &block_table.t;
  }
  // 0.10.0: one of Kogkalidis et al.'s algebraic encodings, so that the generator
  // gradients below meet their option (or its absence): a sequence handle of dimension
  // mostly head_dim; a tree's branch generators with addresses (depth 1, child indices
  // sometimes out of range); a grid's axes (2 or 3, of head_dim / axes, sometimes any
  // size) with per-axis coordinates.
  const int64_t alg_m = in->Below(6) == 0 ? in->Size(10) : d;
  const int64_t branches = 1 + in->Below(3), grid_axes = 2 + in->Below(2);
  const int64_t grid_m = in->Below(6) == 0 ? in->Size(6) : (d > 0 ? d / grid_axes : 0);
  Tensor alg_skew({1, alg_m, alg_m}, kDLFloat, 64), tree_skews({branches, d, d}, kDLFloat, 64),
      grid_skews({grid_axes, grid_m, grid_m}, kDLFloat, 64);
  Tensor tq_off({tq == std::numeric_limits<int64_t>::max() ? tq : tq + 1}, kDLInt, 64),
      tk_off({tk == std::numeric_limits<int64_t>::max() ? tk : tk + 1}, kDLInt, 64),
      tq_ch({tq}, kDLInt, 64), tk_ch({tk}, kDLInt, 64), gq({tq, grid_axes}, kDLInt, 64),
      gk({tk, grid_axes}, kDLInt, 64);
  gpe_algebraic_sequence* alg = nullptr;
  switch (in->Below(6)) {
    case 0:
      FillSkews(in, &alg_skew);
      if (alg_skew.t.data != nullptr) {
        gpe_algebraic_sequence_options ao = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
        ao.dim = alg_m;
        ao.skew = static_cast<const double*>(alg_skew.t.data);
        const gpe_status as = gpe_algebraic_sequence_create(&ao, &alg);
        CheckStatus(as);
        if (as != GPE_OK) alg = nullptr;
      }
      o.algebraic = alg;
      break;
    case 1:
      FillSkews(in, &tree_skews);
      for (Tensor* off : {&tq_off, &tk_off}) {
        if (off->t.data == nullptr) continue;
        int64_t* p = static_cast<int64_t*>(off->t.data);
        for (int64_t i = 0; i < off->shape[0]; ++i) p[i] = i;  // every node at depth 1
      }
      tq_ch.FillInt(in, branches + in->Below(2));
      tk_ch.FillInt(in, branches + in->Below(2));
      o.algebraic_tree = &tree_skews.t;
      o.q_tree_offsets = &tq_off.t;
      o.k_tree_offsets = &tk_off.t;
      o.q_tree_children = &tq_ch.t;
      o.k_tree_children = &tk_ch.t;
      break;
    case 2:
      FillSkews(in, &grid_skews);
      gq.FillInt(in, 16);
      gk.FillInt(in, 16);
      o.algebraic_grid = &grid_skews.t;
      o.q_axes = &gq.t;
      o.k_axes = &gk.t;
      break;
    default: break;
  }
  Tensor lse({tq, hq}, kDLFloat, bits == 64 ? 64 : 32);
  const bool with_lse = in->Below(2) != 0;
  const gpe_status fs =
      gpe_attention_forward(&o, &q.t, &k.t, &v.t, &out.t, with_lse ? &lse.t : nullptr);
  CheckStatus(fs);
  if (in->Below(2)) {
    Tensor dq(qs, code, bits), dk(ks, kcode, kbits), dv(ks, vcode, vbits);
    Tensor d_o(qs, code, bits);
    d_o.FillReal(in);
    // o and lse from the forward (both or neither), or recomputed.
    const bool saved = fs == GPE_OK && with_lse && in->Below(2) != 0;
    const DLTensor* o_in = saved ? &out.t : nullptr;
    const DLTensor* lse_in = saved ? &lse.t : nullptr;
    DLTensor* dk_out = in->Below(2) ? &dk.t : nullptr;
    Tensor dskt({shaw_rows, shaw_cols}, kDLFloat, 64), dsvt({shaw_rows, shaw_cols}, kDLFloat, 64);
    Tensor dba({in->Size(8), in->Below(2) ? in->Size(4) : hq}, kDLFloat, 64);
    Tensor dbb({in->Size(8)}, kDLFloat, 64);
    Tensor dsinks({in->Below(6) == 0 ? in->Size(4) : hq}, kDLFloat, 64);
    // The generators' gradients, mostly of their encoding's shape.
    Tensor dalg({in->Below(6) == 0 ? in->Size(10) : alg_m, alg_m}, kDLFloat, 64),
        dtree({branches, d, in->Below(6) == 0 ? in->Size(10) : d}, kDLFloat, 64),
        dgrid({in->Below(6) == 0 ? in->Size(4) : grid_axes, grid_m, grid_m}, kDLFloat, 64);
    switch (in->Below(3)) {
      case 0:
        CheckStatus(gpe_attention_backward(&o, &q.t, &k.t, &v.t, o_in, lse_in, &d_o.t, &dq.t,
                                           dk_out, &dv.t));
        break;
      case 1:
      {
        DLTensor* dsk = in->Below(2) ? &dskt.t : nullptr;
        DLTensor* dsv = in->Below(2) ? &dsvt.t : nullptr;
        CheckStatus(gpe_attention_backward_v2(&o, &q.t, &k.t, &v.t, o_in, lse_in, &d_o.t, &dq.t,
                                              dk_out, &dv.t, dsk, dsv));
        break;
      }
      default: {
        gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
        g.struct_size = StructSize(in, g.struct_size);
        if (in->Below(2)) g.d_bias_a = &dba.t;
        if (in->Below(3) == 0) g.d_bias_b = &dbb.t;
        if (in->Below(3) == 0) g.d_shaw_key_table = &dskt.t;
        if (in->Below(3) == 0) g.d_shaw_value_table = &dsvt.t;
        if (in->Below(3) == 0) g.d_sinks = &dsinks.t;
        if (in->Below(3) == 0) g.d_algebraic = &dalg.t;
        if (in->Below(3) == 0) g.d_algebraic_tree = &dtree.t;
        if (in->Below(3) == 0) g.d_algebraic_grid = &dgrid.t;
        const gpe_attention_param_grads* gp = in->Below(8) == 0 ? nullptr : &g;
        CheckStatus(gpe_attention_backward_with_parameters(&o, &q.t, &k.t, &v.t, o_in, lse_in,
                                                           &d_o.t, &dq.t, dk_out, &dv.t, gp));
        break;
      }
    }
  }
  // A value head size of its own (0.10.0): v, o, d_o and dv of another last dim (o's
  // sometimes wrong), drawn after everything above so that older inputs keep their
  // meaning.
  if (in->Below(3) == 1) {
    std::vector<int64_t> vs = ks, os = qs;
    vs.back() = in->Size(10);
    os.back() = in->Below(6) == 0 ? in->Size(10) : vs.back();
    Tensor v2(vs, vcode, vbits), o2(os, code, bits);
    v2.FillReal(in);
    CheckStatus(gpe_attention_forward(&o, &q.t, &k.t, &v2.t, &o2.t, with_lse ? &lse.t : nullptr));
    if (in->Below(2)) {
      Tensor d2(os, code, bits), dq2(qs, code, bits), dv2(vs, vcode, vbits);
      d2.FillReal(in);
      CheckStatus(gpe_attention_backward(&o, &q.t, &k.t, &v2.t, nullptr, nullptr, &d2.t, &dq2.t,
                                         nullptr, &dv2.t));
    }
  }
  // The forward and backward on device memory (drawn last, as above).
  if (in->Below(4) == 0) {
    const DLTensor dq = OnDevice(q.t, 0), dk = OnDevice(k.t, 1), dv = OnDevice(v.t, 2);
    DLTensor dout = OnDevice(out.t, 3), dlse = OnDevice(lse.t, 4);
    CheckStatus(gpe_attention_forward(&o, &dq, &dk, &dv, &dout, with_lse ? &dlse : nullptr));
    Tensor g(qs, code, bits);
    const DLTensor dg = OnDevice(g.t, 5);
    DLTensor dgq = OnDevice(q.t, 6), dgk = OnDevice(k.t, 7), dgv = OnDevice(v.t, 8);
    const bool saved = in->Below(2) != 0;
    CheckStatus(gpe_attention_backward(&o, &dq, &dk, &dv, saved ? &dout : nullptr,
                                       saved ? &dlse : nullptr, &dg, &dgq,
                                       in->Below(2) ? &dgk : nullptr, &dgv));
  }
  // The CPU arithmetic (0.10.0; drawn last, as above): the forward, and a backward that
  // recomputes it, again with bf16_arithmetic / float32_arithmetic mostly in range (the
  // split modes, the AMX tiles where the CPU has them), sometimes one past either end.
  if (in->Below(4) == 0) {
    o.bf16_arithmetic = static_cast<int32_t>(in->Below(6)) - 1;
    o.float32_arithmetic = static_cast<int32_t>(in->Below(5)) - 1;
    CheckStatus(gpe_attention_forward(&o, &q.t, &k.t, &v.t, &out.t, with_lse ? &lse.t : nullptr));
    if (in->Below(2)) {
      Tensor grad_o(qs, code, bits), grad_q(qs, code, bits);
      grad_o.FillReal(in);
      CheckStatus(gpe_attention_backward(&o, &q.t, &k.t, &v.t, nullptr, nullptr, &grad_o.t,
                                         &grad_q.t, nullptr, nullptr));
    }
  }
  gpe_bias_destroy(bias);
  gpe_rope_destroy(rope);
  gpe_algebraic_sequence_destroy(alg);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Calls on device tensors end where the CUDA plugin would be loaded: kept absent here (a
  // GPU run is the GPU check's).
  static const bool no_plugin = setenv("GPE_CUDA_PLUGIN", "/nonexistent/libgpe_cuda.so", 1) == 0;
  (void)no_plugin;
  FuzzInput in(data, size);
  switch (in.Below(3)) {
    case 0: RopeCalls(&in); break;
    case 1: BiasCalls(&in); break;
    default: AttentionCalls(&in); break;
  }
  return 0;
}
