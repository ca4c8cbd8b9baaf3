// retort launch: every rank gets its environment (its share of the CPUs as OMP_NUM_THREADS too); a failing
// rank stops the others quickly, and so does a signal to the launcher.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/launch/launcher.h"
#include "tests/test_support.h"

namespace retort {
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

// Each rank's OpenMP team gets its share of the CPUs (counted here from the affinity mask, as `nproc` does),
// unless the caller chose a number.
TEST(Launcher, RanksShareTheCpusUnlessOmpNumThreadsIsSet) {
  ::retort::testing::TempFolder dir;
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string saved_value = saved ? saved : "";
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  const int cpus = CPU_COUNT(&set);
  auto threads_seen = [&](int nproc) {
    LaunchOptions options;
    options.nproc = nproc;
    const std::string script = "echo \"${OMP_NUM_THREADS:-unset}\" > " + dir.path().string() + "/omp_$RANK";
    EXPECT_EQ(launch_local({"/bin/sh", "-c", script}, options).exit_code, 0);
    std::vector<std::string> seen;
    for (int rank = 0; rank < nproc; ++rank) {
      std::ifstream in(dir.path() / ("omp_" + std::to_string(rank)));
      std::string line;
      std::getline(in, line);
      seen.push_back(line);
    }
    return seen;
  };
  ::unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(threads_seen(2), std::vector<std::string>(2, std::to_string(std::max(1, cpus / 2))));
  EXPECT_EQ(threads_seen(4 * cpus), std::vector<std::string>(4 * static_cast<size_t>(cpus), "1"));
  EXPECT_EQ(threads_seen(1), std::vector<std::string>{"unset"});  // one rank: OpenMP's own default
  ::setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(threads_seen(2), std::vector<std::string>(2, "3"));
  if (saved) {
    ::setenv("OMP_NUM_THREADS", saved_value.c_str(), 1);
  } else {
    ::unsetenv("OMP_NUM_THREADS");
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

// A `kill` of the launcher alone (a scheduler's, or a user's) must not leave its ranks running: it stops them and
// reports the signal.
TEST(Launcher, ASignalToTheLauncherStopsEveryRank) {
  LaunchOptions options;
  options.nproc = 2;
  options.grace = std::chrono::seconds(2);
  LaunchResult r;
  // Each rank writes its pid into this test's own folder (a fixed /tmp name would collide with a parallel run).
  const ::retort::testing::TempFolder folder;
  const std::string pid_file = (folder.path() / "rank").string();
  const auto start = std::chrono::steady_clock::now();
  std::thread launcher([&] {
    r = launch_local({"/bin/sh", "-c", "echo $$ > '" + pid_file + "'$RANK; exec sleep 60"}, options);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the handlers are installed before the ranks start
  ::kill(::getpid(), SIGTERM);
  launcher.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_LT(seconds, 10.0) << "the ranks must be stopped, not waited for";
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(pid_file + std::to_string(rank));
    pid_t pid = 0;
    in >> pid;
    ASSERT_GT(pid, 0) << "rank " << rank << " did not start";
    EXPECT_NE(::kill(pid, 0), 0) << "rank " << rank << " (pid " << pid << ") is still running";
  }
}

TEST(Launcher, MissingProgramIsAnError) {
  LaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(launch_local({"/nonexistent/program"}, options).exit_code, 127);
}

}  // namespace
}  // namespace retort
