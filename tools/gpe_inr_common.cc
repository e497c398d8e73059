#include "tools/gpe_inr_common.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "inr/data.h"

namespace gpe {
namespace tools {

using inr::ImageMatrix;

std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (cwd == nullptr || path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(cwd) / path).string();
}

std::string DefaultOut(const char* name) {
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return absl::StrCat(ws != nullptr ? ws : ".", "/gpe_out/", name);
}

bool ParseInt(const std::string& s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
    return false;
  }
  *out = v;
  return true;
}

int BadArgs(const char* command, const std::string& message, const char* usage) {
  std::fprintf(stderr, "gpe inr %s: %s\n\n%s", command, message.c_str(), usage);
  return 2;
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "gpe inr %s: %s\n", command, std::string(status.message()).c_str());
  return 1;
}

MeanStd Summarise(const std::vector<double>& v) {
  MeanStd r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) r.std += (x - r.mean) * (x - r.mean);
    r.std = std::sqrt(r.std / static_cast<double>(v.size() - 1));
  }
  return r;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  return inr::WriteTextFile(path, text);  // all or nothing: the old file stays whole
}

ImageMatrix ResampleSquare(const ImageMatrix& c, int64_t n) {
  if (c.rows() == n && c.cols() == n) return c;
  ImageMatrix out(n, n);
  if (c.rows() % n == 0 && c.cols() % n == 0) {
    const int64_t br = c.rows() / n, bc = c.cols() / n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) out(i, j) = c.block(i * br, j * bc, br, bc).mean();
    }
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t si = std::min<int64_t>(c.rows() - 1, (2 * i + 1) * c.rows() / (2 * n));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t sj = std::min<int64_t>(c.cols() - 1, (2 * j + 1) * c.cols() / (2 * n));
      out(i, j) = c(si, sj);
    }
  }
  return out;
}

}  // namespace tools
}  // namespace gpe
