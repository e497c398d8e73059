// gpe: GroupPE's command-line tool.
//
//   gpe [--quick]       the main job: version, the group laws on random elements, INR fits
//                       of the Spiral image in closed form and by an MLP (PNGs in gpe_out/),
//                       and a short attention benchmark with RoPE, ALiBi and GRAPE-M
//   gpe version         the library version (header and shared library agree); also
//                       gpe --version, gpe -V
//   gpe check-groups [--seed N] [--trials N]
//                       the group laws of every representation, on random elements
//   gpe inr-spiral, inr-image FILE, inr COMMAND, bench, machine   (see kUsage)
//   gpe --help
//
// This file parses the command line and runs the command; each command lives in its own
// file (gpe_check_groups, gpe_separable_fits, gpe_tour, gpe_inr, gpe_bench). At start the
// tool chooses OpenBLAS's kernels where OpenBLAS fell back to generic ones
// (blas_kernels.h): a process-wide choice the library leaves to the program.
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpe/gpe.h"
#include "inr/blas.h"
#include "measure/machine_limits.h"
#include "tools/blas_kernels.h"
#include "tools/gpe_bench.h"
#include "tools/gpe_check_groups.h"
#include "tools/gpe_inr.h"
#include "tools/gpe_inr_common.h"
#include "tools/gpe_separable_fits.h"
#include "tools/gpe_tour.h"

namespace {

namespace t = gpe::tools;

constexpr char kUsage[] =
    "usage: gpe [command] [options]\n"
    "\n"
    "commands:\n"
    "  (none)          the main job: version, group laws, fits of the Spiral image\n"
    "                  (closed form and MLP), a short attention benchmark (RoPE, ALiBi,\n"
    "                  GRAPE-M inside the kernel); PNGs in gpe_out/\n"
    "                    --quick      small sizes (seconds)\n"
    "  version         the library version (also --version, -V)\n"
    "  check-groups    check the group laws of every representation on random elements\n"
    "                    --seed N     random seed (default 1)\n"
    "                    --trials N   random elements per law (default 20, 1..100000)\n"
    "  inr-spiral      fit Lim et al.'s Spiral image in closed form with shifted-basis\n"
    "                  encodings; prints PSNR and time, writes PNGs\n"
    "                    --out DIR    where to write (default <workspace>/gpe_out)\n"
    "  inr-image FILE  the same closed-form fits on a PNG image (per colour channel)\n"
    "                    --gray       convert to grayscale first\n"
    "                    --out DIR    where to write (default <workspace>/gpe_out)\n"
    "  inr COMMAND     the papers' INR experiments: lim-table2, zheng-table1, volume\n"
    "                  ('gpe inr --help')\n"
    "  bench           GroupPE's workloads beside the machine's limits and the peers\n"
    "                  (NumPy from .venv; tools/peers/), measured in one run\n"
    "                    --quick      tiny sizes (a smoke run)\n"
    "                    --no-peers   skip the peers\n"
    "  machine         measure this machine's float32 FMA peak, bfloat16 dot-product\n"
    "                  peak (vdpbf16ps) and triad bandwidth (1 thread and all\n"
    "                  threads): the figures benchmarks divide by\n"
    "  help, --help    this text\n";

int RunVersion() {
  std::printf("GroupPE %s (header %d.%d.%d)\n", gpe_version_string(), GPE_VERSION_MAJOR,
              GPE_VERSION_MINOR, GPE_VERSION_PATCH);
  if (gpe_version() != GPE_VERSION_NUMBER) {
    std::fprintf(stderr, "gpe: library version %d does not match the header's %d\n",
                 gpe_version(), GPE_VERSION_NUMBER);
    return 1;
  }
  return 0;
}

int RunMachine() {
  namespace m = gpe::measure;
  const int all = m::AvailableThreads();
  std::printf("Widest vector ISA: %s, %d hardware threads\n", m::WidestVectorIsa().c_str(), all);
  // The INR solvers' products run on OpenBLAS: its kernel family, as chosen at start.
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("BLAS kernels: %s%s\n\n", gpe::inr::BlasCoreName().c_str(),
              coretype != nullptr ? " (OPENBLAS_CORETYPE set)" : "");
  std::printf("| measure | 1 thread | %d threads |\n|---|---|---|\n", all);
  std::printf("| float32 FMA peak (GFLOP/s) | %.1f | %.1f |\n", m::FmaPeakGflops(1),
              m::FmaPeakGflops(all));
  if (m::HasBf16DotProductInstruction()) {
    std::printf("| bfloat16 dot-product peak, vdpbf16ps (GFLOP/s) | %.1f | %.1f |\n",
                m::Bf16DotPeakGflops(1), m::Bf16DotPeakGflops(all));
  } else {
    std::printf("| bfloat16 dot-product peak, vdpbf16ps (GFLOP/s) | no AVX512_BF16 | |\n");
  }
  if (m::HasAmxBf16Tiles()) {
    std::printf("| bfloat16 AMX tile peak, TDPBF16PS (GFLOP/s) | %.1f | %.1f |\n",
                m::AmxBf16PeakGflops(1), m::AmxBf16PeakGflops(all));
  } else {
    std::printf("| bfloat16 AMX tile peak, TDPBF16PS (GFLOP/s) | no usable AMX-BF16 | |\n");
  }
  const int nodes = m::NumaNodeCount();
  std::printf("| triad bandwidth (GB/s), %d NUMA node%s | %.1f | %.1f |\n", nodes,
              nodes == 1 ? "" : "s", m::TriadBandwidthGBs(1), m::TriadBandwidthGBs(all));
  return 0;
}

// Where the tool writes its pictures: --out DIR, else <workspace>/gpe_out under
// `bazel run`, else ./gpe_out.
std::string OutputDir(const std::string& flag_value) {
  // Relative to where `bazel run` was called from, not to the runfiles tree it runs in.
  if (!flag_value.empty()) return t::UserPath(flag_value);
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return std::string(ws != nullptr ? ws : ".") + "/gpe_out";
}

bool ParseInt(const char* s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// The main job: `gpe` or `gpe --quick` (argv[1]), nothing after it.
int MainJob(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "gpe: unexpected argument '%s'\n\n%s", argv[2], kUsage);
    return 2;
  }
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (RunVersion() != 0) return 1;
  std::printf("\n");
  if (t::RunCheckGroups(1, 20) != 0) return 1;
  std::printf("\n");
  if (t::RunInrSpiral(OutputDir("")) != 0) return 1;
  std::printf("\n");
  if (t::RunMainMlpFits(OutputDir(""), quick) != 0) return 1;
  std::printf("\n");
  return t::RunMainAttention(quick);
}

// gpe inr-image FILE [--gray] [--out DIR]
int InrImageCommand(int argc, char** argv) {
  std::string out, path;
  bool gray = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--out" && i + 1 < argc && argv[i + 1][0] != '\0') {  // not --out ""
      out = argv[++i];
    } else if (flag == "--gray") {
      gray = true;
    } else if (!flag.empty() && flag[0] != '-' && path.empty()) {
      path = t::UserPath(flag);  // relative to the caller's directory under `bazel run`
    } else {
      std::fprintf(stderr, "gpe inr-image: unknown or incomplete option '%s'\n\n%s",
                   flag.c_str(), kUsage);
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "gpe inr-image: give a PNG file\n\n%s", kUsage);
    return 2;
  }
  return t::RunInrImage(path, gray, OutputDir(out));
}

// gpe inr-spiral [--out DIR]
int InrSpiralCommand(int argc, char** argv) {
  std::string out;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--out" && i + 1 < argc && argv[i + 1][0] != '\0') {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "gpe inr-spiral: unknown or incomplete option '%s'\n\n%s", argv[i],
                   kUsage);
      return 2;
    }
  }
  return t::RunInrSpiral(OutputDir(out));
}

// gpe bench [--quick] [--no-peers]
int BenchCommand(int argc, char** argv) {
  bool quick = false, peers = true;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      quick = true;
    } else if (flag == "--no-peers") {
      peers = false;
    } else {
      std::fprintf(stderr, "gpe bench: unknown option '%s'\n\n%s", flag.c_str(), kUsage);
      return 2;
    }
  }
  return t::RunBench(quick, peers, OutputDir(""));
}

// gpe check-groups [--seed N] [--trials N]
int CheckGroupsCommand(int argc, char** argv) {
  long long seed = 1, trials = 20;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if ((flag == "--seed" || flag == "--trials") && i + 1 < argc) {
      const bool ok = flag == "--seed" ? ParseInt(argv[i + 1], 0, INT64_MAX, &seed)
                                       : ParseInt(argv[i + 1], 1, 100000, &trials);
      if (!ok) {
        std::fprintf(stderr, "gpe check-groups: bad value for %s: '%s'\n", flag.c_str(),
                     argv[i + 1]);
        return 2;
      }
      ++i;
    } else {
      std::fprintf(stderr, "gpe check-groups: unknown or incomplete option '%s'\n\n%s",
                   flag.c_str(), kUsage);
      return 2;
    }
  }
  return t::RunCheckGroups(static_cast<uint64_t>(seed), static_cast<int>(trials));
}

}  // namespace

int main(int argc, char** argv) {
  // Before the tool starts threads or calls BLAS: setenv is safe only then.
  t::SelectBlasKernels();
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc > 1 && command.empty()) {  // `gpe "$MODE"` with MODE unset: not the main job
    std::fprintf(stderr, "gpe: an empty command\n\n%s", kUsage);
    return 2;
  }
  if (command.empty() || command == "--quick") return MainJob(argc, argv);
  if (command == "inr") return t::RunInrCommand(std::vector<std::string>(argv + 2, argv + argc));
  if (command == "inr-image") return InrImageCommand(argc, argv);
  if (command == "inr-spiral") return InrSpiralCommand(argc, argv);
  const bool plain = command == "version" || command == "--version" || command == "-V" ||
                     command == "machine";
  if (plain && argc > 2) {  // `gpe machine --threads 1` measured every thread, silently
    std::fprintf(stderr, "gpe %s: takes no options; got '%s'\n\n%s", command.c_str(), argv[2],
                 kUsage);
    return 2;
  }
  if (command == "version" || command == "--version" || command == "-V") return RunVersion();
  if (command == "machine") return RunMachine();
  if (command == "bench") return BenchCommand(argc, argv);
  if (command == "check-groups") return CheckGroupsCommand(argc, argv);
  std::fprintf(stderr, "gpe: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
