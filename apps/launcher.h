#pragma once
// Local multi-process launch, like torchrun: N copies of a command, each with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE and RETORT_RENDEZVOUS (a fresh folder every rank can see). When one rank fails, the
// others are stopped (SIGTERM, then SIGKILL after a grace period) and the launch returns the first failure's
// exit status, so a dead rank never leaves the rest hanging.
#include <chrono>
#include <string>
#include <vector>

namespace retort::apps {

struct LaunchOptions {
  int nproc = 1;
  std::string rendezvous;  // empty: a new folder under the system temp directory, removed afterwards
  std::chrono::seconds grace{10};
};

struct LaunchResult {
  int exit_code = 0;  // 0, or the first failing rank's status (128 + signal for a killed rank)
  int failed_rank = -1;
};

// Runs argv (argv[0] a program path) nproc times and waits for all of them.
LaunchResult launch_local(const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace retort::apps
