#pragma once
// The host's steady clock as a stopwatch. CPU work is finished when the call that did it returns, so on the
// CPU this is the step time; on a GPU it only measures what the caller has synchronised (StepTimer does not
// need that).
#include <chrono>

namespace retort::bench {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace retort::bench
