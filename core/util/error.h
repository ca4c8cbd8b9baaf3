#pragma once
// Error reporting: every failure is an exception whose message says what went wrong and, where it can,
// what to do about it. Library code never calls exit().
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace retort {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown for invalid user input (configs, files, shapes): the message names the offending item.
class InputError : public Error {
 public:
  using Error::Error;
};

// Thrown when a collective fails because a peer rank is gone, stuck or unreachable: this rank's failure follows from
// another's, whose own error says why. `retort launch` reports the run's cause, not the first rank to notice it.
class PeerLostError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check_failure(const char* condition, const char* file, int line, const std::string& message);

}  // namespace retort

// RETORT_CHECK(cond, "fmt {}", args...): throws retort::Error with the condition, call site and message.
#define RETORT_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::retort::throw_check_failure(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

// RETORT_INPUT_CHECK: like RETORT_CHECK for errors caused by user input; the message stands alone.
#define RETORT_INPUT_CHECK(cond, ...)                         \
  do {                                                        \
    if (!(cond)) [[unlikely]] {                               \
      throw ::retort::InputError(::fmt::format(__VA_ARGS__)); \
    }                                                         \
  } while (0)
