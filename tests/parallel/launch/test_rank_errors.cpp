// A launched rank's fatal error reaches the launcher, which prints each distinct message once with the ranks that
// raised it (the first failure's first); without a launcher's folder a rank prints its own, prefixed by its rank.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "core/io/atomic_file.h"
#include "parallel/launch/launcher.h"
#include "parallel/launch/rank_errors.h"
#include "tests/test_support.h"

namespace retort {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(RankErrors, IdenticalMessagesAreOneGroupAndTheFirstFailureComesFirst) {
  ::retort::testing::TempFolder dir;
  write_text_atomic(dir.path() / "rank-0.txt", "bad config");
  write_text_atomic(dir.path() / "rank-1.txt", "lost peer");
  write_text_atomic(dir.path() / "rank-2.txt", "bad config");
  write_text_atomic(dir.path() / "unrelated.txt", "not a rank's");
  const std::vector<RankErrorGroup> groups = collect_rank_errors(dir.path(), /*first_rank=*/2);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_EQ(format_rank_error_group(groups[0]), "ranks 0, 2: bad config");
  EXPECT_EQ(format_rank_error_group(groups[1]), "rank 1: lost peer");
  EXPECT_EQ(format_rank_error_group(collect_rank_errors(dir.path(), 1)[0]), "rank 1: lost peer");
}

TEST(RankErrors, ARankHandsItsMessageToTheLaunchersFolder) {
  ::retort::testing::TempFolder dir;
  {
    const ScopedEnv folder(kRankErrorsVariable, dir.path().string());
    const ScopedEnv rank("RANK", "3");
    const ScopedEnv world("WORLD_SIZE", "4");
    const ScopedEnv local_rank("LOCAL_RANK", "3");
    const ScopedEnv local_world("LOCAL_WORLD_SIZE", "4");
    const ScopedEnv rendezvous("RETORT_RENDEZVOUS", dir.path().string());
    EXPECT_TRUE(hand_error_to_launcher("out of memory"));
  }
  EXPECT_EQ(read_file(dir.path() / "rank-3.txt"), "out of memory");
}

TEST(RankErrors, WithoutALauncherARankPrintsItsOwnMessageWithItsRank) {
  ::retort::testing::TempFolder dir;
  const ScopedEnv no_folder(kRankErrorsVariable, "");
  EXPECT_FALSE(hand_error_to_launcher("x"));
  {
    const ScopedEnv rank("RANK", "1");
    const ScopedEnv world("WORLD_SIZE", "2");
    const ScopedEnv local_rank("LOCAL_RANK", "1");
    const ScopedEnv local_world("LOCAL_WORLD_SIZE", "2");
    const ScopedEnv rendezvous("RETORT_RENDEZVOUS", dir.path().string());
    EXPECT_EQ(rank_error_line("lost peer"), "rank 1: lost peer");
  }
  const ScopedEnv single_rank("RANK", "0");
  const ScopedEnv single_world("WORLD_SIZE", "1");
  const ScopedEnv single_local_rank("LOCAL_RANK", "0");
  const ScopedEnv single_local_world("LOCAL_WORLD_SIZE", "1");
  EXPECT_EQ(rank_error_line("bad config"), "bad config");
}

// Through the launcher: ranks that write their error where RETORT_RANK_ERRORS says come back as one line.
TEST(RankErrors, TheLauncherCollectsTheRanksMessagesOnce) {
  LaunchOptions options;
  options.nproc = 3;
  options.grace = std::chrono::seconds(2);
  // Rank 1 fails; the others, stopped by the launcher's SIGTERM, report the loss of their peer as they go.
  // Rank 1 fails once both have their handler in place (a SIGTERM before that would kill a shell silently).
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then "
      "  while [ ! -e \"$RETORT_RANK_ERRORS/ready-0\" ] || [ ! -e \"$RETORT_RANK_ERRORS/ready-2\" ]; do sleep 0.02; "
      "done; "
      "  printf 'disk full' > \"$RETORT_RANK_ERRORS/rank-$RANK.txt\"; exit 3; fi; "
      "trap 'printf \"peer lost\" > \"$RETORT_RANK_ERRORS/rank-$RANK.txt\"; exit 1' TERM; "
      ": > \"$RETORT_RANK_ERRORS/ready-$RANK\"; sleep 20 & wait";
  const LaunchResult r = launch_local({"/bin/sh", "-c", script}, options);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  ASSERT_EQ(r.rank_errors.size(), 2U);
  EXPECT_EQ(r.rank_errors[0], "rank 1: disk full");
  EXPECT_EQ(r.rank_errors[1], "ranks 0, 2: peer lost");
}

TEST(RankErrors, ALostPeerIsListedAfterTheCauseWhateverFailedFirst) {
  ::retort::testing::TempFolder dir;
  write_text_atomic(dir.path() / "rank-0.txt", "corpus missing");
  write_text_atomic(dir.path() / "rank-1.lost-peer.txt", "connection reset by peer");
  write_text_atomic(dir.path() / "rank-x.lost-peer.txt", "not a rank's");
  const std::vector<RankErrorGroup> groups = collect_rank_errors(dir.path(), /*first_rank=*/1);
  ASSERT_EQ(groups.size(), 2U);
  EXPECT_EQ(groups[0].kind, RankErrorKind::kCause);
  EXPECT_EQ(format_rank_error_group(groups[0]), "rank 0: corpus missing");
  EXPECT_EQ(groups[1].kind, RankErrorKind::kLostPeer);
  EXPECT_EQ(format_rank_error_group(groups[1]), "rank 1: connection reset by peer");
}

// Rank 0 stops on a bad input (status 2); rank 1, in a collective with it, exits first on the lost connection
// (status 1). The run's status and failed rank are rank 0's, the cause, whichever exit the launcher saw first.
TEST(RankErrors, TheLauncherReportsTheCauseNotTheFirstRankToNoticeIt) {
  LaunchOptions options;
  options.nproc = 2;
  options.grace = std::chrono::seconds(5);
  const std::string script =
      "if [ \"$RANK\" = 0 ]; then "
      "  printf 'corpus missing' > \"$RETORT_RANK_ERRORS/rank-0.txt\"; "
      "  trap 'exit 2' TERM; : > \"$RETORT_RANK_ERRORS/ready-0\"; sleep 20 & wait; exit 2; fi; "
      "while [ ! -e \"$RETORT_RANK_ERRORS/ready-0\" ]; do sleep 0.02; done; "
      "printf 'connection reset' > \"$RETORT_RANK_ERRORS/rank-1.lost-peer.txt\"; exit 1";
  const LaunchResult r = launch_local({"/bin/sh", "-c", script}, options);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.failed_rank, 0);
  ASSERT_EQ(r.rank_errors.size(), 2U);
  EXPECT_EQ(r.rank_errors[0], "rank 0: corpus missing");
  EXPECT_EQ(r.rank_errors[1], "rank 1: connection reset");
}

// As a real run fails: the cause rank's sockets close while it unwinds, before it has reported its error or exited, so
// its peer notices first and exits; the cause rank reports a moment later and exits with its own status. It does not
// trap SIGTERM (a retort process killed by it exits 143): the launcher must let it finish, not stop it.
TEST(RankErrors, TheCauseRankStillUnwindingIsNotStoppedByItsPeersLostPeerExit) {
  LaunchOptions options;
  options.nproc = 2;
  options.grace = std::chrono::seconds(5);
  const std::string script =
      "if [ \"$RANK\" = 0 ]; then "
      "  while [ ! -e \"$RETORT_RANK_ERRORS/rank-1.lost-peer.txt\" ]; do sleep 0.02; done; sleep 0.5; "
      "  printf 'corpus missing' > \"$RETORT_RANK_ERRORS/rank-0.txt\"; exit 2; fi; "
      "printf 'connection reset' > \"$RETORT_RANK_ERRORS/rank-1.lost-peer.txt\"; exit 1";
  const LaunchResult r = launch_local({"/bin/sh", "-c", script}, options);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.failed_rank, 0);
  ASSERT_EQ(r.rank_errors.size(), 2U);
  EXPECT_EQ(r.rank_errors[0], "rank 0: corpus missing");
  EXPECT_EQ(r.rank_errors[1], "rank 1: connection reset");
}

// A rank that lost its peer while that peer hangs: the wait is bounded, then the hung rank is stopped.
TEST(RankErrors, APeerThatNeverExitsIsStoppedAfterTheLostPeerWait) {
  LaunchOptions options;
  options.nproc = 2;
  options.grace = std::chrono::seconds(5);
  options.lost_peer_wait = std::chrono::milliseconds(300);
  const std::string script =
      "if [ \"$RANK\" = 0 ]; then sleep 30; exit 0; fi; "
      "printf 'connection reset' > \"$RETORT_RANK_ERRORS/rank-1.lost-peer.txt\"; exit 1";
  const auto start = std::chrono::steady_clock::now();
  const LaunchResult r = launch_local({"/bin/sh", "-c", script}, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(r.exit_code, 1);  // no rank's error is a cause: the first failure's status stands
  EXPECT_EQ(r.failed_rank, 1);
}

}  // namespace
}  // namespace retort
