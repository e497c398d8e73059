#include "inr/data.h"

#include <png.h>
// jpeglib.h needs FILE and size_t declared first.
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>

#include <csetjmp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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



// Checks 1 or 3 equal-sized channels and finite lo < hi, and maps [lo, hi] to 0..255
// (clamped; non-finite values to 0), interleaved row-major.
absl::Status QuantiseChannels(const std::vector<ImageMatrix>& channels, double lo, double hi,
                              const char* who, std::vector<unsigned char>* out) {
  if (channels.size() != 1 && channels.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " takes 1 or 3 channels; got ", channels.size()));
  }
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi)) {
    return absl::InvalidArgumentError(absl::StrCat(who, " needs finite lo < hi"));
  }
  const int64_t h = channels[0].rows(), w = channels[0].cols();
  if (h < 1 || w < 1 || h > 65536 || w > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": cannot write a ", h, " x ", w, " image"));
  }
  for (const ImageMatrix& m : channels) {
    if (m.rows() != h || m.cols() != w) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": channels differ in size"));
    }
  }
  const int nc = static_cast<int>(channels.size());
  out->assign(static_cast<size_t>(h * w * nc), 0);
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < w; ++j) {
      for (int c = 0; c < nc; ++c) {
        double v = channels[c](i, j);
        v = std::isfinite(v) ? std::clamp((v - lo) / (hi - lo), 0.0, 1.0) : 0.0;
        (*out)[(i * w + j) * nc + c] = static_cast<unsigned char>(std::lround(255.0 * v));
      }
    }
  }
  return absl::OkStatus();
}

// Bounds on the pixels a file of a given size can hold, checked before the decoded image
// is allocated, so that a tiny file declaring a huge image is refused rather than making
// the reader allocate up to 65536^2 pixels. PNG: deflate compresses at most about 1032:1
// (RFC 1951: a 258-byte match per 2-bit code at best) and the densest pixel format packs 8
// pixels per byte (1-bit gray). JPEG (Huffman-coded, ITU T.81): every 8 x 8 block of a
// component costs at least a DC code and an end-of-block code, 2 bits, i.e. 256 pixels per
// byte for gray; a further 4x margin.
constexpr int64_t kMaxPngPixelsPerByte = 8 * 1032;
constexpr int64_t kMaxJpegPixelsPerByte = 4 * 256;

// The file's size in bytes; -1 where it cannot be read (the decoder then reports it).
int64_t FileBytes(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

// libjpeg reports fatal errors through error_exit, which must not return: it longjmps
// back to the setjmp in DecodeJpeg / EncodeJpeg. Only libjpeg's C frames lie between the
// two, so no C++ destructor is skipped; the functions keep no C++ objects of their own.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (corrupt data, premature end) are counted in num_warnings, not printed.
void JpegQuiet(j_common_ptr) {}

void InitJpegError(JpegError* err) {
  jpeg_std_error(&err->mgr);
  err->mgr.error_exit = JpegErrorExit;
  err->mgr.output_message = JpegQuiet;
  err->message[0] = '\0';
}

// Decodes into *pixels (interleaved, *components per pixel). False with err->message set
// on failure, including data that libjpeg could only decode with warnings.
bool DecodeJpeg(std::FILE* file, int64_t file_bytes, bool grayscale,
                std::vector<unsigned char>* pixels, int64_t* width, int64_t* height,
                int* components, JpegError* err) {
  jpeg_decompress_struct cinfo;
  InitJpegError(err);
  cinfo.err = &err->mgr;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, file);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    std::snprintf(err->message, sizeof(err->message), "CMYK JPEGs are not supported");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const int64_t declared = static_cast<int64_t>(cinfo.image_width) * cinfo.image_height;
  if (file_bytes >= 0 && declared > kMaxJpegPixelsPerByte * file_bytes) {
    std::snprintf(err->message, sizeof(err->message),
                  "the header declares %u x %u pixels, more than a %lld-byte JPEG can encode",
                  cinfo.image_width, cinfo.image_height, static_cast<long long>(file_bytes));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = grayscale ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  *width = cinfo.output_width;
  *height = cinfo.output_height;
  *components = cinfo.output_components;
  pixels->assign(static_cast<size_t>(*width * *height * *components), 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels->data() + static_cast<size_t>(cinfo.output_scanline) *
                                        static_cast<size_t>(*width * *components);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  const long warnings = err->mgr.num_warnings;
  if (warnings > 0) {
    (*err->mgr.format_message)(reinterpret_cast<j_common_ptr>(&cinfo), err->message);
  }
  jpeg_destroy_decompress(&cinfo);
  return warnings == 0;
}

bool EncodeJpeg(std::FILE* file, const unsigned char* pixels, int64_t width, int64_t height,
                int components, int quality, JpegError* err) {
  jpeg_compress_struct cinfo;
  InitJpegError(err);
  cinfo.err = &err->mgr;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg's API takes non-const rows; it does not write through them.
    JSAMPROW row = const_cast<unsigned char*>(pixels) +
                   static_cast<size_t>(cinfo.next_scanline) * static_cast<size_t>(width * components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// The process's umask, read without changing it (umask(2) would set it for every thread
// for a moment): Linux reports it in /proc/self/status since 4.7; 022 where it does not.
mode_t CurrentUmask() {
  FilePtr status(std::fopen("/proc/self/status", "r"));
  if (status != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), status.get()) != nullptr) {
      unsigned int mask = 0;
      if (std::sscanf(line, "Umask: %o", &mask) == 1) return static_cast<mode_t>(mask);
    }
  }
  return 022;
}

// Writes `path` all or nothing: the encoder writes into a new file of a unique name in
// the same directory (mkstemp), which is flushed, fsync'd and renamed over `path` only
// once complete, so a reader sees the old file or the new one, never a part of either.
// On any failure the temporary file is removed and `path` is untouched. A `path` that
// exists and is not a regular file (directory, device, fifo, socket) is refused. A
// symbolic link is followed to the file it names, which is replaced (the link stays), as
// writing through fopen did; a dangling one is refused. A new file gets the mode fopen
// would give it (0666 less the umask); a replaced one keeps its mode.
// `encode` returns false with its message in *error when it fails.
template <class Encode>
absl::Status WriteFileAtomically(const std::string& path, const char* kind, Encode encode) {
  struct stat target;
  bool exists = false;
  if (::lstat(path.c_str(), &target) == 0) {
    if (S_ISLNK(target.st_mode)) {
      char resolved[PATH_MAX];
      if (::realpath(path.c_str(), resolved) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("cannot write ", kind, " '", path,
                                                       "': it is a symbolic link that ",
                                                       "cannot be resolved (",
                                                       std::strerror(errno), ")"));
      }
      return WriteFileAtomically(std::string(resolved), kind, encode);
    }
    if (!S_ISREG(target.st_mode)) {
      const char* what = S_ISDIR(target.st_mode)    ? "a directory"
                         : S_ISFIFO(target.st_mode) ? "a fifo"
                         : S_ISCHR(target.st_mode) || S_ISBLK(target.st_mode) ? "a device"
                         : S_ISSOCK(target.st_mode) ? "a socket"
                                                    : "not a regular file";
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", kind, " '", path,
                                                     "': it exists and is ", what,
                                                     "; only regular files are replaced"));
    }
    exists = true;
  } else if (errno != ENOENT) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", kind, " '", path, "': ", std::strerror(errno)));
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // "." + name + ".XXXXXX", the name cut so the whole stays within a file name's 255
  // bytes: a valid 250-byte name must not fail for its temporary's sake.
  const std::string stem = base.substr(0, std::min<size_t>(base.size(), 255 - 8));
  std::string temp = (slash == std::string::npos ? std::string() : dir) + "." + stem + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create a temporary file beside ", kind,
                                               " '", path, "': ", std::strerror(errno)));
  }
  std::string error;
  auto fail = [&](const std::string& why) {
    ::unlink(temp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", kind, " '", path, "': ", why,
                                               "; the old file, if any, is unchanged"));
  };
  const mode_t mode = exists ? (target.st_mode & 07777) : (0666 & ~CurrentUmask());
  if (::fchmod(fd, mode) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return fail(why);
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return fail(why);
  }
  const bool encoded = encode(file, &error);
  // Flush and sync before the rename, so the name never points at unwritten data.
  bool ok = encoded && std::fflush(file) == 0 && !std::ferror(file);
  if (ok && ::fsync(fd) != 0) ok = false;
  const int saved_errno = errno;
  if (std::fclose(file) != 0) ok = false;
  if (!ok) return fail(!encoded ? error : std::strerror(errno != 0 ? errno : saved_errno));
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail(std::strerror(errno));
  // Make the rename itself durable; a directory that cannot be synced is not an error.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
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
  // libpng's simplified API converts every PNG kind (palette, 16-bit) to 8-bit samples,
  // asked for as they are encoded: 16-bit files without a gAMA or sRGB chunk are taken as
  // sRGB-encoded (PNG_IMAGE_FLAG_16BIT_sRGB; by default libpng would take them as linear
  // and re-encode them, 0x8000 reading as 188 / 255), and the alpha channel is read
  // rather than composed onto the (zeroed) buffer, then dropped. Luma is ours (BT.601
  // weights on the encoded values, as a JPEG's Y): libpng's own uses Rec. 709 weights in
  // linear light. Gray files are read as gray (no weights).
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  image.format = colour ? PNG_FORMAT_RGBA : PNG_FORMAT_GA;
  const int stride = colour ? 4 : 2;
  const int channels = grayscale ? 1 : 3;
  if (image.width == 0 || image.height == 0 || image.width > 65536 || image.height > 65536) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("PNG '", path, "' has unsupported size ",
                                                   image.width, " x ", image.height));
  }
  const int64_t file_bytes = FileBytes(path);
  if (file_bytes >= 0 && static_cast<int64_t>(image.width) * image.height >
                             kMaxPngPixelsPerByte * file_bytes) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat(
        "PNG '", path, "': the header declares ", image.width, " x ", image.height,
        " pixels, more than a ", file_bytes, "-byte PNG can encode"));
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
      for (int64_t j = 0; j < w; ++j) {
        const png_byte* px = buffer.data() + (i * w + j) * stride;
        if (!colour) {
          m(i, j) = px[0] / 255.0;  // gray replicated to every channel asked for
        } else if (grayscale) {
          m(i, j) = (0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]) / 255.0;
        } else {
          m(i, j) = px[c] / 255.0;
        }
      }
    }
    out.channels.push_back(std::move(m));
  }
  return out;
}

absl::Status WritePng(const std::string& path, const std::vector<ImageMatrix>& channels,
                      double lo, double hi) {
  std::vector<png_byte> buffer;
  if (absl::Status s = QuantiseChannels(channels, lo, hi, "WritePng", &buffer); !s.ok()) return s;
  const int64_t h = channels[0].rows(), w = channels[0].cols();
  const int nc = static_cast<int>(channels.size());
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = nc == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  // Not png_image_write_to_file: it writes the target in place and removes it on failure.
  return WriteFileAtomically(path, "PNG", [&](std::FILE* file, std::string* error) {
    if (!png_image_write_to_stdio(&image, file, 0, buffer.data(), 0, nullptr)) {
      *error = image.message;
      return false;
    }
    return true;
  });
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, "file", [&](std::FILE* file, std::string* error) {
    if (std::fwrite(text.data(), 1, text.size(), file) != text.size()) {
      *error = std::strerror(errno);
      return false;
    }
    return true;
  });
}

absl::StatusOr<Image> ReadJpeg(const std::string& path, bool grayscale) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open JPEG '", path, "'"));
  }
  std::vector<unsigned char> pixels;
  int64_t w = 0, h = 0;
  int nc = 0;
  JpegError err;
  if (!DecodeJpeg(file.get(), FileBytes(path), grayscale, &pixels, &w, &h, &nc, &err)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot decode JPEG '", path, "': ", err.message));
  }
  if (w < 1 || h < 1 || (nc != 1 && nc != 3)) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG '", path, "' decodes to an unsupported ",
                                                   w, " x ", h, " x ", nc, " image"));
  }
  Image out;
  for (int c = 0; c < nc; ++c) {
    ImageMatrix m(h, w);
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < w; ++j) m(i, j) = pixels[(i * w + j) * nc + c] / 255.0;
    }
    out.channels.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<Image> ReadImage(const std::string& path, bool grayscale) {
  unsigned char magic[8] = {0};
  {
    FilePtr file(std::fopen(path.c_str(), "rb"));
    if (file == nullptr) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
    if (std::fread(magic, 1, sizeof(magic), file.get()) != sizeof(magic)) {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "' is too short for an image"));
    }
  }
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (std::memcmp(magic, kPng, sizeof(kPng)) == 0) return ReadPng(path, grayscale);
  if (magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff) return ReadJpeg(path, grayscale);
  return absl::InvalidArgumentError(
      absl::StrCat("'", path, "' is neither a PNG nor a JPEG file (by its signature)"));
}

absl::Status WriteJpeg(const std::string& path, const std::vector<ImageMatrix>& channels,
                       int quality, double lo, double hi) {
  if (quality < 1 || quality > 100) {
    return absl::InvalidArgumentError(absl::StrCat("WriteJpeg: quality ", quality, " not in 1..100"));
  }
  std::vector<unsigned char> pixels;
  if (absl::Status s = QuantiseChannels(channels, lo, hi, "WriteJpeg", &pixels); !s.ok()) return s;
  if (channels[0].rows() > 65500 || channels[0].cols() > 65500) {
    return absl::InvalidArgumentError("WriteJpeg: JPEG images are at most 65500 pixels a side");
  }
  return WriteFileAtomically(path, "JPEG", [&](std::FILE* file, std::string* error) {
    JpegError err;
    if (!EncodeJpeg(file, pixels.data(), channels[0].cols(), channels[0].rows(),
                    static_cast<int>(channels.size()), quality, &err)) {
      *error = err.message;
      return false;
    }
    return true;
  });
}

}  // namespace inr
}  // namespace gpe
