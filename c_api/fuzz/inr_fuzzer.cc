// Fuzz target: the 0.5.0 INR entry points that parse sizes, shapes and options: the MLP
// (gpe_inr_mlp_num_parameters / _init / _fit / _predict with gpe_mlp_options, and
// _num_evaluations / _fit_v2 with a fuzzed gpe_mlp_validation and its progress), the
// linear Adam fits (gpe_inr_fit_dense_adam, gpe_inr_fit_separable_adam_2d with
// gpe_linear_adam_options), the data (gpe_inr_synthetic_image / _vector_field,
// gpe_inr_grid_coordinates, gpe_inr_random_split, gpe_inr_regular_grid_split), the
// metrics (gpe_inr_mse, gpe_inr_psnr) and the image files (gpe_image_write_png / _jpeg
// with fuzzed pixels and ranges, and gpe_image_read of fuzzed bytes behind a PNG or JPEG
// signature, then gpe_image_shape / _pixels). The harness keeps its side of the
// contract: a tensor's data holds every element its shape promises (NULL when the
// shape cannot be allocated); paths are this process's own temporary files; and the
// work asked for explicitly (Adam steps) is kept small so each input runs in
// milliseconds. Each call must return a known status and leave a message on failure.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "c_api/fuzz/fuzz_input.h"
#include "gpe/gpe.h"

namespace {

using gpe::fuzz::CheckStatus;
using gpe::fuzz::FuzzInput;

constexpr int64_t kMaxElements = int64_t{1} << 14;  // what the harness allocates per tensor

uint32_t StructSize(FuzzInput* in, uint32_t real) {
  switch (in->Read<uint8_t>() % 10) {  // 0 (also past the input's end): the real size
    case 1: return in->Read<uint32_t>();
    case 2: return real + 8;
    case 3: return real - 8;
    default: return real;
  }
}

// A tensor whose 8-byte-per-element buffer matches its shape (NULL data when the shape
// cannot be allocated); dtype float64 (or float32, reading half the buffer), int64.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> storage;
  DLTensor t{};
  explicit Tensor(std::vector<int64_t> s, uint8_t code = kDLFloat, uint8_t bits = 64)
      : shape(std::move(s)) {
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
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  // Ordinary values in [-1, 1) most of the time, fuzzed ones (NaN, inf, huge) sometimes,
  // written in the tensor's own float type.
  void Fill(FuzzInput* in) {
    const size_t n = t.data == nullptr ? 0 : storage.size();
    for (size_t k = 0; k < n; ++k) {
      const double v = in->Below(16) == 1 ? in->Real() : in->Read<int16_t>() / 32768.0;
      if (t.dtype.bits == 32) {
        reinterpret_cast<float*>(storage.data())[k] = static_cast<float>(v);
      } else {
        storage[k] = v;
      }
    }
  }
  // Sometimes a wrong dtype, rank or device (never past the input's end, which reads 0).
  void Perturb(FuzzInput* in) {
    switch (in->Below(24)) {
      case 4: t.dtype = {kDLFloat, static_cast<uint8_t>(t.dtype.bits == 32 ? 64 : 32), 1}; break;
      case 1: t.dtype = {kDLInt, 64, 1}; break;
      case 2: if (t.ndim > 0) t.ndim -= 1; break;
      case 3: t.device.device_type = kDLCUDA; break;
      default: break;
    }
  }
  DLTensor* p() { return &t; }
};

// a * b, or -1 where it overflows (a shape the harness will not allocate).
int64_t Mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

int64_t Near(FuzzInput* in, int64_t want, int64_t small = 8) {
  return in->Below(6) == 1 ? in->Size(small) : want;
}

// Few Adam steps (the loop count is the caller's explicit request), sometimes 0 or negative.
int64_t Steps(FuzzInput* in) {
  switch (in->Below(10)) {
    case 1: return -static_cast<int64_t>(in->Read<uint16_t>());
    case 2: return 0;
    default: return 1 + in->Below(3);
  }
}

// Mostly an ordinary size in 1..small (also when the input has run out), sometimes a
// fuzzed one (0, negative, huge).
int64_t Dim(FuzzInput* in, int64_t small) {
  return in->Below(8) == 1 ? in->Size(small) : 1 + in->Below(static_cast<uint32_t>(small));
}

void ProgressSink(void* user_data, int64_t, double) { ++*static_cast<int64_t*>(user_data); }
void ValidationProgressSink(void* user_data, int64_t, double, double) {
  ++*static_cast<int64_t*>(user_data);
}

void MlpCalls(FuzzInput* in) {
  gpe_mlp_options o = GPE_MLP_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.hidden_width = in->Below(8) == 1 ? in->Size(8) : 1 + in->Below(6);
  o.num_hidden_layers = in->Below(8) == 1 ? in->Size(3) : in->Below(3);
  o.steps = Steps(in);
  o.learning_rate = in->Below(4) == 1 ? in->Real() : 1e-2;
  o.beta1 = in->Below(6) == 1 ? in->Real() : 0.9;
  o.beta2 = in->Below(6) == 1 ? in->Real() : 0.999;
  o.epsilon = in->Below(6) == 1 ? in->Real() : 1e-8;
  o.seed = in->Read<uint64_t>();
  o.report_every = in->Below(4) == 1 ? in->Size(3) : 0;
  int64_t calls = 0;
  if (in->Below(2) == 0) {
    o.progress = ProgressSink;
    o.progress_user_data = &calls;
  }
  const gpe_mlp_options* op = in->Below(32) == 1 ? nullptr : &o;
  const int64_t din = in->Below(8) == 1 ? in->Size(4) : 1 + in->Below(3);
  const int64_t dout = in->Below(8) == 1 ? in->Size(4) : 1 + in->Below(2);
  const int64_t n = in->Below(8) == 1 ? in->Size(16) : 1 + in->Below(12);
  int64_t np = 0;
  const gpe_status s = gpe_inr_mlp_num_parameters(op, din, dout, in->Below(32) == 1 ? nullptr : &np);
  CheckStatus(s);
  if (s != GPE_OK) np = in->Size(32);
  const uint8_t bits = in->Below(2) == 0 ? 32 : 64;
  Tensor params({Near(in, np, 64)}, kDLFloat, bits), init({Near(in, np, 64)}, kDLFloat, bits);
  Tensor x({Near(in, n), Near(in, din)}, kDLFloat, bits), y({Near(in, n), Near(in, dout)}, kDLFloat, bits);
  Tensor loss({Near(in, o.steps)}), out({Near(in, n), Near(in, dout)}, kDLFloat, bits);
  x.Fill(in);
  y.Fill(in);
  for (Tensor* t : {&params, &init, &x, &y, &loss, &out}) t->Perturb(in);
  CheckStatus(gpe_inr_mlp_init(op, din, dout, init.p()));
  double final_loss = 0.0;
  CheckStatus(gpe_inr_mlp_fit(op, x.p(), y.p(), in->Below(2) == 0 ? nullptr : init.p(), params.p(),
                              in->Below(2) == 0 ? nullptr : loss.p(),
                              in->Below(2) == 0 ? nullptr : &final_loss));
  CheckStatus(gpe_inr_mlp_predict(op, params.p(), x.p(), out.p()));
  // gpe_inr_mlp_fit_v2: a fuzzed validation set (both, one or neither of features and
  // targets; outputs sized from gpe_inr_mlp_num_evaluations, or not; a validation
  // progress callback or not) and struct_size (0.6.0's, which ends before the progress).
  int64_t k = 0;
  const gpe_status ks = gpe_inr_mlp_num_evaluations(op, in->Below(32) == 1 ? nullptr : &k);
  CheckStatus(ks);
  if (ks != GPE_OK) k = in->Size(8);
  const int64_t m = in->Below(8) == 1 ? in->Size(16) : 1 + in->Below(8);
  Tensor vx({Near(in, m), Near(in, din)}, kDLFloat, bits), vy({Near(in, m), Near(in, dout)}, kDLFloat, bits);
  Tensor vsteps({Near(in, k)}, kDLInt, 64), vloss({Near(in, k)});
  vx.Fill(in);
  vy.Fill(in);
  for (Tensor* t : {&vx, &vy, &vsteps, &vloss}) t->Perturb(in);
  gpe_mlp_validation val = GPE_MLP_VALIDATION_INIT;
  const uint32_t v060_size = static_cast<uint32_t>(offsetof(gpe_mlp_validation, progress));
  val.struct_size = in->Below(4) == 1 ? v060_size : StructSize(in, val.struct_size);
  val.features = in->Below(8) == 1 ? nullptr : vx.p();
  val.targets = in->Below(8) == 1 ? nullptr : vy.p();
  val.steps = in->Below(4) == 1 ? nullptr : vsteps.p();
  val.loss = in->Below(4) == 1 ? nullptr : vloss.p();
  int64_t validation_calls = 0;
  if (in->Below(2) == 0) {
    val.progress = ValidationProgressSink;
    val.progress_user_data = &validation_calls;
  }
  CheckStatus(gpe_inr_mlp_fit_v2(op, x.p(), y.p(), nullptr, params.p(),
                                 in->Below(2) == 0 ? nullptr : loss.p(), &final_loss,
                                 in->Below(16) == 1 ? nullptr : &val));
}

void LinearAdamCalls(FuzzInput* in) {
  gpe_linear_adam_options o = GPE_LINEAR_ADAM_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.steps = Steps(in);
  o.learning_rate = in->Below(4) == 1 ? in->Real() : 1e-2;
  o.final_learning_rate = in->Below(4) == 1 ? in->Real() : 1e-3;
  o.beta1 = in->Below(6) == 1 ? in->Real() : 0.9;
  o.beta2 = in->Below(6) == 1 ? in->Real() : 0.999;
  o.epsilon = in->Below(6) == 1 ? in->Real() : 1e-8;
  o.report_every = in->Below(4) == 1 ? in->Size(3) : 0;
  int64_t calls = 0;
  if (in->Below(2) == 0) {
    o.progress = ProgressSink;
    o.progress_user_data = &calls;
  }
  const gpe_linear_adam_options* op = in->Below(32) == 1 ? nullptr : &o;
  const int64_t n = Dim(in, 12), f = Dim(in, 4), c = Dim(in, 3);
  double final_loss = 0.0;
  Tensor loss({Near(in, o.steps)});
  loss.Perturb(in);
  DLTensor* lp = in->Below(2) == 0 ? nullptr : loss.p();
  double* fp = in->Below(2) == 0 ? nullptr : &final_loss;
  if (in->Below(2) == 0) {
    Tensor phi({Near(in, n), Near(in, f)}), y({Near(in, n), Near(in, c)}), w({Near(in, f), Near(in, c)});
    phi.Fill(in);
    y.Fill(in);
    for (Tensor* t : {&phi, &y, &w}) t->Perturb(in);
    CheckStatus(gpe_inr_fit_dense_adam(op, phi.p(), y.p(), w.p(), lp, fp));
  } else {
    const int64_t ny = n, nx = Dim(in, 12), ky = f, kx = c;
    Tensor py({Near(in, ny), Near(in, ky)}), px({Near(in, nx), Near(in, kx)});
    Tensor img({Near(in, ny), Near(in, nx)}), w({Near(in, ky), Near(in, kx)});
    py.Fill(in);
    px.Fill(in);
    img.Fill(in);
    for (Tensor* t : {&py, &px, &img, &w}) t->Perturb(in);
    CheckStatus(gpe_inr_fit_separable_adam_2d(op, py.p(), px.p(), img.p(), w.p(), lp, fp));
  }
}

int32_t Task(FuzzInput* in) {
  return in->Below(8) == 1 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(2));
}

void DataCalls(FuzzInput* in) {
  const int64_t n = Dim(in, 16);
  Tensor image({Near(in, n), Near(in, n)}), field({Near(in, n), Near(in, n), Near(in, 2, 3)});
  Tensor grid({Near(in, Mul(n, n), 64), Near(in, 2, 3)});
  for (Tensor* t : {&image, &field, &grid}) t->Perturb(in);
  CheckStatus(gpe_inr_synthetic_image(Task(in), in->Read<int32_t>(), image.p()));
  CheckStatus(gpe_inr_synthetic_vector_field(Task(in), in->Below(32) == 1 ? nullptr : field.p()));
  CheckStatus(gpe_inr_grid_coordinates(Near(in, n), grid.p()));
  int64_t counts[3] = {0, 0, 0};
  const int64_t points = Dim(in, 64);
  Tensor indices({Near(in, points, 64)}, kDLInt);
  indices.Perturb(in);
  const double tf = in->Below(4) == 1 ? in->Real() : in->Below(5) / 8.0;
  const double vf = in->Below(4) == 1 ? in->Real() : in->Below(5) / 8.0;
  CheckStatus(gpe_inr_random_split(points, tf, vf, in->Read<uint64_t>(), indices.p(),
                                   in->Below(32) == 1 ? nullptr : counts));
  const int64_t rows = Dim(in, 12), cols = Dim(in, 12);
  Tensor grid_indices({Near(in, Mul(rows, cols), 64)}, kDLInt);
  grid_indices.Perturb(in);
  CheckStatus(gpe_inr_regular_grid_split(rows, cols, grid_indices.p(),
                                         in->Below(32) == 1 ? nullptr : counts));
}

std::vector<int64_t> Shape(FuzzInput* in) {
  std::vector<int64_t> s(in->Below(8) == 1 ? in->Below(5) : 1 + in->Below(3));
  for (int64_t& d : s) d = Dim(in, 6);
  return s;
}

void MetricCalls(FuzzInput* in) {
  std::vector<int64_t> sa = Shape(in), sb = in->Below(4) == 1 ? Shape(in) : sa;
  Tensor a(sa), b(sb);
  a.Fill(in);
  b.Fill(in);
  a.Perturb(in);
  b.Perturb(in);
  double out = 0.0;
  CheckStatus(gpe_inr_mse(a.p(), b.p(), in->Below(32) == 1 ? nullptr : &out));
  CheckStatus(gpe_inr_psnr(a.p(), b.p(), in->Below(4) == 1 ? in->Real() : 1.0, &out));
}

const std::string& TempPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TEST_TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/gpe_inr_fuzz_" +
           std::to_string(static_cast<long>(getpid()));
  }();
  return path;
}

void ReadBack(FuzzInput* in, const std::string& path) {
  gpe_image* image = nullptr;
  const gpe_status s = gpe_image_read(path.c_str(), static_cast<int32_t>(in->Below(2)), &image);
  CheckStatus(s);
  if (s != GPE_OK) return;
  int64_t rows = 0, cols = 0, channels = 0;
  CheckStatus(gpe_image_shape(image, &rows, &cols, in->Below(8) == 1 ? nullptr : &channels));
  Tensor px({Near(in, rows, 64), Near(in, cols, 64), Near(in, channels, 3)}, kDLFloat,
            in->Below(2) == 0 ? 32 : 64);
  px.Perturb(in);
  CheckStatus(gpe_image_pixels(image, px.p()));
  gpe_image_destroy(image);
}

void ImageCalls(FuzzInput* in) {
  const std::string& path = TempPath();
  if (in->Below(2) == 0) {
    // Fuzzed pixels, shapes, ranges and quality, written then read back.
    std::vector<int64_t> shape = {Dim(in, 12), Dim(in, 12)};
    if (in->Below(2) == 0) shape.push_back(in->Below(4) == 1 ? in->Size(4) : 3);
    Tensor px(shape, kDLFloat, in->Below(2) == 0 ? 32 : 64);
    px.Fill(in);
    px.Perturb(in);
    const double lo = in->Below(4) == 1 ? in->Real() : -1.0;
    const double hi = in->Below(4) == 1 ? in->Real() : 1.0;
    const gpe_status s = in->Below(2) == 0
                             ? gpe_image_write_png(path.c_str(), px.p(), lo, hi)
                             : gpe_image_write_jpeg(path.c_str(), px.p(),
                                                    in->Below(4) == 1 ? in->Read<int32_t>() : 90, lo, hi);
    CheckStatus(s);
    if (s == GPE_OK) ReadBack(in, path);
  } else {
    // Fuzzed bytes behind a PNG or JPEG signature: the decoders' error paths.
    static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char kJpeg[3] = {0xff, 0xd8, 0xff};
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return;
    if (in->Below(2) == 0) {
      std::fwrite(kPng, 1, sizeof kPng, f);
    } else {
      std::fwrite(kJpeg, 1, sizeof kJpeg, f);
    }
    while (!in->empty()) {
      const uint8_t b = in->Read<uint8_t>();
      std::fputc(b, f);
    }
    std::fclose(f);
    static const uint8_t kNothing = 0;  // an empty input: ReadBack's choices all read 0
    FuzzInput rest(&kNothing, 0);
    ReadBack(&rest, path);
  }
  std::remove(path.c_str());
  CheckStatus(gpe_image_read(nullptr, 0, nullptr));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  switch (in.Below(6)) {
    case 0: MlpCalls(&in); break;
    case 1: LinearAdamCalls(&in); break;
    case 2: DataCalls(&in); break;
    case 3: MetricCalls(&in); break;
    default: ImageCalls(&in); break;
  }
  return 0;
}
