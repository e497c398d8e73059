#include "tools/gpe_inr_zheng_table1.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace gpe {
namespace tools {
namespace {

// The embedding of every pixel alone is n^2 x 2K floats: 8 GiB at 2048 x 2048, K = 256.
// The MLP path at 2048 x 2048 holds the 8 GiB float embedding of every pixel twice (the
// forward keeps a copy of its input) beside the 4 GiB activations of each hidden layer:
// 34 GiB, counted from its allocations; 512 x 512 about 2 GiB (a run this estimate must
// not refuse on the development machines' 24 GiB).
TEST(ZhengMlpBytesTest, CountsTheEmbeddingOfEveryPixel) {
  EXPECT_GT(ZhengMlpBytes(2048, 256, 256, 1), int64_t{33} << 30);
  EXPECT_LT(ZhengMlpBytes(512, 256, 256, 3), int64_t{4} << 30);
  EXPECT_LT(ZhengMlpBytes(2048, 256, 256, 1), int64_t{64} << 30);
  EXPECT_LT(ZhengMlpBytes(32, 16, 32, 1), int64_t{1} << 20);  // --quick
  EXPECT_GT(ZhengMlpBytes(1024, 256, 256, 3), ZhengMlpBytes(1024, 256, 256, 1));
  EXPECT_GT(ZhengMlpBytes(1024, 256, 256, 1), 3 * ZhengMlpBytes(512, 256, 256, 1));
}

// A container's memory limit, which /proc/meminfo does not show: cgroup v2's memory.max
// less memory.current, v1's limit less usage, none for "max" or v1's near-2^63 value, and
// none where the files are missing. Fake hierarchies under a temporary directory.
TEST(CgroupMemoryRoomBytesTest, ReadsV2ThenV1Limits) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("gpe_cgroup_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  write(root / "proc_v2", "0::/box\n");
  write(root / "fs/box/memory.max", "4294967296\n");
  write(root / "fs/box/memory.current", "1073741824\n");
  EXPECT_EQ(CgroupMemoryRoomBytes((root / "proc_v2").string(), (root / "fs").string()),
            int64_t{3} << 30);
  write(root / "fs/box/memory.max", "max\n");
  EXPECT_EQ(CgroupMemoryRoomBytes((root / "proc_v2").string(), (root / "fs").string()), -1);
  write(root / "proc_v1", "9:cpu,cpuacct:/a\n4:memory:/jail\n");
  write(root / "fs/memory/jail/memory.limit_in_bytes", "2147483648\n");
  write(root / "fs/memory/jail/memory.usage_in_bytes", "536870912\n");
  EXPECT_EQ(CgroupMemoryRoomBytes((root / "proc_v1").string(), (root / "fs").string()),
            int64_t{3} << 29);
  write(root / "fs/memory/jail/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(CgroupMemoryRoomBytes((root / "proc_v1").string(), (root / "fs").string()), -1);
  EXPECT_EQ(CgroupMemoryRoomBytes((root / "missing").string(), (root / "fs").string()), -1);
  fs::remove_all(root);
}

int64_t MappedBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t bytes = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "VmSize:", 7) == 0) bytes = std::strtoll(line + 7, nullptr, 10) * 1024;
  }
  std::fclose(f);
  return bytes;
}

// --size 2048 with the MLP rows, in a process that may map only 1 GiB more: refused before
// anything is allocated or written (exit 1, naming --no-mlp), not an abort on
// std::bad_alloc hours into the run. Nothing near the 26 GiB the rows need is allocated.
TEST(RunZhengTable1Test, RefusesMlpRowsThatCannotFit) {
  const int64_t mapped = MappedBytes();
  if (mapped < 0) GTEST_SKIP() << "no /proc/self/status";
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old_limit), 0);
  if (old_limit.rlim_cur != RLIM_INFINITY &&
      old_limit.rlim_cur < static_cast<rlim_t>(mapped + (int64_t{1} << 30))) {
    GTEST_SKIP() << "the address space is limited already";
  }
  const std::string out = ::testing::TempDir() + "/zheng_refused";
  struct rlimit low = old_limit;
  low.rlim_cur = static_cast<rlim_t>(mapped + (int64_t{1} << 30));
  ASSERT_EQ(setrlimit(RLIMIT_AS, &low), 0);
  const int64_t available = AvailableMemoryBytes();
  ::testing::internal::CaptureStderr();
  const int rc = RunZhengTable1({"--size", "2048", "--gd-steps", "1", "--out", out});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old_limit), 0);
  EXPECT_GE(available, 0);
  EXPECT_LE(available, int64_t{1} << 30);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("--no-mlp"), std::string::npos) << err;
  EXPECT_NE(err.find("2048x2048"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(out));  // refused before writing anything
}

}  // namespace
}  // namespace tools
}  // namespace gpe
