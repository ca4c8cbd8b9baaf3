// `retort distill compare` on a run that takes seconds: each method's overrides select what its row claims (the cache
// kind it wrote, the objective its student trained on, no cache where it reads none); the table and compare.json
// hold the figures of the per-method reports, and those are what `retort eval` finds for the same students; the
// cache bytes per token are the cache files' sizes over the rows their headers record; a resumed comparison keeps
// finished methods and runs a damaged or unfinished one again, to the same figures; a bad method name is an error
// naming distill.compare.methods and the valid names.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/util/error.h"
#include "distill/compare/compare_config.h"
#include "distill/compare/compare_methods.h"
#include "distill/compare/distill_compare.h"
#include "distill/compare/method_run.h"
#include "distill/distill_config.h"
#include "tests/distill/distill_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> compare_overrides(const fs::path& run_dir) {
  auto overrides = testing::pipeline_run_overrides(run_dir);
  // A sampled cache of 6 draws; validations every 4 steps, for the curves of the plot.
  overrides.insert(overrides.end(), {"distill.sample_k=6", "train.eval_every=4"});
  return overrides;
}

ResolvedConfig resolve_compare(const std::vector<std::string>& overrides) {
  Config config;
  config.apply_overrides(overrides);
  return config.resolve(compare_schema());
}

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

nlohmann::json read_json(const fs::path& file) {
  return nlohmann::json::parse(::retort::testing::read_bytes(file));
}

bool build_knows_on_policy() {
  return distill_schema().find("distill.on_policy_ratio") != nullptr;
}

// The whole comparison, once per test process.
const fs::path& finished_comparison() {
  static const fs::path dir = [] {
    const fs::path run = testing::fresh_dir("distill_compare");
    run_distillation_comparison(resolve_compare(compare_overrides(run)), Device::cpu(), RunStart::kNew);
    return run;
  }();
  return dir;
}

// A little-endian u64 of a cache shard's 256-byte header.
uint64_t header_u64(const fs::path& shard, size_t offset) {
  const std::string bytes = ::retort::testing::read_bytes(shard);
  uint64_t value = 0;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

std::vector<fs::path> shards_of(const fs::path& cache) {
  std::vector<fs::path> shards;
  for (const auto& entry : fs::directory_iterator(cache))
    if (entry.path().extension() == ".bin") shards.push_back(entry.path());
  return shards;
}

TEST(DistillCompare, EachMethodsOverridesSelectWhatItsRowClaims) {
  const fs::path& run = finished_comparison();
  EXPECT_TRUE(fs::exists(run / "teacher" / "checkpoints")) << "one teacher, trained once";
  EXPECT_FALSE(fs::exists(run / "label_only" / "cache")) << "label-only writes no cache";
  EXPECT_FALSE(fs::exists(run / "online" / "cache")) << "online reads the teacher, not a cache";
  EXPECT_EQ(read_json(run / "label_only" / "student" / "objective.json").at("name"), "labels");
  EXPECT_EQ(read_json(run / "online" / "student" / "objective.json").at("name"), "online");

  const auto renormalized = read_json(run / "topk_renormalized" / "student" / "objective.json");
  EXPECT_EQ(renormalized.at("name"), "topk_cache");
  EXPECT_EQ(renormalized.at("divergence"), "forward_kl_renormalized");
  const auto rest = read_json(run / "topk_rest" / "student" / "objective.json");
  EXPECT_EQ(rest.at("name"), "topk_cache");
  EXPECT_EQ(rest.at("divergence"), "forward_kl_rest");
  EXPECT_EQ(read_json(run / "topk_rest" / "cache" / "teacher.json").value("kind", "topk"), "topk");
  EXPECT_EQ(read_json(run / "topk_renormalized" / "cache" / "teacher.json").value("kind", "topk"), "topk");
  const auto sampled = read_json(run / "sampled" / "student" / "objective.json");
  EXPECT_EQ(sampled.at("name"), "sampled_cache");
  EXPECT_EQ(read_json(run / "sampled" / "cache" / "teacher.json").at("kind"), "sampled");
  // A sampled shard has format version 2 and cache kind 2 in its header.
  for (const fs::path& shard : shards_of(run / "sampled" / "cache")) EXPECT_EQ(header_u64(shard, 232) & 0xffffffff, 2u);
  for (const fs::path& shard : shards_of(run / "topk_rest" / "cache")) EXPECT_EQ(header_u64(shard, 8) & 0xffffffff, 1u);

  // Every student: the same shape, data, seed and steps; only the teacher signal differs.
  for (const char* method : {"label_only", "topk_renormalized", "topk_rest", "sampled", "online"}) {
    const auto metrics = testing::read_metrics(run / method / "student");
    EXPECT_EQ(metrics.size(), 12u) << method;
    EXPECT_EQ(read_json(run / method / "method.json").at("student_dir"), (run / method / "student").string());
  }

  // The on-policy row: a build without distill.on_policy_ratio reports it as not available, naming the key.
  const auto compare = read_json(run / "compare.json");
  ASSERT_EQ(compare.at("methods").size(), 6u);
  const auto& on_policy = compare.at("methods").at(5);
  EXPECT_EQ(on_policy.at("name"), "on_policy");
  if (!build_knows_on_policy()) {
    EXPECT_FALSE(on_policy.at("available").get<bool>());
    EXPECT_NE(on_policy.at("unavailable_reason").get<std::string>().find("distill.on_policy_ratio"), std::string::npos);
    const std::string table = ::retort::testing::read_bytes(run / "compare.md");
    EXPECT_NE(table.find("| on-policy | not available in this build |"), std::string::npos) << table;
    EXPECT_FALSE(fs::exists(run / "on_policy"));
  } else {
    EXPECT_TRUE(on_policy.at("available").get<bool>());
    EXPECT_FALSE(fs::exists(run / "on_policy" / "cache"));
  }
}

TEST(DistillCompare, AMethodOfKeysThisBuildLacksIsNotAvailableRatherThanAnError) {
  const ResolvedConfig base = comparison_base_config(resolve_compare(compare_overrides("/tmp/unused")));
  const MethodConfig future =
      method_config_of({"future", "future", {"distill.future_knob=1"}, true, false}, base, "/tmp/m", "/tmp/t");
  EXPECT_FALSE(future.config.has_value());
  EXPECT_NE(future.error.find("distill.future_knob"), std::string::npos) << future.error;
  const MethodConfig sampled = method_config_of(compare_methods().at(3), base, "/tmp/m", "/tmp/t");
  ASSERT_TRUE(sampled.config.has_value()) << sampled.error;
  EXPECT_EQ(sampled.config->get_string("distill.cache_kind"), "sampled");
  EXPECT_EQ(sampled.config->get_string("distill.cache_dir"), "/tmp/m/cache");
  EXPECT_EQ(sampled.config->get_string("run.dir"), "/tmp/m/student");
  EXPECT_EQ(sampled.config->get_string("distill.teacher"), "/tmp/t");
}

TEST(DistillCompare, TheTableHoldsTheFiguresEvalFindsForTheSameStudents) {
  const fs::path& run = finished_comparison();
  const auto compare = read_json(run / "compare.json");
  const std::string table = ::retort::testing::read_bytes(run / "compare.md");
  for (const auto& row : compare.at("methods")) {
    if (!row.at("available").get<bool>()) continue;
    const std::string name = row.at("name").get<std::string>();
    // compare.json repeats the method's own report.
    EXPECT_EQ(row, read_json(run / name / "method.json")) << name;
    // `retort eval --checkpoint STUDENT --teacher TEACHER` finds the same figures.
    RunEvaluationRequest request;
    request.run_dir = run / name / "student";
    request.teacher_dir = run / "teacher";
    const RunEvaluation eval = evaluate_run(request);
    const auto& figures = row.at("eval");
    EXPECT_NEAR(figures.at("loss").get<double>(), eval.report.loss, 1e-9) << name;
    EXPECT_NEAR(figures.at("kl_to_teacher").get<double>(), *eval.report.kl_to_teacher, 1e-9) << name;
    EXPECT_NEAR(figures.at("top1_agreement").get<double>(), *eval.report.top1_agreement, 1e-12) << name;
    EXPECT_NEAR(figures.at("bits_per_byte").get<double>(), *eval.report.bits_per_byte, 1e-9) << name;
    EXPECT_EQ(figures.at("tokens").get<int64_t>(), eval.report.tokens) << name;
    // The Markdown row of the method carries the same numbers.
    const std::string expected_row =
        fmt::format("| {} | {:.4f} | {:.4f} | {:.4f} | {:.1f}% | {:.1f} |", row.at("title").get<std::string>(),
                    eval.report.loss, *eval.report.bits_per_byte, *eval.report.kl_to_teacher,
                    100 * *eval.report.top1_agreement, row.at("cache_bytes_per_token").get<double>());
    EXPECT_NE(table.find(expected_row), std::string::npos) << expected_row << "\n" << table;
    EXPECT_NEAR(row.at("wall_seconds").get<double>(),
                row.at("cache_seconds").get<double>() + row.at("train_seconds").get<double>(), 1e-9);
  }
  // The plot draws one held-out curve per available method.
  const std::string svg = ::retort::testing::read_bytes(run / "compare_curves.svg");
  for (const char* title :
       {"label-only", "top-k renormalised", "top-k + rest bucket", "sampled KD", "online full-distribution KD"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;
}

TEST(DistillCompare, CacheBytesPerTokenAreTheCacheFilesOverTheRowsTheirHeadersRecord) {
  const fs::path& run = finished_comparison();
  const int k = 8, sample_k = 6;  // f32 values (compare_overrides)
  for (const auto& [method, record_bytes] :
       std::vector<std::pair<std::string, int64_t>>{{"topk_renormalized", 4 * k + 4 * k + 4},
                                                    {"topk_rest", 4 * k + 4 * k + 4},
                                                    {"sampled", 4 * sample_k + 2 * sample_k + 4 * sample_k + 4}}) {
    const fs::path cache = run / method / "cache";
    int64_t bytes = 0, rows = 0;
    const std::vector<fs::path> shards = shards_of(cache);
    ASSERT_FALSE(shards.empty()) << method;
    for (const auto& entry : fs::directory_iterator(cache)) bytes += static_cast<int64_t>(fs::file_size(entry.path()));
    for (const fs::path& shard : shards) rows += static_cast<int64_t>(header_u64(shard, 48));  // rows of the shard
    EXPECT_EQ(rows, static_cast<int64_t>(header_u64(shards.front(), 56))) << "rows of the whole cache";
    const auto report = read_json(run / method / "method.json");
    EXPECT_EQ(report.at("cache_tokens").get<int64_t>(), rows) << method;
    EXPECT_EQ(report.at("cache_file_bytes").get<int64_t>(), bytes) << method;
    EXPECT_DOUBLE_EQ(report.at("cache_bytes_per_token").get<double>(), static_cast<double>(bytes) / rows) << method;
    // What the files hold: 256-byte headers, one record a row, and teacher.json.
    EXPECT_EQ(bytes, 256 * static_cast<int64_t>(shards.size()) + record_bytes * rows +
                         static_cast<int64_t>(fs::file_size(cache / "teacher.json")))
        << method;
  }
  for (const char* method : {"label_only", "online"}) {
    const auto report = read_json(run / method / "method.json");
    EXPECT_EQ(report.at("cache_bytes_per_token").get<double>(), 0.0) << method;
    EXPECT_EQ(report.at("cache_seconds").get<double>(), 0.0) << method;
  }
}

TEST(DistillCompare, AResumeKeepsFinishedMethodsAndRunsADamagedOrUnfinishedOneAgain) {
  const fs::path run = testing::fresh_dir("distill_compare_resumed");
  auto overrides = compare_overrides(run);
  overrides.push_back("distill.compare.methods=[label_only, topk_rest, sampled]");
  run_distillation_comparison(resolve_compare(overrides), Device::cpu(), RunStart::kNew);
  const std::string refused =
      input_error_of([&] { run_distillation_comparison(resolve_compare(overrides), Device::cpu(), RunStart::kNew); });
  EXPECT_NE(refused.find(run.string()), std::string::npos) << refused;
  EXPECT_NE(refused.find("--resume"), std::string::npos) << refused;
  const ComparisonReport kept =
      run_distillation_comparison(resolve_compare(overrides), Device::cpu(), RunStart::kResume);
  for (const MethodResult& m : kept.methods)
    if (m.available) {
      EXPECT_TRUE(m.reused) << m.name << ": finished, so not run again";
    }

  // A truncated record and a method that stopped before its record: both run again, to the same figures.
  const std::string rest_record = ::retort::testing::read_bytes(run / "topk_rest" / "method.json");
  std::ofstream(run / "topk_rest" / "method.json") << rest_record.substr(0, rest_record.size() / 2);
  fs::remove(run / "sampled" / "method.json");
  const ComparisonReport resumed =
      run_distillation_comparison(resolve_compare(overrides), Device::cpu(), RunStart::kResume);
  for (size_t i = 0; i < resumed.methods.size(); ++i) {
    const MethodResult& m = resumed.methods[i];
    if (!m.available) continue;
    const bool redone = m.name == "topk_rest" || m.name == "sampled";
    EXPECT_EQ(m.reused, !redone) << m.name;
    EXPECT_EQ(m.eval.loss, kept.methods[i].eval.loss) << m.name << ": the same run gives the same figures";
    EXPECT_EQ(m.eval.kl_to_teacher, kept.methods[i].eval.kl_to_teacher) << m.name;
    if (redone) {
      EXPECT_GT(m.train_seconds, 0.0) << m.name;
      EXPECT_EQ(testing::read_metrics(run / m.name / "student").size(), 12u) << m.name << ": once, whole";
    }
  }
  EXPECT_TRUE(read_json(run / "topk_rest" / "method.json").at("available").get<bool>());
}

TEST(DistillCompare, ABadMethodNameIsAnErrorNamingTheKeyAndTheValidNames) {
  auto overrides = compare_overrides("/tmp/unused");
  overrides.push_back("distill.compare.methods=[label_only, topk]");
  const std::string bad = input_error_of([&] { resolve_compare(overrides); });
  EXPECT_NE(bad.find("distill.compare.methods"), std::string::npos) << bad;
  for (const CompareMethod& method : compare_methods()) EXPECT_NE(bad.find(method.name), std::string::npos) << bad;
  overrides.back() = "distill.compare.methods=[]";
  EXPECT_NE(input_error_of([&] { resolve_compare(overrides); }).find("distill.compare.methods"), std::string::npos);

  // A subset runs in the table's order, whatever order it is listed in.
  overrides.back() = "distill.compare.methods=[online, label_only]";
  const std::vector<CompareMethod> picked = selected_methods(resolve_compare(overrides));
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0].name, "label_only");
  EXPECT_EQ(picked[1].name, "online");
}

}  // namespace
}  // namespace retort::distill
