// A rank of a real 2-rank CPU training run is killed (SIGKILL) or hangs (SIGSTOP). Its peer must stop with an error
// naming the lost peer - at once for a dead rank (its sockets close), within parallel.timeout_s for a hung one -
// and never hang. The ranks are started as mpirun and srun start them (environment variables, no launcher), and
// then through `retort train --nproc 2`, whose launcher must report the killed rank and stop the other.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/process_support.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::apps_testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string retort_binary() {
  const char* moved = std::getenv("RETORT_BINARY");
  return moved != nullptr ? moved : RETORT_BINARY;
}

// `retort train` with the tiny run's settings, long enough to be stopped in the middle.
std::vector<std::string> long_training(const fs::path& run_dir) {
  std::vector<std::string> argv{retort_binary(), "train"};
  for (const std::string& o : distill::testing::tiny_overrides(run_dir)) argv.push_back(o);
  argv.insert(argv.end(),
              {"train.steps=1000000", "train.eval_every=1000000", "train.checkpoint_every=0", "parallel.timeout_s=6"});
  return argv;
}

// Waits until rank 0 has logged `steps` training steps (the ranks are inside their collectives).
bool training_has_started(const fs::path& run_dir, size_t steps, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    std::ifstream in(run_dir / "metrics.jsonl");
    size_t lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    if (lines >= steps) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Two ranks of a training run started by hand, as a cluster's launcher would.
struct HandStartedRun {
  ::retort::testing::TempFolder dir;
  fs::path run_dir = dir.path() / "run";
  pid_t ranks[2] = {-1, -1};

  HandStartedRun() {
    fs::create_directories(dir.path() / "rendezvous");
    for (int rank = 0; rank < 2; ++rank)
      ranks[rank] = spawn(long_training(run_dir),
                          {{"RANK", std::to_string(rank)},
                           {"WORLD_SIZE", "2"},
                           {"LOCAL_RANK", std::to_string(rank)},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"OMP_NUM_THREADS", "1"},
                           {"RETORT_RENDEZVOUS", (dir.path() / "rendezvous").string()}},
                          log(rank));
  }
  ~HandStartedRun() {
    for (const pid_t pid : ranks) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  fs::path log(int rank) const { return dir.path() / ("rank" + std::to_string(rank) + ".log"); }
};

TEST(KilledRank, ThePeerOfAKilledRankStopsAtOnceNamingIt) {
  HandStartedRun run;
  ASSERT_TRUE(training_has_started(run.run_dir, 3, std::chrono::seconds(180))) << read_log(run.log(0));
  ASSERT_EQ(::kill(run.ranks[1], SIGKILL), 0);
  const auto killed_at = Clock::now();
  // Well inside parallel.timeout_s (6 s): a dead peer's sockets close, so nothing waits for a timeout.
  const std::optional<int> status = wait_for_exit(run.ranks[0], std::chrono::seconds(5));
  ASSERT_TRUE(status.has_value()) << "rank 0 still runs 5 s after its peer was killed\n" << read_log(run.log(0));
  EXPECT_NE(*status, 0);
  EXPECT_LT(*status, 128) << "rank 0 died by a signal instead of reporting the error";
  const std::string log = read_log(run.log(0));
  EXPECT_NE(log.find("rank 0: "), std::string::npos) << log;  // no launcher: the rank names itself
  EXPECT_NE(log.find("The peer, rank 1 of this group,"), std::string::npos) << log;
  std::cout << "rank 0 stopped " << std::chrono::duration<double>(Clock::now() - killed_at).count()
            << " s after its peer was killed\n";
}

TEST(KilledRank, ThePeerOfAHungRankStopsWithinTheTimeout) {
  HandStartedRun run;
  ASSERT_TRUE(training_has_started(run.run_dir, 3, std::chrono::seconds(180))) << read_log(run.log(0));
  ASSERT_EQ(::kill(run.ranks[1], SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  const std::optional<int> status = wait_for_exit(run.ranks[0], std::chrono::seconds(6 + 20));
  ASSERT_TRUE(status.has_value()) << "rank 0 hangs past parallel.timeout_s\n" << read_log(run.log(0));
  const double waited = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  EXPECT_NE(*status, 0);
  EXPECT_LT(*status, 128);
  const std::string log = read_log(run.log(0));
  EXPECT_NE(log.find("6 s"), std::string::npos) << "the error should state the timeout\n" << log;
  EXPECT_NE(log.find("The peer, rank 1 of this group,"), std::string::npos) << log;
  EXPECT_GE(waited, 5.0) << "a hung peer is only declared lost after the timeout";
}

// The ranks `retort launch` started for the launcher `parent`, by their RANK.
std::optional<pid_t> launched_rank(pid_t parent, int rank) {
  DIR* proc = ::opendir("/proc");
  std::optional<pid_t> found;
  for (dirent* entry; proc != nullptr && (entry = ::readdir(proc)) != nullptr && !found;) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
    std::ifstream environ(fmt::format("/proc/{}/environ", pid));
    for (std::string var; std::getline(environ, var, '\0');)
      if (var == "RANK=" + std::to_string(rank)) found = pid;
  }
  if (proc != nullptr) ::closedir(proc);
  return found;
}

TEST(KilledRank, TheLauncherReportsAKilledRankAndStopsTheOther) {
  ::retort::testing::TempFolder dir;
  const fs::path run_dir = dir.path() / "run";
  std::vector<std::string> argv = long_training(run_dir);
  argv.insert(argv.begin() + 2, {"--nproc", "2"});
  const pid_t launcher = spawn(argv, {}, dir.path() / "launch.log");
  const bool started = training_has_started(run_dir, 3, std::chrono::seconds(180));
  const std::optional<pid_t> rank1 = launched_rank(launcher, 1);
  if (!started || !rank1) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, nullptr, 0);
    FAIL() << "the launched run did not start\n" << read_log(dir.path() / "launch.log");
  }
  ASSERT_EQ(::kill(*rank1, SIGKILL), 0);
  const std::optional<int> status = wait_for_exit(launcher, std::chrono::seconds(20));
  if (!status) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, nullptr, 0);
  }
  ASSERT_TRUE(status.has_value()) << "the launcher still runs 20 s after a rank was killed";
  EXPECT_EQ(*status, 128 + SIGKILL);  // the first failure's status
  const std::string log = read_log(dir.path() / "launch.log");
  EXPECT_NE(log.find("rank 1 exited with status 137"), std::string::npos) << log;
  EXPECT_FALSE(launched_rank(launcher, 0).has_value());
}

}  // namespace
}  // namespace retort::apps_testing
