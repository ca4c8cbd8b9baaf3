#pragma once
// PyTorch as an external oracle for the loss tests: a suite writes its problems as safetensors files into a
// folder of its own, runs one tests/losses/torch_*.py script over all of them (importing torch costs more than
// the losses), and compares against the references the script writes back. The tests skip when
// RETORT_PYTHON (Debian's /usr/bin/python3) cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/io/safetensors.h"
#include "core/tensor/tensor.h"
#include "loss_test_support.h"

namespace retort::loss_testing {

inline bool python_has_torch() {
  static const bool ok = std::system(RETORT_PYTHON " -c 'import torch' > /dev/null 2>&1") == 0;
  return ok;
}

// The fixture of a suite of parameterized tests (one Param per case) checked against a torch script.
template <typename Param>
class TorchOracleSuite : public ::testing::TestWithParam<Param> {
 protected:
  // Names this suite's folder after `tag` and makes it; false, with nothing made, when torch is missing.
  static bool open_scratch(const std::string& tag) {
    scratch_ = std::filesystem::temp_directory_path() / ("retort_" + tag + "_torch_" + std::to_string(::getpid()));
    if (!python_has_torch()) return false;
    std::filesystem::create_directories(scratch_);
    return true;
  }
  static std::filesystem::path input_path(const std::string& stem) { return scratch_ / (stem + ".in.safetensors"); }
  static std::filesystem::path reference_path(const std::string& stem) {
    return scratch_ / (stem + ".ref.safetensors");
  }
  // The script's arguments for one problem: its input file and where the reference goes.
  static std::string pair_args(const std::string& stem) {
    return " '" + input_path(stem).string() + "' '" + reference_path(stem).string() + "'";
  }
  static SafetensorsFile load_reference(const std::string& stem) { return load_safetensors(reference_path(stem)); }

  // Runs tests/losses/<script> on `args`; a failure (with the script's output) fails every test of the suite.
  static void run_script(const std::string& script, const std::string& args) {
    const auto log = scratch_ / "torch.log";
    const std::string command = std::string(RETORT_PYTHON " '") + RETORT_SOURCE_DIR + "/tests/losses/" + script + "'" +
                                args + " > '" + log.string() + "' 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ostringstream text;
      text << std::ifstream(log).rdbuf();
      error_ = new std::string(command + "\n" + text.str());
    }
  }

  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_, ignored);
    delete error_;
    error_ = nullptr;
  }
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << RETORT_PYTHON " cannot import torch (Debian's python3-torch)";
    ASSERT_EQ(error_, nullptr) << *error_;
  }

 private:
  static inline std::filesystem::path scratch_;
  static inline std::string* error_ = nullptr;
};

// Every rank's loss and LOCAL gradient ([rank] of one job) against the torch reference `name` in `ref`
// (<name>_loss [1], <name>_grad over the whole vocabulary; p: rows, vocab, vocab_local), the gradient error
// measured on at least `unit`; the errors are noted in Log under `label`.
template <typename Log, typename Problem>
void expect_ranks_match_torch(const SafetensorsFile& ref, const std::string& name, const std::vector<RankResult>& ranks,
                              const Problem& p, double unit, const Tolerance& tol, const std::string& label) {
  const double torch_loss = ref.get(name + "_loss").to_doubles()[0];
  const std::vector<double> torch_grad = ref.get(name + "_grad").to_doubles();
  ASSERT_TRUE(std::isfinite(torch_loss));
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const double le = loss_error(ranks[r].loss, torch_loss);
    const double ge = grad_error(ranks[r].grad, column_slice(torch_grad, p, r), unit);
    expect_close_to_torch(r, ranks[r].loss, torch_loss, le, ge, tol);
    Log::get().note(label, le, ge);
  }
}

// The batched (KD and top-k) torch tests: for tp 1 and 2 and f64 and f32 logits, the jobs of `c` on the global
// problems the references were made of (those for tp 2) split tp ways, run on the CPU; check(dtype, jobs,
// results) compares each job's [rank] results with its reference. jobs_for and run_tp are the ones of the
// suite's own test support, found by the namespace of its Case.
template <typename Case, typename Check>
void check_split_jobs(const Case& c, Check&& check) {
  for (int tp : {1, 2}) {
    auto cj = jobs_for(c, 2);
    for (auto& entry : cj.problems) entry.second.vocab_local = entry.second.vocab / tp;
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + " " + std::string(dtype_name(dtype)));
      check(dtype, cj.jobs, run_tp(c, cj.jobs, tp, dtype, dtype, Device::cpu()));
    }
  }
}

}  // namespace retort::loss_testing
