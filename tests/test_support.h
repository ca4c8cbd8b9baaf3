#pragma once
// Helpers that several test files need: a temporary folder per test, the message of an expected exception,
// and reading or writing a small file's bytes. Header-only, so every test executable simply compiles it in.
//
// This header declares retort::testing, so code inside namespace retort must name GoogleTest's namespace as
// ::testing (an unqualified testing:: there finds this one).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "core/util/error.h"

namespace retort::testing {

// An empty folder that is removed, with everything in it, when the object goes out of scope. Its name
// carries the test's name and the process id, so test processes running side by side (ctest -j) never share
// files and a folder left behind by a crash says which test made it. The path is canonical because code
// under test (corpus resolution) returns canonical paths and tests compare them exactly, also where the
// temporary directory sits behind a symlink.
class TempFolder {
 public:
  // Named after the running test; use the labelled form where no test is running (SetUpTestSuite).
  TempFolder() : TempFolder(running_test_label()) {}
  explicit TempFolder(const std::string& label) {
    path_ = std::filesystem::temp_directory_path() / ("retort_" + label + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    path_ = std::filesystem::canonical(path_);
  }
  // Never throws: a destructor that throws during stack unwinding would abort the whole test run.
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  static std::string running_test_label() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string label = info ? std::string(info->test_suite_name()) + "_" + info->name() : "no_test";
    for (char& c : label) {
      if (c == '/') c = '_';  // parameterized names ("Cases/Suite", "Test/0") would otherwise nest folders
    }
    return label;
  }

  std::filesystem::path path_;
};

// The what() of the Exception that body throws. Tests assert on parts of the message because it is what a
// user reads; a body that throws nothing is recorded as a failure and gives an empty message. Exceptions of
// other types propagate, so the wrong kind of error fails the test too.
template <typename Exception = InputError, typename Body>
std::string message_of(Body&& body) {
  try {
    body();
  } catch (const Exception& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

// A file's exact bytes, read with the standard library rather than retort's own I/O (read_file) so that a
// test never checks the code under test with itself.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces (or creates, with its parent folders) a file holding exactly `bytes`, which may include NULs;
// like read_bytes, independent of retort's atomic writers.
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Whether the project's Python (RETORT_PYTHON, Debian's python3) can import torch and numpy, the external oracles of
// the PyTorch twin tests; checked once per process because importing torch takes seconds.
inline bool python_has_torch_and_numpy() {
  static const bool ok = std::system(RETORT_PYTHON " -c 'import torch, numpy' > /dev/null 2>&1") == 0;
  return ok;
}

// Under CI (the CI variable set and not "false" or "0") every oracle is installed by the set-up, so a missing one
// is a broken install that a quiet skip would hide.
inline bool running_under_ci() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string value(ci);
  return !value.empty() && value != "false" && value != "0";
}

}  // namespace retort::testing

// Skips the running test when an external oracle is missing, with the reason; under CI the same is a failure.
#define RETORT_REQUIRE_ORACLE(available, reason)                                                          \
  do {                                                                                                    \
    if (!(available)) {                                                                                   \
      if (::retort::testing::running_under_ci()) FAIL() << "under CI a missing oracle fails: " << reason; \
      GTEST_SKIP() << reason << " (a skip here; a failure under CI)";                                     \
    }                                                                                                     \
  } while (0)
