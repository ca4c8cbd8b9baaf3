#pragma once
// What the benchmarks' main() functions share: the help text of a program started once per rank, and the run
// itself, where an exception becomes one line on stderr naming the program and this process's rank (several
// ranks print to one terminal) and exit status 1.
#include <functional>
#include <string>

namespace retort::bench {

int run_reporting_rank(const char* program, const std::function<int()>& body);

// The help text of a benchmark that runs as one process per rank: what it measures, then how to start it.
std::string per_rank_usage(const std::string& summary, const std::string& program);

}  // namespace retort::bench
