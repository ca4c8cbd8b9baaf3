#include "core/util/broken_pipe.h"

#include <csignal>

namespace retort {

void ignore_broken_pipe_signal() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  // A handler the program chose is its own business; only the default action (terminate) is replaced.
  const bool default_action = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
  if (!default_action) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace retort
