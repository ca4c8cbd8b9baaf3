#pragma once
// PyTorch as an external oracle for every loss family of loss_family_harness.h: the suite writes each family's
// problems as safetensors files into a folder of its own, runs the family's tests/losses/torch_*.py script once
// over all of them (importing torch costs more than the losses), and compares every rank's loss and LOCAL
// gradient with the references the script writes back. The tests skip when RETORT_PYTHON (Debian's
// /usr/bin/python3) cannot import torch.
//
// A family adds: kTorchScript; torch_cases(); torch_problem(c, job) -> TorchProblem (the tensors and metadata its
// script reads); torch_references(c, options) -> the names of the references a job is compared with ("" for the
// plain "loss" / "grad" pair, else "<name>_loss" / "<name>_grad"); torch_tolerance(dtype); torch_grad_unit(options,
// problem) (the floor of the gradient error); torch_loss_is_infinite(c).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/io/safetensors.h"
#include "core/tensor/tensor.h"
#include "loss_family_harness.h"
#include "tests/test_support.h"

namespace retort::loss_testing {

using ::retort::testing::python_has_torch_and_numpy;

// What a family's script reads for one job.
struct TorchProblem {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// The scratch folder of one run of the suite: inputs written there, one script run per family, references read
// back. A failed script run (with its output) is kept and fails every test of its family.
class TorchScratch {
 public:
  // Names the folder and makes it; false, with nothing made, when torch is missing.
  static bool open() {
    folder() = std::filesystem::temp_directory_path() / ("retort_loss_torch_" + std::to_string(::getpid()));
    if (!python_has_torch_and_numpy()) return false;
    std::filesystem::create_directories(folder());
    return true;
  }
  static void close() {
    std::error_code ignored;
    std::filesystem::remove_all(folder(), ignored);
    errors().clear();
  }
  static std::filesystem::path input_path(const std::string& stem) { return folder() / (stem + ".in.safetensors"); }
  static std::filesystem::path reference_path(const std::string& stem) {
    return folder() / (stem + ".ref.safetensors");
  }
  // The script's arguments for one problem: its input file and where the reference goes.
  static std::string pair_args(const std::string& stem) {
    return " '" + input_path(stem).string() + "' '" + reference_path(stem).string() + "'";
  }
  static SafetensorsFile load_reference(const std::string& stem) { return load_safetensors(reference_path(stem)); }

  // Runs tests/losses/<script> on `args`; a failure is recorded under the script's name with its output.
  static void run_script(const std::string& script, const std::string& args) {
    const auto log = folder() / (script + ".log");
    const std::string command = std::string(RETORT_PYTHON " '") + RETORT_SOURCE_DIR + "/tests/losses/" + script + "'" +
                                args + " > '" + log.string() + "' 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ostringstream text;
      text << std::ifstream(log).rdbuf();
      errors()[script] = command + "\n" + text.str();
    }
  }
  // What went wrong running `script` ("" when nothing did).
  static std::string failure(const std::string& script) {
    const auto it = errors().find(script);
    return it == errors().end() ? "" : it->second;
  }

 private:
  static std::filesystem::path& folder() {
    static std::filesystem::path path;
    return path;
  }
  static std::map<std::string, std::string>& errors() {
    static std::map<std::string, std::string> by_script;
    return by_script;
  }
};

// The file stem of job `k` of a family's torch case.
template <typename F>
std::string torch_stem(const typename F::Case& c, size_t k) {
  return std::string(F::kName) + "_" + c.name + "_" + std::to_string(k);
}

// The tensor names of reference `name` in a script's output.
inline std::string torch_key(const std::string& name, const std::string& what) {
  return name.empty() ? what : name + "_" + what;
}

// Writes every job of F's torch cases (the global problems of tp 2) and runs F's script over them, the first time
// one of F's tests asks (so a filtered run, as ctest's one test a process, pays only for the families it checks).
template <typename F>
void prepare_torch_references() {
  static bool done = false;
  if (done) return;
  done = true;
  std::string args;
  for (const typename F::Case& c : F::torch_cases()) {
    const CaseJobs<F> cj = F::jobs_for(c, 2);
    for (size_t k = 0; k < cj.jobs.size(); ++k) {
      const TorchProblem t = F::torch_problem(c, cj.jobs[k]);
      save_safetensors(TorchScratch::input_path(torch_stem<F>(c, k)), t.tensors, t.metadata);
      args += TorchScratch::pair_args(torch_stem<F>(c, k));
    }
  }
  TorchScratch::run_script(F::kTorchScript, args);
}

// For tp 1 and 2 and f64 and f32 logits (the side input in the same dtype), the jobs of `c` on the global
// problems the references were made of (those of tp 2) split tp ways, on the CPU: every rank's loss and LOCAL
// gradient within F's torch tolerance of each reference the job is compared with.
template <typename F>
void expect_matches_torch(const typename F::Case& c) {
  for (int tp : {1, 2}) {
    CaseJobs<F> cj = F::jobs_for(c, 2);
    for (auto& p : cj.problems) p.vocab_local = p.vocab / tp;
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + " " + dtype_str(dtype));
      const auto results = run_tp<F>(c, cj.jobs, tp, dtype, dtype, Device::cpu());
      const Tolerance tol = F::torch_tolerance(dtype);
      for (size_t k = 0; k < cj.jobs.size(); ++k) {
        const Job<F>& job = cj.jobs[k];
        const typename F::Problem& p = *job.problem;
        SCOPED_TRACE(F::job_label(job.options));
        const SafetensorsFile ref = TorchScratch::load_reference(torch_stem<F>(c, k));
        for (const std::string& name : F::torch_references(c, job.options)) {
          SCOPED_TRACE(name);
          const double torch_loss = ref.get(torch_key(name, "loss")).to_doubles()[0];
          const std::vector<double> torch_grad = ref.get(torch_key(name, "grad")).to_doubles();
          if (F::torch_loss_is_infinite(c)) {
            EXPECT_EQ(torch_loss, kInf);
          } else {
            ASSERT_TRUE(std::isfinite(torch_loss));
          }
          const double unit = F::torch_grad_unit(job.options, p);
          for (int r = 0; r < tp; ++r) {
            const RankResult& got = results[k][static_cast<size_t>(r)];
            const double le = loss_error(got.loss, torch_loss);
            const double ge = grad_error(got.grad, column_slice(torch_grad, p, r), unit);
            EXPECT_LE(le, tol.loss) << "rank " << r << ": " << got.loss << " vs torch " << torch_loss;
            EXPECT_LE(ge, tol.grad) << "rank " << r;
            F::Log::get().note(
                std::string(F::kLogPrefix) + "cpu vs torch " + (name.empty() ? "" : name + " ") + dtype_str(dtype), le,
                ge);
          }
        }
      }
    }
  }
}

template <typename F>
std::vector<NamedCheck> torch_checks() {
  std::vector<NamedCheck> out;
  for (const typename F::Case& c : F::torch_cases())
    out.push_back({std::string(F::kName) + "_" + c.name, [c] {
                     prepare_torch_references<F>();
                     const std::string failure = TorchScratch::failure(F::kTorchScript);
                     ASSERT_TRUE(failure.empty()) << failure;
                     expect_matches_torch<F>(c);
                   }});
  return out;
}

}  // namespace retort::loss_testing
