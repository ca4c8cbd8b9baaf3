// Two "nodes" on one machine: two `retort launch --nnodes 2 --node-rank K --nproc 2` processes (ranks 0-1 and 2-3),
// each node's ranks listening on its own loopback address (127.0.0.1 and 127.0.0.2), meeting through a Redis
// server (no shared folder) or through a shared folder. A dp 2 x tp 2 training run that way logs the same losses,
// bit for bit, as the same four ranks started by one launcher.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/process_support.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/parallel/comm/redis_server_support.h"
#include "tests/test_support.h"

namespace retort::apps_testing {
namespace {

namespace fs = std::filesystem;

std::string retort_binary() {
  const char* moved = std::getenv("RETORT_BINARY");
  return moved != nullptr ? moved : RETORT_BINARY;
}

// `retort launch LAUNCH_ARGS -- train` of the tiny run at dp 2 x tp 2.
std::vector<std::string> launch_training(const std::vector<std::string>& launch_args, const fs::path& run_dir) {
  std::vector<std::string> argv{retort_binary(), "launch"};
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  argv.insert(argv.end(), {"--", "train", "parallel.tp=2"});
  for (const std::string& o : distill::testing::tiny_overrides(run_dir)) argv.push_back(o);
  return argv;
}

// Both nodes' launchers at once; true when both exit with 0 (their logs go to the test's output otherwise).
bool run_two_nodes(const std::string& rendezvous, const fs::path& run_dir, const fs::path& logs) {
  std::vector<pid_t> nodes;
  for (int node = 0; node < 2; ++node)
    nodes.push_back(spawn(launch_training({"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc", "2",
                                           "--rendezvous", rendezvous},
                                          run_dir),
                          {{"RETORT_GLOO_HOSTNAME", "127.0.0." + std::to_string(node + 1)}},
                          logs / ("node" + std::to_string(node) + ".log")));
  bool ok = true;
  for (int node = 0; node < 2; ++node) {
    const std::optional<int> status = wait_for_exit(nodes[static_cast<size_t>(node)], std::chrono::seconds(300));
    if (!status) ::kill(nodes[static_cast<size_t>(node)], SIGKILL);
    if (status != 0) {
      ok = false;
      ADD_FAILURE() << "node " << node << " exited with " << (status ? std::to_string(*status) : "a timeout") << "\n"
                    << read_log(logs / ("node" + std::to_string(node) + ".log"));
    }
  }
  const std::string log = read_log(logs / "node1.log");
  EXPECT_NE(log.find("rank 3 of 4"), std::string::npos) << log;  // the second node holds ranks 2 and 3
  return ok;
}

void expect_same_losses(const fs::path& a, const fs::path& b) {
  const auto x = distill::testing::read_metrics(a), y = distill::testing::read_metrics(b);
  ASSERT_EQ(x.size(), 6U);
  ASSERT_EQ(y.size(), 6U);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i]["loss"], y[i]["loss"]) << "step " << i + 1;
  EXPECT_EQ(x[5]["eval_loss"], y[5]["eval_loss"]);
}

class TwoNodeLaunch : public ::testing::Test {
 protected:
  // The same four ranks from one launcher: the reference run.
  static void SetUpTestSuite() {
    one_node_ = std::make_unique<::retort::testing::TempFolder>("two_node_reference");
    const pid_t launcher =
        spawn(launch_training({"--nproc", "4"}, one_node_->path() / "run"), {}, one_node_->path() / "launch.log");
    const std::optional<int> status = wait_for_exit(launcher, std::chrono::seconds(300));
    ASSERT_EQ(status, 0) << read_log(one_node_->path() / "launch.log");
  }
  static void TearDownTestSuite() { one_node_.reset(); }
  static inline std::unique_ptr<::retort::testing::TempFolder> one_node_;
};

TEST_F(TwoNodeLaunch, ThroughARedisServerWithoutASharedFolder) {
  RETORT_REQUIRE_ORACLE(comm_testing::redis_server_installed(), "redis-server is not installed");
  const comm_testing::RedisServer server;
  ASSERT_TRUE(server.running());
  ::retort::testing::TempFolder dir;
  ASSERT_TRUE(run_two_nodes(server.url(fmt::format("job-{}", ::getpid())), dir.path() / "run", dir.path()));
  expect_same_losses(one_node_->path() / "run", dir.path() / "run");
}

TEST_F(TwoNodeLaunch, ThroughASharedFolder) {
  ::retort::testing::TempFolder dir;
  ASSERT_TRUE(run_two_nodes((dir.path() / "rendezvous").string(), dir.path() / "run", dir.path()));
  expect_same_losses(one_node_->path() / "run", dir.path() / "run");
}

TEST(TwoNodeLaunchErrors, SeveralNodesNeedARendezvousAndAValidNodeRank) {
  ::retort::testing::TempFolder dir;
  const pid_t a =
      spawn({retort_binary(), "launch", "--nnodes", "2", "--nproc", "1", "--", "train"}, {}, dir.path() / "a.log");
  EXPECT_EQ(wait_for_exit(a, std::chrono::seconds(60)), 2);
  EXPECT_NE(read_log(dir.path() / "a.log").find("2 nodes need a rendezvous"), std::string::npos)
      << read_log(dir.path() / "a.log");
  const pid_t b = spawn({retort_binary(), "launch", "--nnodes", "2", "--node-rank", "2", "--nproc", "1", "--rendezvous",
                         (dir.path() / "r").string(), "--", "train"},
                        {}, dir.path() / "b.log");
  EXPECT_EQ(wait_for_exit(b, std::chrono::seconds(60)), 2);
  EXPECT_NE(read_log(dir.path() / "b.log").find("--node-rank 2 is not one of the 2 nodes"), std::string::npos)
      << read_log(dir.path() / "b.log");
}

}  // namespace
}  // namespace retort::apps_testing
