#pragma once
// Ranks as threads of one process over one in-memory store: how the unit tests (and anyone trying the
// parallel code on a laptop) run a group without launching processes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/gloo_communicator.h"

namespace retort {

struct RankFailure {
  int rank = 0;
  std::string message;
};

using RankBody = std::function<void(std::shared_ptr<Communicator>)>;

// Runs `body` on `world` threads, each with its rank's communicator of one Gloo group named "world", joins
// them all and returns every rank's failure in the order they happened (empty when all succeeded). A rank
// that throws drops its communicator at once, so the others see the closed connection instead of waiting
// for the whole timeout.
std::vector<RankFailure> run_ranks_collect(int world, const RankBody& body, const GlooOptions& options = {});

// Same, but throws a retort::Error "rank R failed: ..." naming the first failure, then the others.
void run_ranks(int world, const RankBody& body, const GlooOptions& options = {});

}  // namespace retort
