// What the `gpe inr` commands share: paths under `bazel run`, argument parsing and exit
// codes, summary statistics, output files and image resampling.
#ifndef TOOLS_GPE_INR_COMMON_H_
#define TOOLS_GPE_INR_COMMON_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inr/data.h"

namespace gpe {
namespace tools {

// Under `bazel run` the working directory is the runfiles tree: relative paths the user
// typed are resolved against BUILD_WORKING_DIRECTORY (the shell's directory), and the
// default output goes to <workspace>/gpe_out/<name>, as the other gpe commands do.
std::string UserPath(const std::string& path);
std::string DefaultOut(const char* name);

// The whole of `s` as an integer (ParseInt) or a finite number (ParseDouble) in
// [lo, hi]; false, *out untouched, otherwise.
bool ParseInt(const std::string& s, long long lo, long long hi, long long* out);
bool ParseDouble(const std::string& s, double lo, double hi, double* out);

// Prints "gpe inr <command>: <message>" and the usage on stderr; returns 2.
int BadArgs(const char* command, const std::string& message, const char* usage);
// Prints "gpe inr <command>: <status message>" on stderr; returns 1.
int Fail(const char* command, const absl::Status& status);

struct MeanStd {
  double mean = 0, std = 0;
};
// Sample mean and (n - 1) standard deviation (0 for one value).
MeanStd Summarise(const std::vector<double>& v);

// Wall seconds since `start`.
double Seconds(std::chrono::steady_clock::time_point start);

absl::Status MakeDir(const std::string& dir);
absl::Status WriteText(const std::string& path, const std::string& text);

// An image channel resampled to n x n: block means when the size is a multiple of n
// (e.g. 512 -> 256), nearest pixel centres otherwise.
inr::ImageMatrix ResampleSquare(const inr::ImageMatrix& c, int64_t n);

}  // namespace tools
}  // namespace gpe

#endif  // TOOLS_GPE_INR_COMMON_H_
