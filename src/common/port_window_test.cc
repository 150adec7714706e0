#include "common/port_window.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.h"

namespace weft {
namespace {

TEST(PortWindow, StaysBelowLinuxsDefaultEphemeralRange) {
  EXPECT_EQ(listen_port_window({32768, 60999}), (PortWindow{20000, 32000}));
}

TEST(PortWindow, LeavesOutAnEphemeralRangeThatMeetsIt) {
  EXPECT_EQ(listen_port_window({25000, 60999}), (PortWindow{20000, 24999}));
  EXPECT_EQ(listen_port_window({10000, 21000}), (PortWindow{21001, 32000}));
  EXPECT_EQ(listen_port_window({15000, 40000}), (PortWindow{40001, 65535})) << "the larger side of it";
  EXPECT_EQ(listen_port_window({20010, 65535}), (PortWindow{1024, 20009}));
}

TEST(PortWindow, NoneWhenEveryUnprivilegedPortIsEphemeral) {
  EXPECT_EQ(listen_port_window({1024, 65535}), std::nullopt);
  EXPECT_EQ(listen_port_window({1050, 65500}), std::nullopt) << "what is left is too small to probe";
}

TEST(PortWindow, ReadsTheKernelsRange) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/range";
  std::ofstream(path) << "32768\t60999\n";
  EXPECT_EQ(read_ephemeral_range(path), (std::pair{32768, 60999}));
  std::ofstream(path) << "garbage\n";
  EXPECT_EQ(read_ephemeral_range(path), std::nullopt);
  EXPECT_EQ(read_ephemeral_range(dir.path() + "/missing"), std::nullopt);
  EXPECT_TRUE(read_ephemeral_range().has_value()) << "this machine's /proc";
}

}  // namespace
}  // namespace weft
