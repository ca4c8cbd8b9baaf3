#pragma once
// The PyTorch twin (llm.c's test_gpt2 approach): the C++ side writes a GptModel's weights, a batch and the
// config to a safetensors file; scripts/torch_twin.py rebuilds the same GPT from plain torch ops in float64
// and writes reference logits, loss, gradients and AdamW trajectories; the tests compare. Shared by the
// model test (tests/parallel) and the optimizer test (tests/optim), which links AdamW.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/io/safetensors.h"
#include "core/tensor/tensor.h"
#include "parallel/models/gpt_model.h"
#include "tests/test_support.h"

namespace retort::twin {

struct TwinCase {
  std::string name;  // a gtest-friendly label: letters, digits, underscores
  GptConfig config;
  int64_t batch = 3;
  int64_t seq = 11;
  uint64_t seed = 20240611;
  // AdamW steps for the script to take: one per learning rate; none when empty.
  std::vector<double> lrs;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip_norm = 0.0;  // global gradient-norm clip before each step; 0 disables
};

// A tiny GPT where no dimension is a power of two, so layout mistakes cannot hide behind even splits.
inline GptConfig tiny_config(int64_t n_head, bool tie_weights, const std::string& norm, bool bias = true) {
  GptConfig c;
  c.vocab_size = 67;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = n_head;
  c.n_embd = n_head == 4 ? 36 : 30;  // head dims 9 and 15
  c.mlp_ratio = 3;
  c.bias = bias;
  c.tie_weights = tie_weights;
  c.norm = norm;
  return c;
}

// gtest prints a parameter with this instead of its bytes.
inline void PrintTo(const TwinCase& c, std::ostream* out) {
  *out << c.name;
}

inline std::string gtest_case_name(const ::testing::TestParamInfo<TwinCase>& info) {
  return info.param.name;
}

// Deterministic ids and targets (splitmix64); every fourth target, starting at the second, is the ignore
// index, so the mean must count only the valid rows.
inline std::pair<Tensor, Tensor> make_batch(const TwinCase& c) {
  uint64_t state = c.seed ^ 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const int64_t n = c.batch * c.seq;
  std::vector<int32_t> ids(n), targets(n);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = static_cast<int32_t>(next() % static_cast<uint64_t>(c.config.vocab_size));
    targets[i] = i % 4 == 1 ? -100 : static_cast<int32_t>(next() % static_cast<uint64_t>(c.config.vocab_size));
  }
  return {Tensor::from_ints(ids, {c.batch, c.seq}), Tensor::from_ints(targets, {c.batch, c.seq})};
}

// The model of a case, initialised from its seed: tests rebuild it instead of sharing mutable state.
inline std::unique_ptr<GptModel> make_model(const TwinCase& c) {
  auto model = std::make_unique<GptModel>(c.config);
  model->initialize(c.seed);
  return model;
}

inline std::string number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

inline std::map<std::string, std::string> case_metadata(const TwinCase& c) {
  const GptConfig& g = c.config;
  std::map<std::string, std::string> m = {
      {"vocab_size", std::to_string(g.vocab_size)},
      {"block_size", std::to_string(g.block_size)},
      {"n_layer", std::to_string(g.n_layer)},
      {"n_head", std::to_string(g.n_head)},
      {"n_embd", std::to_string(g.n_embd)},
      {"mlp_ratio", std::to_string(g.mlp_ratio)},
      {"bias", g.bias ? "true" : "false"},
      {"tie_weights", g.tie_weights ? "true" : "false"},
      {"norm", g.norm},
      {"norm_eps", number(g.norm_eps)},
  };
  if (!c.lrs.empty()) {
    std::string lrs;
    for (double lr : c.lrs) {
      if (!lrs.empty()) lrs += ',';
      lrs += number(lr);
    }
    m["adamw_lrs"] = lrs;
    m["adamw_beta1"] = number(c.beta1);
    m["adamw_beta2"] = number(c.beta2);
    m["adamw_eps"] = number(c.eps);
    m["adamw_weight_decay"] = number(c.weight_decay);
    m["clip_norm"] = number(c.clip_norm);
  }
  return m;
}

using ::retort::testing::python_has_torch_and_numpy;

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes every case's input file into `dir` and runs the script once over all of them (importing torch
// costs more than the twins). Returns the references in case order, or throws with the script's output.
inline std::vector<SafetensorsFile> run_twins(const std::vector<TwinCase>& cases, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::string args;
  for (const TwinCase& c : cases) {
    auto model = make_model(c);
    auto [ids, targets] = make_batch(c);
    NamedTensors tensors = model->named_parameters();
    tensors.emplace_back("input_ids", ids);
    tensors.emplace_back("targets", targets);
    const auto in = dir / (c.name + ".in.safetensors"), out = dir / (c.name + ".ref.safetensors");
    save_safetensors(in, tensors, case_metadata(c));
    args += " '" + in.string() + "' '" + out.string() + "'";
  }
  const auto log = dir / "torch_twin.log";
  const std::string command = std::string(RETORT_PYTHON " '") + RETORT_SOURCE_DIR + "/scripts/torch_twin.py'" + args +
                              " > '" + log.string() + "' 2>&1";
  if (std::system(command.c_str()) != 0)
    throw std::runtime_error("scripts/torch_twin.py failed:\n" + command + "\n" + read_text(log));
  std::vector<SafetensorsFile> refs;
  for (const TwinCase& c : cases) refs.push_back(load_safetensors(dir / (c.name + ".ref.safetensors")));
  return refs;
}

// A fresh directory per process and suite, so concurrent test runs do not share files.
inline std::filesystem::path scratch_dir(const std::string& suite) {
  return std::filesystem::temp_directory_path() / ("retort_torch_twin_" + suite + "_" + std::to_string(::getpid()));
}

// The fixture of a twin suite, one test per TwinCase. Suite (the derived fixture, CRTP) provides
//   static std::vector<TwinCase> cases();       the cases, the same list INSTANTIATE_TEST_SUITE_P takes
//   static constexpr const char* kScratch;      its scratch_dir() name
// The script runs once for the whole suite, because importing torch costs more than all the twins. Each test
// starts with reference() already found: SetUp skips the test when torch is missing and fails it when the
// script failed, so a test body only compares.
template <typename Suite>
class TwinSuite : public ::testing::TestWithParam<TwinCase> {
 protected:
  static void SetUpTestSuite() {
    if (!python_has_torch_and_numpy()) return;
    try {
      refs_ = new std::vector<SafetensorsFile>(run_twins(Suite::cases(), scratch_dir(Suite::kScratch)));
    } catch (const std::exception& e) {
      error_ = new std::string(e.what());
    }
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir(Suite::kScratch), ignored);
    delete refs_;
    delete error_;
    refs_ = nullptr;
    error_ = nullptr;
  }

  void SetUp() override {
    RETORT_REQUIRE_ORACLE(python_has_torch_and_numpy(), RETORT_PYTHON
                          " cannot import torch and numpy: install Debian's "
                          "python3-torch and python3-numpy to run the "
                          "PyTorch twin");
    ASSERT_TRUE(error_ == nullptr) << *error_;
    const auto cases = Suite::cases();
    for (size_t i = 0; i < cases.size(); ++i)
      if (cases[i].name == GetParam().name) reference_ = &(*refs_)[i];
    ASSERT_NE(reference_, nullptr) << "no reference for case " << GetParam().name;
  }

  // torch's outputs for the running case.
  const SafetensorsFile& reference() const { return *reference_; }

 private:
  static inline std::vector<SafetensorsFile>* refs_ = nullptr;
  static inline std::string* error_ = nullptr;
  const SafetensorsFile* reference_ = nullptr;
};

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// max |a - e| / max |e|: the error scaled by the reference's range, so near-zero entries do not dominate.
inline double rel_max_abs_diff(const std::vector<double>& actual, const std::vector<double>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double d = 0;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i)
    d = std::max(d, std::abs(actual[i] - expected[i]));
  const double scale = max_abs(expected);
  return scale > 0 ? d / scale : d;
}

// ||a - e|| / ||e|| (the absolute error when the reference is exactly zero).
inline double rel_l2(const std::vector<double>& actual, const std::vector<double>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    diff += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The worst per-parameter relative L2 error between the model's tensors (`pick` chooses value or gradient)
// and the reference's tensors named prefix + parameter name; fails any parameter the reference lacks.
template <typename Pick>
std::pair<std::string, double> worst_param_error(const GptModel& model, const SafetensorsFile& ref,
                                                 const std::string& prefix, Pick pick, double tolerance) {
  std::pair<std::string, double> worst{"", -1.0};
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor t = pick(p);
    EXPECT_TRUE(t.defined()) << name << " has no tensor to compare";
    EXPECT_TRUE(ref.contains(prefix + name)) << "the reference has no " << prefix + name;
    if (!t.defined() || !ref.contains(prefix + name)) continue;
    EXPECT_EQ(t.shape(), ref.get(prefix + name).shape()) << name;
    const double err = rel_l2(t.to_doubles(), ref.get(prefix + name).to_doubles());
    EXPECT_LT(err, tolerance) << prefix + name;
    if (err > worst.second) worst = {name, err};
  }
  return worst;
}

}  // namespace retort::twin
