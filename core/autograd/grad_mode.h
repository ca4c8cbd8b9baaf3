#pragma once
// Whether ops record the tape. Per thread, so that TP thread ranks each have their own switch.

namespace retort {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Scope in which no op records backward nodes (evaluation, optimizer updates, generation).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace retort
