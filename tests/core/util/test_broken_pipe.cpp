// SIGPIPE must not kill a retort process: a write to a peer that is gone has to come back as an error.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "core/util/broken_pipe.h"

namespace retort {
namespace {

void on_sigpipe(int) {}

struct sigaction sigpipe_action() {
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  return current;
}

void set_sigpipe_handler(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGPIPE, &action, nullptr);
}

TEST(BrokenPipe, TheDefaultActionBecomesIgnoreAndAWriteToAClosedSocketReturnsEpipe) {
  set_sigpipe_handler(SIG_DFL);
  ignore_broken_pipe_signal();
  EXPECT_EQ(sigpipe_action().sa_handler, SIG_IGN);

  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
  ::close(ends[1]);
  const char byte = 'x';
  // Without the ignore, this write would end the test binary with signal 13.
  const ssize_t written = ::write(ends[0], &byte, 1);
  const int error = errno;
  ::close(ends[0]);
  EXPECT_EQ(written, -1);
  EXPECT_EQ(error, EPIPE);
}

TEST(BrokenPipe, AHandlerTheProgramInstalledIsKept) {
  set_sigpipe_handler(on_sigpipe);
  ignore_broken_pipe_signal();
  EXPECT_EQ(sigpipe_action().sa_handler, on_sigpipe);
  set_sigpipe_handler(SIG_IGN);
}

}  // namespace
}  // namespace retort
