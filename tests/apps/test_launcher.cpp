// retort launch: every rank gets its environment; a failing rank stops the others quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "apps/launcher.h"
#include "tests/test_support.h"

namespace retort::apps {
namespace {

TEST(Launcher, EveryRankSeesItsEnvironment) {
  ::retort::testing::TempFolder dir;
  const std::string script = "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE\" > " + dir.path().string() +
                             "/rank_$RANK; test -d \"$RETORT_RENDEZVOUS\"";
  LaunchOptions options;
  options.nproc = 3;
  const LaunchResult r = launch_local({"/bin/sh", "-c", script}, options);
  EXPECT_EQ(r.exit_code, 0);
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir.path() / ("rank_" + std::to_string(rank)));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, fmt::format("{} 3 {} 3", rank, rank));
  }
}

TEST(Launcher, AFailingRankStopsTheOthers) {
  LaunchOptions options;
  options.nproc = 3;
  options.grace = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 fails at once; the others would sleep for a minute (one even ignores SIGTERM).
  const LaunchResult r = launch_local(
      {"/bin/sh", "-c", "if [ $RANK = 1 ]; then exit 7; fi; if [ $RANK = 2 ]; then trap '' TERM; fi; sleep 60"},
      options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_LT(seconds, 10.0) << "the surviving ranks must be stopped, not waited for";
}

TEST(Launcher, MissingProgramIsAnError) {
  LaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(launch_local({"/nonexistent/program"}, options).exit_code, 127);
}

}  // namespace
}  // namespace retort::apps
