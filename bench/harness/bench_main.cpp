#include "bench/harness/bench_main.h"

#include <cstdio>
#include <exception>

#include "parallel/comm/rendezvous.h"

namespace retort::bench {

int run_reporting_rank(const char* program, const std::function<int()>& body) {
  int rank = 0;
  try {
    rank = read_launch_env().rank;  // inside the try: a broken launch environment is reported as rank 0's
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (rank %d): %s\n", program, rank, e.what());
    return 1;
  }
}

std::string per_rank_usage(const std::string& summary, const std::string& program) {
  return summary + ", one process per rank:\n  retort launch --nproc N --exec -- " + program + " [options]";
}

}  // namespace retort::bench
