#pragma once
// Runs the real `retort` binary on local ranks through the launcher, as a user's `retort ... --nproc N` does: the
// multi-process tests of the commands share it.
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/launch/launcher.h"

namespace retort::apps_testing {

// `retort <args...>` on nproc ranks; the launch's exit status. The build's binary, or RETORT_BINARY when the tests
// run from a bundle moved to another machine.
inline int run_command_on_ranks(int nproc, const std::vector<std::string>& args) {
  const char* moved = std::getenv("RETORT_BINARY");
  std::vector<std::string> argv{moved != nullptr ? moved : RETORT_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  LaunchOptions options;
  options.nproc = nproc;
  options.grace = std::chrono::seconds(2);
  return launch_local(argv, options).exit_code;
}

}  // namespace retort::apps_testing
