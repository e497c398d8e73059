// The C ABI's image files (gpe/image.h): PNG and JPEG read and written through inr/data.h.
// Every entry point runs under Guard.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/image.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/inr/argument_error.h"
#include "inr/data.h"

using gpe::c_api::AsArgumentError;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::TensorView;
using gpe::c_api::ViewTensor;

// A decoded image: the channels of inr/data.h's Image, immutable after gpe_image_read.
struct gpe_image {
  gpe::inr::Image image;
};

namespace {

const DType kF32F64[] = {DType::kFloat32, DType::kFloat64};

// ---- Images ----

absl::Status CheckPath(const char* path) {
  if (path == nullptr) return absl::InvalidArgumentError("path is NULL");
  if (path[0] == '\0') return absl::InvalidArgumentError("path is empty");
  return absl::OkStatus();
}

// pixels [rows, cols] or [rows, cols, 1 | 3], float32 or float64, finite, as channels.
absl::StatusOr<std::vector<gpe::inr::ImageMatrix>> ReadPixels(const DLTensor* t) {
  if (t == nullptr) return absl::InvalidArgumentError("pixels is NULL");
  if (t->ndim != 2 && t->ndim != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pixels must be [rows, cols] or [rows, cols, channels]; got ", t->ndim, " dimensions"));
  }
  absl::StatusOr<TensorView> v = ViewTensor(t, "pixels", t->ndim, kF32F64);
  if (!v.ok()) return v.status();
  const int64_t rows = v->shape[0], cols = v->shape[1];
  const int64_t nc = t->ndim == 3 ? v->shape[2] : 1;
  if (nc != 1 && nc != 3) {
    return absl::InvalidArgumentError(absl::StrCat("pixels must have 1 or 3 channels; got ", nc));
  }
  if (rows < 1 || cols < 1 || rows > 65536 || cols > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("pixels is ", rows, " x ", cols,
                                                   "; images are 1..65536 pixels a side"));
  }
  const int64_t sc = t->ndim == 3 ? v->strides[2] : 0;
  std::vector<gpe::inr::ImageMatrix> channels(static_cast<size_t>(nc),
                                              gpe::inr::ImageMatrix(rows, cols));
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t off = i * v->strides[0] + j * v->strides[1] + c * sc;
        const double x = v->dtype == DType::kFloat32
                             ? static_cast<double>(v->typed<const float>()[off])
                             : v->typed<const double>()[off];
        if (!std::isfinite(x)) {
          return absl::InvalidArgumentError(
              absl::StrCat("pixels[", i, ", ", j, ", ", c, "] is not finite"));
        }
        channels[c](i, j) = x;
      }
    }
  }
  return channels;
}

}  // namespace

extern "C" {

// ---- Images ----

gpe_status gpe_image_read(const char* path, int32_t grayscale, gpe_image** out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    if (absl::Status s = CheckPath(path); !s.ok()) return s;
    absl::StatusOr<gpe::inr::Image> image = gpe::inr::ReadImage(path, grayscale != 0);
    if (!image.ok()) return AsArgumentError(image.status());
    auto handle = std::make_unique<gpe_image>();
    handle->image = *std::move(image);
    *out = handle.release();
    return absl::OkStatus();
  });
}

void gpe_image_destroy(gpe_image* image) { delete image; }

gpe_status gpe_image_shape(const gpe_image* image, int64_t* rows, int64_t* cols,
                           int64_t* channels) {
  return Guard([&]() -> absl::Status {
    if (image == nullptr) return absl::InvalidArgumentError("image is NULL");
    if (rows != nullptr) *rows = image->image.rows();
    if (cols != nullptr) *cols = image->image.cols();
    if (channels != nullptr) *channels = static_cast<int64_t>(image->image.channels.size());
    return absl::OkStatus();
  });
}

gpe_status gpe_image_pixels(const gpe_image* image, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (image == nullptr) return absl::InvalidArgumentError("image is NULL");
    absl::StatusOr<TensorView> v = ViewTensor(out, "out", 3, kF32F64);
    if (!v.ok()) return v.status();
    const gpe::inr::Image& im = image->image;
    const int64_t nc = static_cast<int64_t>(im.channels.size());
    if (v->shape[0] != im.rows() || v->shape[1] != im.cols() || v->shape[2] != nc) {
      return absl::InvalidArgumentError(absl::StrCat(
          "out must have shape [", im.rows(), ", ", im.cols(), ", ", nc, "]; got [", v->shape[0],
          ", ", v->shape[1], ", ", v->shape[2], "]"));
    }
    if (absl::Status s = gpe::c_api::CheckNoSelfOverlap(*v, "out"); !s.ok()) return s;
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t i = 0; i < im.rows(); ++i) {
        for (int64_t j = 0; j < im.cols(); ++j) {
          const int64_t off = i * v->strides[0] + j * v->strides[1] + c * v->strides[2];
          const double x = im.channels[c](i, j);
          if (v->dtype == DType::kFloat32) {
            v->typed<float>()[off] = static_cast<float>(x);
          } else {
            v->typed<double>()[off] = x;
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

gpe_status gpe_image_write_png(const char* path, const DLTensor* pixels, double lo, double hi) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckPath(path); !s.ok()) return s;
    absl::StatusOr<std::vector<gpe::inr::ImageMatrix>> channels = ReadPixels(pixels);
    if (!channels.ok()) return channels.status();
    return AsArgumentError(gpe::inr::WritePng(path, *channels, lo, hi));
  });
}

gpe_status gpe_image_write_jpeg(const char* path, const DLTensor* pixels, int32_t quality,
                                double lo, double hi) {
  return Guard([&]() -> absl::Status {
    if (absl::Status s = CheckPath(path); !s.ok()) return s;
    absl::StatusOr<std::vector<gpe::inr::ImageMatrix>> channels = ReadPixels(pixels);
    if (!channels.ok()) return channels.status();
    return AsArgumentError(gpe::inr::WriteJpeg(path, *channels, quality, lo, hi));
  });
}

}  // extern "C"
