// Data for coordinate-network experiments: Lim et al.'s analytic Radial and Spiral images
// and vector fields (appendix D.1), the papers' train/validation/test splits, and images
// read from and written to PNG and JPEG files.
//
// Grid convention: an n x n grid of pixel centres over [-1, 1]^2, stored row-major with
// rows = y (row i at y_i) and columns = x (column j at x_j), x_j = -1 + (2 j + 1) / n.
// Polar coordinates: r = sqrt(x^2 + y^2), theta = atan2(y, x).
#ifndef INR_DATA_H_
#define INR_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpe {
namespace inr {

using ImageMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Pixel-centre coordinates of an n-point axis over [-1, 1]. n >= 1.
std::vector<double> GridAxis(int64_t n);

enum class SyntheticTask { kRadial, kSpiral };

// Lim et al. appendix D.1. Radial: sin(15 sqrt(r)); Spiral: sin(30 sqrt(0.1 r) + theta).
// The images are the magnitude of the vector fields (the appendix's formula drops the
// absolute value; with it, a plain MLP lands near Table 2's errors); `signed_values`
// gives the signed sine instead.
ImageMatrix SyntheticImage(SyntheticTask task, int64_t n, bool signed_values = false);
// The vector fields (eqs. 30, 31): channel 0 is v_x, channel 1 is v_y.
std::vector<ImageMatrix> SyntheticVectorField(SyntheticTask task, int64_t n);

// A partition of the indices 0..num_points-1 (row-major pixel indices).
struct Split {
  std::vector<int64_t> train, validation, test;
};
// Lim et al. D.2: a uniformly random train fraction (5%), validation fraction (40%),
// the rest test. Fractions in [0, 1] with sum <= 1; deterministic in `seed`. Sizes
// llround(fraction * num_points) (halves away from zero), the validation set clipped to
// what the train set leaves.
absl::StatusOr<Split> RandomSplit(int64_t num_points, double train_fraction,
                                  double validation_fraction, uint64_t seed);
// Zheng et al.'s separable set-up on an n_rows x n_cols image: train on the [::2] x [::2]
// sub-grid, test on every other pixel (no validation set).
Split RegularGridSplit(int64_t n_rows, int64_t n_cols);

// An image with 1 (gray) or 3 (RGB) channels of values in [0, 1].
struct Image {
  std::vector<ImageMatrix> channels;
  int64_t rows() const { return channels.empty() ? 0 : channels[0].rows(); }
  int64_t cols() const { return channels.empty() ? 0 : channels[0].cols(); }
};

// Reads an 8- or 16-bit PNG (gray, gray+alpha, RGB, RGBA, palette; alpha dropped, not
// composed) into [0, 1], the samples as encoded (16-bit files without gAMA / sRGB taken
// as sRGB, scaled to 8 bits). `grayscale` converts colour to luma (ITU-R BT.601 weights
// on the encoded values, as a JPEG's Y); gray files read as RGB repeat the gray.
absl::StatusOr<Image> ReadPng(const std::string& path, bool grayscale);
// Reads a JPEG (baseline or progressive; gray or YCbCr/RGB, CMYK refused) into [0, 1]
// through libjpeg-turbo. `grayscale` takes the luma (libjpeg's BT.601 Y) of colour files.
absl::StatusOr<Image> ReadJpeg(const std::string& path, bool grayscale);
// Reads a PNG or a JPEG, told apart by the file's signature (not its name).
absl::StatusOr<Image> ReadImage(const std::string& path, bool grayscale);
// The writers below replace `path` all or nothing: they write a temporary file of a
// unique name in the same directory (mkstemp), fsync it and rename it over `path` only
// when complete. On any failure (a full disk, a file-size limit, an encoder error) the
// temporary file is removed and an existing file at `path` is left as it was. A `path`
// that exists and is not a regular file (a directory, device, fifo, socket) is refused
// (InvalidArgument) and left alone; a symbolic link is followed (the file it names is
// replaced, the link kept); a failed write is Unavailable. A new file gets mode 0666 less the umask, a replaced one keeps its mode.
//
// Writes 1 or 3 equal-sized channels as a baseline JPEG of `quality` (1..100), mapping
// [lo, hi] to 0..255 as WritePng does. Lossy: a round trip is close, not exact.
absl::Status WriteJpeg(const std::string& path, const std::vector<ImageMatrix>& channels,
                       int quality = 95, double lo = 0.0, double hi = 1.0);
// Writes 1 or 3 equal-sized channels as an 8-bit PNG, clamping to [lo, hi] and mapping
// that range to 0..255.
absl::Status WritePng(const std::string& path, const std::vector<ImageMatrix>& channels,
                      double lo = 0.0, double hi = 1.0);
// Writes `text` as the whole file, all or nothing, as the image writers above (reports,
// tables, JSON).
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace inr
}  // namespace gpe

#endif  // INR_DATA_H_
