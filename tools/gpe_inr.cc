#include "tools/gpe_inr.h"

#include <cstdio>
#include <string>
#include <vector>

#include "tools/gpe_inr_lim_table2.h"
#include "tools/gpe_inr_volume.h"
#include "tools/gpe_inr_zheng_table1.h"

namespace gpe {
namespace tools {
namespace {

constexpr char kInrUsage[] =
    "usage: gpe inr COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  lim-table2     Lim et al.'s Table 2: an MLP (3 x 128, ReLU, 500 full-batch Adam\n"
    "                 steps) on 5% random pixels of a 256 x 256 grid with no encoding,\n"
    "                 T x T and SO(2) encodings; test MSE mean and std over seeds, for\n"
    "                 the Radial and Spiral images and vector fields (and Cameraman and\n"
    "                 Retina when given). Writes table2.md and PNGs.\n"
    "  zheng-table1   Zheng et al.'s Table 1: simple embedder + MLP (Adam) vs complex\n"
    "                 (Kronecker) embedder + linear layer by Adam vs in closed form, on\n"
    "                 the [::2] grid of size x size images; test PSNR and time. Images\n"
    "                 are the files given (PNG or JPEG), else the analytic Radial and\n"
    "                 Spiral images. Writes table1.md and PNGs.\n"
    "  volume         an analytic volume fitted by the complex embedder in closed form\n"
    "                 (3D mode-n products) and, slice by slice, by the blended fit of\n"
    "                 random samples; PSNR and time.\n"
    "\n"
    "Run 'gpe inr COMMAND --help' for a command's options.\n";

}  // namespace

int RunInrCommand(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "gpe inr: give a command\n\n%s", kInrUsage);
    return 2;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kInrUsage, stdout);
    return 0;
  }
  if (command == "lim-table2") return RunLimTable2(rest);
  if (command == "zheng-table1") return RunZhengTable1(rest);
  if (command == "volume") return RunVolume(rest);
  std::fprintf(stderr, "gpe inr: unknown command '%s'\n\n%s", command.c_str(), kInrUsage);
  return 2;
}

}  // namespace tools
}  // namespace gpe
