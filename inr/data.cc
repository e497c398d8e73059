#include "inr/data.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gpe {
namespace inr {
namespace {

struct Polar {
  double r, theta;
};

template <class Fn>
ImageMatrix Tabulate(int64_t n, Fn fn) {
  const std::vector<double> axis = GridAxis(n);
  ImageMatrix m(n, n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double x = axis[j], y = axis[i];
      m(i, j) = fn(Polar{std::sqrt(x * x + y * y), std::atan2(y, x)});
    }
  }
  return m;
}

// The scalar factor of the vector fields, eqs. 30 and 31.
double FieldMagnitude(SyntheticTask task, const Polar& p) {
  return task == SyntheticTask::kRadial ? std::sin(15.0 * std::sqrt(p.r))
                                        : std::sin(30.0 * std::sqrt(0.1 * p.r) + p.theta);
}


}  // namespace

std::vector<double> GridAxis(int64_t n) {
  std::vector<double> axis(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t j = 0; j < n; ++j) axis[j] = -1.0 + (2.0 * j + 1.0) / static_cast<double>(n);
  return axis;
}

ImageMatrix SyntheticImage(SyntheticTask task, int64_t n, bool signed_values) {
  return Tabulate(n, [&](const Polar& p) {
    const double v = FieldMagnitude(task, p);
    return signed_values ? v : std::abs(v);
  });
}

std::vector<ImageMatrix> SyntheticVectorField(SyntheticTask task, int64_t n) {
  return {Tabulate(n, [&](const Polar& p) { return FieldMagnitude(task, p) * std::cos(p.theta); }),
          Tabulate(n, [&](const Polar& p) { return FieldMagnitude(task, p) * std::sin(p.theta); })};
}

absl::StatusOr<Split> RandomSplit(int64_t num_points, double train_fraction,
                                  double validation_fraction, uint64_t seed) {
  if (num_points < 0) return absl::InvalidArgumentError("num_points must be >= 0");
  if (!(train_fraction >= 0 && validation_fraction >= 0 &&
        train_fraction + validation_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fractions must be >= 0 with sum <= 1; got train ", train_fraction, ", validation ",
        validation_fraction));
  }
  std::vector<int64_t> order(static_cast<size_t>(num_points));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const auto n_train = static_cast<int64_t>(std::llround(train_fraction * num_points));
  const auto n_val = static_cast<int64_t>(std::llround(validation_fraction * num_points));
  Split split;
  split.train.assign(order.begin(), order.begin() + n_train);
  split.validation.assign(order.begin() + n_train,
                          order.begin() + std::min(num_points, n_train + n_val));
  split.test.assign(order.begin() + std::min(num_points, n_train + n_val), order.end());
  for (auto* v : {&split.train, &split.validation, &split.test}) std::sort(v->begin(), v->end());
  return split;
}

Split RegularGridSplit(int64_t n_rows, int64_t n_cols) {
  Split split;
  for (int64_t i = 0; i < n_rows; ++i) {
    for (int64_t j = 0; j < n_cols; ++j) {
      (i % 2 == 0 && j % 2 == 0 ? split.train : split.test).push_back(i * n_cols + j);
    }
  }
  return split;
}

absl::StatusOr<Image> ReadPng(const std::string& path, bool grayscale) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read PNG '", path, "': ", image.message));
  }
  // libpng's simplified API converts every PNG kind (palette, 16-bit, alpha) for us.
  image.format = grayscale ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const int channels = grayscale ? 1 : 3;
  if (image.width == 0 || image.height == 0 || image.width > 65536 || image.height > 65536) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("PNG '", path, "' has unsupported size ",
                                                   image.width, " x ", image.height));
  }
  std::vector<png_byte> buffer(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, buffer.data(), 0, nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("cannot decode PNG '", path, "': ", message));
  }
  Image out;
  const int64_t h = image.height, w = image.width;
  for (int c = 0; c < channels; ++c) {
    ImageMatrix m(h, w);
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < w; ++j) m(i, j) = buffer[(i * w + j) * channels + c] / 255.0;
    }
    out.channels.push_back(std::move(m));
  }
  return out;
}

absl::Status WritePng(const std::string& path, const std::vector<ImageMatrix>& channels,
                      double lo, double hi) {
  if (channels.size() != 1 && channels.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("WritePng takes 1 or 3 channels; got ", channels.size()));
  }
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi)) {
    return absl::InvalidArgumentError("WritePng needs finite lo < hi");
  }
  const int64_t h = channels[0].rows(), w = channels[0].cols();
  if (h < 1 || w < 1 || h > 65536 || w > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write a ", h, " x ", w, " image"));
  }
  for (const ImageMatrix& m : channels) {
    if (m.rows() != h || m.cols() != w) {
      return absl::InvalidArgumentError("WritePng: channels differ in size");
    }
  }
  const int nc = static_cast<int>(channels.size());
  std::vector<png_byte> buffer(static_cast<size_t>(h * w * nc));
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < w; ++j) {
      for (int c = 0; c < nc; ++c) {
        double v = channels[c](i, j);
        v = std::isfinite(v) ? std::clamp((v - lo) / (hi - lo), 0.0, 1.0) : 0.0;
        buffer[(i * w + j) * nc + c] = static_cast<png_byte>(std::lround(255.0 * v));
      }
    }
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = nc == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, buffer.data(), 0, nullptr)) {
    return absl::InternalError(absl::StrCat("cannot write PNG '", path, "': ", image.message));
  }
  return absl::OkStatus();
}

}  // namespace inr
}  // namespace gpe
