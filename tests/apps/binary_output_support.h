#pragma once
// Runs the real `retort` binary in one process and keeps what it printed (stdout and stderr together), for the
// tests of what a user sees: help, versions, hints and error messages.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace retort::apps_testing {

struct CommandOutput {
  int exit_code = -1;
  std::string text;  // stdout and stderr, interleaved as printed
};

// Single-quotes a word for /bin/sh.
inline std::string shell_word(const std::string& word) {
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// `retort <args...>`: the build's binary, or RETORT_BINARY when the tests run from a bundle on another machine.
inline CommandOutput run_retort(const std::vector<std::string>& args) {
  const char* moved = std::getenv("RETORT_BINARY");
  std::string command = shell_word(moved != nullptr ? moved : RETORT_BINARY);
  for (const std::string& arg : args) command += " " + shell_word(arg);
  command += " 2>&1";
  CommandOutput out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) out.text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

// `retort <args...>` with stdout into `out` and stderr into `err` (into `out` as well when `err` is empty); the exit
// status.
inline int run_retort_to_files(const std::vector<std::string>& args, const std::string& out,
                               const std::string& err = {}) {
  const char* moved = std::getenv("RETORT_BINARY");
  std::string command = shell_word(moved != nullptr ? moved : RETORT_BINARY);
  for (const std::string& arg : args) command += " " + shell_word(arg);
  command += " > " + shell_word(out) + (err.empty() ? std::string(" 2>&1") : " 2> " + shell_word(err));
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace retort::apps_testing
