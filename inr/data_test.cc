#include "inr/data.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "png.h"

namespace gpe {
namespace inr {
namespace {

constexpr double kPi = 3.14159265358979323846;

TEST(Synthetic, MatchesLimAppendixD1AtKnownPixels) {
  const int64_t n = 8;
  const std::vector<double> axis = GridAxis(n);
  EXPECT_DOUBLE_EQ(axis[0], -1.0 + 1.0 / 8);
  EXPECT_DOUBLE_EQ(axis[7], 1.0 - 1.0 / 8);
  const ImageMatrix radial = SyntheticImage(SyntheticTask::kRadial, n);
  const ImageMatrix spiral = SyntheticImage(SyntheticTask::kSpiral, n, /*signed_values=*/true);
  const std::vector<ImageMatrix> field = SyntheticVectorField(SyntheticTask::kSpiral, n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double x = axis[j], y = axis[i], r = std::hypot(x, y), th = std::atan2(y, x);
      // Closed forms evaluated independently; both sides are a few libm calls apart.
      EXPECT_NEAR(radial(i, j), std::abs(std::sin(15 * std::sqrt(r))), 1e-15);
      const double s = std::sin(30 * std::sqrt(0.1 * r) + th);
      EXPECT_NEAR(spiral(i, j), s, 1e-14);
      EXPECT_NEAR(field[0](i, j), s * x / r, 1e-14);
      EXPECT_NEAR(field[1](i, j), s * y / r, 1e-14);
    }
  }
  // The Radial image is rotation invariant: pixels related by a quarter turn agree.
  EXPECT_NEAR(radial(1, 2), radial(2, n - 2), 1e-15);
  (void)kPi;
}

TEST(Splits, RandomSplitPartitionsAndIsSeeded) {
  absl::StatusOr<Split> s = RandomSplit(1000, 0.05, 0.4, 7);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->train.size(), 50u);
  EXPECT_EQ(s->validation.size(), 400u);
  EXPECT_EQ(s->test.size(), 550u);
  std::set<int64_t> all(s->train.begin(), s->train.end());
  all.insert(s->validation.begin(), s->validation.end());
  all.insert(s->test.begin(), s->test.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(RandomSplit(1000, 0.05, 0.4, 7)->train, s->train);
  EXPECT_NE(RandomSplit(1000, 0.05, 0.4, 8)->train, s->train);
  EXPECT_FALSE(RandomSplit(10, 0.7, 0.4, 1).ok());
  EXPECT_FALSE(RandomSplit(-1, 0.1, 0.1, 1).ok());
}

TEST(Splits, RegularGridTrainsOnEveryOtherRowAndColumn) {
  const Split s = RegularGridSplit(5, 4);
  EXPECT_EQ(s.train, (std::vector<int64_t>{0, 2, 8, 10, 16, 18}));
  EXPECT_EQ(s.train.size() + s.test.size(), 20u);
}

TEST(Png, RoundTripsGrayAndRgbToEightBits) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  ImageMatrix a(3, 5), b(3, 5), c(3, 5);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      a(i, j) = (i * 5 + j) / 14.0;
      b(i, j) = 1.0 - a(i, j);
      c(i, j) = 0.5;
    }
  }
  ASSERT_TRUE(WritePng(dir + "/rgb.png", {a, b, c}).ok());
  absl::StatusOr<Image> rgb = ReadPng(dir + "/rgb.png", false);
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  ASSERT_EQ(rgb->channels.size(), 3u);
  // 8-bit quantisation: at most half a step, 0.5/255.
  EXPECT_LE((rgb->channels[0] - a).cwiseAbs().maxCoeff(), 0.5 / 255 + 1e-12);
  EXPECT_LE((rgb->channels[1] - b).cwiseAbs().maxCoeff(), 0.5 / 255 + 1e-12);
  ASSERT_TRUE(WritePng(dir + "/gray.png", {a}, -1.0, 1.0).ok());
  absl::StatusOr<Image> gray = ReadPng(dir + "/gray.png", true);
  ASSERT_TRUE(gray.ok());
  EXPECT_LE((gray->channels[0] - (a.array() + 1.0).matrix() / 2.0).cwiseAbs().maxCoeff(),
            0.5 / 255 + 1e-12);
  EXPECT_FALSE(ReadPng(dir + "/missing.png", true).ok());
  EXPECT_FALSE(WritePng(dir + "/x.png", {a, b}).ok());
  EXPECT_FALSE(WritePng(dir + "/x.png", {a}, 1.0, 1.0).ok());
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A smooth colour image (no edges, so JPEG's quantisation and 4:2:0 chroma subsampling
// lose little), 37 x 29 so that partial 8 x 8 (and 16 x 16 chroma) blocks are exercised.
std::vector<ImageMatrix> SmoothRgb() {
  std::vector<ImageMatrix> rgb(3, ImageMatrix(37, 29));
  for (int64_t i = 0; i < 37; ++i) {
    for (int64_t j = 0; j < 29; ++j) {
      rgb[0](i, j) = 0.5 + 0.4 * std::sin(i / 9.0);
      rgb[1](i, j) = 0.5 + 0.4 * std::cos(j / 7.0);
      rgb[2](i, j) = 0.3 + 0.2 * (i + j) / 66.0;
    }
  }
  return rgb;
}

// Writes a w x 1 PNG of the given libpng format from raw samples (8- or 16-bit).
void WriteRawPng(const std::string& path, uint32_t format, int w, const void* samples) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = 1;
  image.format = format;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, samples, 0, nullptr))
      << image.message;
}

// The kinds the reader's docs promise, read as they are encoded: a 16-bit gray file
// without gAMA / sRGB (as OpenCV, imageio and pypng write them) scaled, not re-encoded
// from "linear" (0x8000 read 188 / 255 before); alpha dropped, not composed onto black
// ((255, 255, 255, 0) read 0 before); colour to gray by BT.601 weights on the encoded
// values, as a JPEG's luma (libpng's Rec. 709 in linear light gave pure red 0.50, not
// 0.299).
// A 16-bit gray w x 1 PNG with no gAMA or sRGB chunk (libpng's low-level writer; its
// simplified one tags 16-bit data as linear).
void WriteGray16NoGamma(const std::string& path, const std::vector<uint16_t>& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  ASSERT_TRUE(png != nullptr && info != nullptr);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    FAIL() << "libpng error writing " << path;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(v.size()), 1, 16, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<png_byte> row(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {  // big-endian samples
    row[2 * i] = static_cast<png_byte>(v[i] >> 8);
    row[2 * i + 1] = static_cast<png_byte>(v[i] & 0xFF);
  }
  png_write_row(png, row.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

TEST(Png, SixteenBitAlphaAndLumaAreReadAsEncoded) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  WriteGray16NoGamma(dir + "/gray16.png", {0x0000, 0x8000, 0xFFFF});
  absl::StatusOr<Image> g = ReadPng(dir + "/gray16.png", true);
  ASSERT_TRUE(g.ok()) << g.status();
  // 16 bits to 8 (libpng's scaling: 0x8000 -> 128), within one 8-bit step of v / 65535.
  EXPECT_NEAR(g->channels[0](0, 1), 0.5, 1.0 / 255);
  EXPECT_EQ(g->channels[0](0, 0), 0.0);
  EXPECT_EQ(g->channels[0](0, 2), 1.0);
  const uint8_t rgba[8] = {255, 255, 255, 0, 255, 255, 255, 128};
  WriteRawPng(dir + "/rgba.png", PNG_FORMAT_RGBA, 2, rgba);
  for (bool gray : {false, true}) {
    absl::StatusOr<Image> a = ReadPng(dir + "/rgba.png", gray);
    ASSERT_TRUE(a.ok()) << a.status();
    for (const ImageMatrix& m : a->channels) {
      EXPECT_NEAR(m(0, 0), 1.0, 1e-12) << gray;
      EXPECT_NEAR(m(0, 1), 1.0, 1e-12) << gray;
    }
  }
  const uint8_t rgb[9] = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  WriteRawPng(dir + "/primaries.png", PNG_FORMAT_RGB, 3, rgb);
  absl::StatusOr<Image> y = ReadPng(dir + "/primaries.png", true);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NEAR(y->channels[0](0, 0), 0.299, 1e-12);
  EXPECT_NEAR(y->channels[0](0, 1), 0.587, 1e-12);
  EXPECT_NEAR(y->channels[0](0, 2), 0.114, 1e-12);
  // Gray files read as RGB: the gray in every channel.
  absl::StatusOr<Image> g3 = ReadPng(dir + "/gray16.png", false);
  ASSERT_TRUE(g3.ok());
  ASSERT_EQ(g3->channels.size(), 3u);
  for (const ImageMatrix& m : g3->channels) EXPECT_EQ(m(0, 1), g->channels[0](0, 1));
}

TEST(Jpeg, RoundTripsASmoothRgbImageClosely) {
  const std::vector<ImageMatrix> rgb = SmoothRgb();
  const std::string path = TempPath("smooth.jpg");
  ASSERT_TRUE(WriteJpeg(path, rgb, 95).ok());
  absl::StatusOr<Image> back = ReadJpeg(path, /*grayscale=*/false);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->channels.size(), 3u);
  ASSERT_EQ(back->rows(), 37);
  ASSERT_EQ(back->cols(), 29);
  // Quality 95 on smooth content. 4:2:0 subsampling averages chroma over 2 x 2 pixels;
  // red changes by up to 0.4 / 9 (~11 levels) a row, so half a row's change (~6 levels)
  // plus quantisation (measured max 6.5 levels): 10 / 255 max and 2 / 255 mean, while a
  // channel swap, transposition or wrong scaling (errors of 0.1 or more) fails.
  for (int c = 0; c < 3; ++c) {
    const ImageMatrix err = (back->channels[c] - rgb[c]).cwiseAbs();
    EXPECT_LE(err.maxCoeff(), 10.0 / 255) << "channel " << c;
    EXPECT_LE(err.mean(), 2.0 / 255) << "channel " << c;
  }
  // ReadImage recognises the file by its signature, whatever its name.
  const std::string renamed = TempPath("smooth_without_extension");
  ASSERT_EQ(std::rename(path.c_str(), renamed.c_str()), 0);
  absl::StatusOr<Image> again = ReadImage(renamed, false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->channels[1], back->channels[1]);
}

TEST(Jpeg, GrayscaleIsTheLumaAndGrayFilesReadAsRgb) {
  const std::vector<ImageMatrix> rgb = SmoothRgb();
  const std::string path = TempPath("luma.jpg");
  ASSERT_TRUE(WriteJpeg(path, rgb, 95).ok());
  absl::StatusOr<Image> colour = ReadJpeg(path, false);
  absl::StatusOr<Image> gray = ReadJpeg(path, true);
  ASSERT_TRUE(colour.ok() && gray.ok());
  ASSERT_EQ(gray->channels.size(), 1u);
  // BT.601 luma of the decoded RGB; libjpeg takes Y before its colour conversion, so the
  // two differ by the RGB rounding: within 2 / 255.
  const ImageMatrix luma = 0.299 * colour->channels[0] + 0.587 * colour->channels[1] +
                           0.114 * colour->channels[2];
  EXPECT_LE((gray->channels[0] - luma).cwiseAbs().maxCoeff(), 2.0 / 255);

  const std::string gray_path = TempPath("gray.jpg");
  ASSERT_TRUE(WriteJpeg(gray_path, {rgb[0]}, 95).ok());
  absl::StatusOr<Image> as_rgb = ReadJpeg(gray_path, false);
  ASSERT_TRUE(as_rgb.ok()) << as_rgb.status();
  ASSERT_EQ(as_rgb->channels.size(), 3u);
  EXPECT_EQ(as_rgb->channels[0], as_rgb->channels[2]);  // gray expands to equal channels
  EXPECT_LE((as_rgb->channels[0] - rgb[0]).cwiseAbs().maxCoeff(), 6.0 / 255);
}

TEST(Jpeg, BadFilesAndArgumentsAreRefused) {
  const std::vector<ImageMatrix> rgb = SmoothRgb();
  const std::string path = TempPath("whole.jpg");
  ASSERT_TRUE(WriteJpeg(path, rgb, 90).ok());
  // A truncated file: libjpeg can only pad it with gray, which is reported, not returned.
  std::string bytes;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, got);
    std::fclose(f);
  }
  auto write_bytes = [](const std::string& p, const std::string& b) {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
  };
  const std::string truncated = TempPath("truncated.jpg");
  write_bytes(truncated, bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(ReadJpeg(truncated, false).ok());
  const std::string garbage = TempPath("garbage.jpg");
  write_bytes(garbage, std::string("\xff\xd8\xff") + std::string(200, 'x'));
  EXPECT_FALSE(ReadImage(garbage, false).ok());
  const std::string text = TempPath("text.jpg");
  write_bytes(text, "this is not an image at all");
  EXPECT_FALSE(ReadImage(text, false).ok());
  EXPECT_FALSE(ReadImage(TempPath("missing.jpg"), false).ok());
  EXPECT_FALSE(ReadJpeg(TempPath("missing.jpg"), false).ok());
  EXPECT_FALSE(WriteJpeg(path, rgb, 0).ok());
  EXPECT_FALSE(WriteJpeg(path, rgb, 101).ok());
  EXPECT_FALSE(WriteJpeg(path, {rgb[0], rgb[1]}, 90).ok());
  EXPECT_FALSE(WriteJpeg(TempPath("no/such/dir.jpg"), rgb, 90).ok());
}

std::string ReadBytes(const std::string& path) {
  std::string bytes;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return bytes;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, got);
  std::fclose(f);
  return bytes;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// CRC-32 of PNG chunks (ISO 3309 / ITU-T V.42 polynomial, reflected), bit by bit.
uint32_t Crc32(const std::string& data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char byte : data) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

void PutBigEndian(std::string* s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xff);
}

TEST(Images, TinyFilesDeclaringHugeImagesAreRefusedBeforeAllocating) {
  // A valid 8 x 8 file whose header then claims 60000 x 60000 pixels (3.6e9, 86 GB as
  // doubles): refused from the file's size alone, with the declared size in the message.
  std::vector<ImageMatrix> gray = {ImageMatrix::Constant(8, 8, 0.5)};
  const std::string png = TempPath("small.png");
  ASSERT_TRUE(WritePng(png, gray).ok());
  std::string bytes = ReadBytes(png);
  ASSERT_GT(bytes.size(), 33u);
  ASSERT_EQ(bytes.substr(12, 4), "IHDR");
  PutBigEndian(&bytes, 16, 60000, 4);  // width
  PutBigEndian(&bytes, 20, 60000, 4);  // height
  PutBigEndian(&bytes, 29, Crc32(bytes.substr(12, 17)), 4);  // chunk type + data
  const std::string huge_png = TempPath("huge.png");
  WriteBytes(huge_png, bytes);
  absl::StatusOr<Image> r = ReadPng(huge_png, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("declares 60000 x 60000"), std::string::npos)
      << r.status().message();

  const std::string jpg = TempPath("small.jpg");
  ASSERT_TRUE(WriteJpeg(jpg, gray, 90).ok());
  bytes = ReadBytes(jpg);
  size_t sof = std::string::npos;
  for (size_t i = 0; i + 9 < bytes.size(); ++i) {
    if (static_cast<unsigned char>(bytes[i]) == 0xff &&
        static_cast<unsigned char>(bytes[i + 1]) == 0xc0) {
      sof = i;
      break;
    }
  }
  ASSERT_NE(sof, std::string::npos) << "no baseline SOF0 marker";
  PutBigEndian(&bytes, sof + 5, 60000, 2);  // height
  PutBigEndian(&bytes, sof + 7, 60000, 2);  // width
  const std::string huge_jpg = TempPath("huge.jpg");
  WriteBytes(huge_jpg, bytes);
  r = ReadJpeg(huge_jpg, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("declares 60000 x 60000"), std::string::npos)
      << r.status().message();
  // The unpatched files still read (the bounds are far above real images).
  EXPECT_TRUE(ReadPng(png, true).ok());
  EXPECT_TRUE(ReadJpeg(jpg, true).ok());
}

TEST(Images, ReadImageReadsPngsAsReadPngDoes) {
  const std::vector<ImageMatrix> rgb = SmoothRgb();
  const std::string path = TempPath("dispatch.png");
  ASSERT_TRUE(WritePng(path, rgb).ok());
  absl::StatusOr<Image> direct = ReadPng(path, true);
  absl::StatusOr<Image> dispatched = ReadImage(path, true);
  ASSERT_TRUE(direct.ok() && dispatched.ok());
  EXPECT_EQ(direct->channels[0], dispatched->channels[0]);
}


// ---- All-or-nothing writes (issue 24) ----

std::string FileBytesOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::set<std::string> DirectoryEntries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// A fresh, empty directory under TEST_TMPDIR.
std::string FreshDirectory(const std::string& name) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Uniform noise compresses to ~1 byte per pixel and channel: 64 x 64 RGB is ~12 KB as
// PNG or JPEG, far above the file-size limit below.
std::vector<ImageMatrix> NoiseRgb() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<ImageMatrix> rgb(3, ImageMatrix(64, 64));
  for (auto& m : rgb) {
    for (int64_t i = 0; i < 64; ++i) {
      for (int64_t j = 0; j < 64; ++j) m(i, j) = unit(rng);
    }
  }
  return rgb;
}

// Forces a write to fail part-way, as a full disk would: RLIMIT_FSIZE (which binds root
// too) makes write(2) fail with EFBIG past `bytes`; SIGXFSZ is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_;
  sighandler_t old_handler_;
};

// Before the fix, a failed PNG write removed the file it was to replace (libpng's
// png_image_write_to_file deletes its target on error) and a failed JPEG write left it
// truncated (it was opened "wb" first): here the old PNG was gone (read back empty) and
// the old JPEG held the first bytes of the new one; both gave Internal.
TEST(ImageWrite, AFailedWriteLeavesTheOldFileWholeAndNoTemporaryFile) {
  const std::string dir = FreshDirectory("atomic_failed_write");
  const std::vector<ImageMatrix> old_image = SmoothRgb(), new_image = NoiseRgb();
  for (const bool png : {true, false}) {
    const std::string path = dir + (png ? "/image.png" : "/image.jpg");
    auto write = [&](const std::vector<ImageMatrix>& image) {
      return png ? WritePng(path, image) : WriteJpeg(path, image, 95);
    };
    ASSERT_TRUE(write(old_image).ok());
    const std::string old_bytes = FileBytesOf(path);
    ASSERT_GT(old_bytes.size(), 100u);
    absl::Status failed;
    {
      FileSizeLimit limit(4096);
      failed = write(new_image);
    }
    EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
    EXPECT_NE(failed.message().find("unchanged"), std::string::npos) << failed;
    EXPECT_EQ(FileBytesOf(path), old_bytes) << path;
    // Once the limit is lifted the same write succeeds and replaces the file whole.
    ASSERT_TRUE(write(new_image).ok());
    EXPECT_NE(FileBytesOf(path), old_bytes);
    EXPECT_TRUE((png ? ReadPng(path, false) : ReadJpeg(path, false)).ok());
  }
  EXPECT_EQ(DirectoryEntries(dir), (std::set<std::string>{"image.jpg", "image.png"}));
}

// A target that is not a regular file is refused and left as it was. Before the fix a
// directory gave Internal ("Is a directory") and a fifo hung the writer (fopen of a fifo
// with no reader blocks).
TEST(ImageWrite, TargetsThatAreNotRegularFilesAreRefused) {
  const std::string dir = FreshDirectory("atomic_not_regular");
  const std::vector<ImageMatrix> image = SmoothRgb();
  const std::string sub = dir + "/sub.png", fifo = dir + "/fifo.jpg";
  ASSERT_TRUE(std::filesystem::create_directory(sub));
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const absl::Status to_dir = WritePng(sub, image);
  EXPECT_EQ(to_dir.code(), absl::StatusCode::kInvalidArgument) << to_dir;
  EXPECT_NE(to_dir.message().find("directory"), std::string::npos) << to_dir;
  const absl::Status to_fifo = WriteJpeg(fifo, image, 90);
  EXPECT_EQ(to_fifo.code(), absl::StatusCode::kInvalidArgument) << to_fifo;
  EXPECT_NE(to_fifo.message().find("fifo"), std::string::npos) << to_fifo;
  EXPECT_TRUE(std::filesystem::is_directory(sub));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_EQ(DirectoryEntries(dir), (std::set<std::string>{"fifo.jpg", "sub.png"}));
}

// A symbolic link is followed: the file it names is replaced, the link stays a link.
// A replaced file keeps its mode; a new one gets 0666 less the umask.
// A file name of 250 bytes (within the 255 a name may have) is written: the temporary
// beside it ("." + name + ".XXXXXX") is cut to fit, not refused with ENAMETOOLONG; and
// the text writer replaces a file whole.
TEST(ImageWrite, LongNamesAndTextFiles) {
  const std::string dir = FreshDirectory("atomic_long");
  const std::string name = std::string(246, 'n') + ".png";
  ASSERT_EQ(name.size(), 250u);
  ASSERT_TRUE(WritePng(dir + "/" + name, SmoothRgb()).ok());
  EXPECT_TRUE(ReadPng(dir + "/" + name, false).ok());
  ASSERT_TRUE(WriteTextFile(dir + "/t.md", "first, longer text\n").ok());
  ASSERT_TRUE(WriteTextFile(dir + "/t.md", "second\n").ok());
  std::ifstream in(dir + "/t.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            2);  // no temporary left behind
}

TEST(ImageWrite, LinksAreFollowedAndModesKept) {
  const std::string dir = FreshDirectory("atomic_links");
  const std::vector<ImageMatrix> image = SmoothRgb();
  const std::string real = dir + "/real.png", link = dir + "/link.png";
  ASSERT_TRUE(WritePng(real, {image[0]}).ok());
  ASSERT_EQ(chmod(real.c_str(), 0640), 0);
  std::filesystem::create_symlink("real.png", link);
  ASSERT_TRUE(WritePng(link, image).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  absl::StatusOr<Image> read = ReadPng(real, false);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->channels.size(), 3u);
  struct stat st;
  ASSERT_EQ(stat(real.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  const mode_t mask = umask(022);
  umask(mask);
  const std::string fresh = dir + "/fresh.png";
  ASSERT_TRUE(WritePng(fresh, image).ok());
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
  EXPECT_EQ(DirectoryEntries(dir), (std::set<std::string>{"fresh.png", "link.png", "real.png"}));
}

}  // namespace
}  // namespace inr
}  // namespace gpe
