#pragma once
// A write to a socket or pipe whose reader is gone raises SIGPIPE, whose default action kills the whole process
// before the write can return EPIPE. A rank whose peer died must instead see the failed write as an error and say
// which peer it lost, so every retort process ignores SIGPIPE (as Python does for PyTorch). Gloo's TCP transport
// writes with writev(), which cannot ask for MSG_NOSIGNAL per call: the process-wide setting is the only one.
namespace retort {

// Sets SIGPIPE to "ignore" unless the program installed a handler of its own (then that handler stays). Safe to
// call from any thread, any number of times.
void ignore_broken_pipe_signal();

}  // namespace retort
