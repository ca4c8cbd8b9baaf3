// `retort distill align` through the real binary: two SentencePiece tokenizers trained here read a text; --json
// prints one JSON object whose token counts are the tokenizers' own (counted here with encode), whose shapes add up
// to the chunks, and whose string alignment agrees with the offsets; the text form names the figures; a corpus
// folder is cut at --max-bytes; giving both --text and --corpus is an input error (status 2) that says what to give.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/data/tokenizer.h"
#include "tests/apps/binary_output_support.h"
#include "tests/test_support.h"

namespace retort::apps {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::read_bytes;
using ::retort::testing::write_bytes;

class DistillAlignCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = new ::retort::testing::TempFolder("distill_align_command");
    const std::vector<std::string> documents = data::split_documents(read_bytes("/usr/share/games/fortunes/wisdom"));
    for (const auto& [name, size] : {std::pair{"a.model", 350}, std::pair{"b.model", 900}}) {
      data::TokenizerTrainOptions options;
      options.vocab_size = size;
      options.model_path = folder_->path() / name;
      data::Tokenizer::train(documents, options);
    }
    text_ = "The year 2026 had 365 days; 12345 x 678 = 8369910.\nfor (i = 0; i < n; ++i) s += a[i];\n日本語 ✓ café\n";
    write_bytes(folder_->path() / "text.txt", text_);
  }
  static void TearDownTestSuite() { delete folder_; }
  static fs::path path(const std::string& name) { return folder_->path() / name; }
  static inline ::retort::testing::TempFolder* folder_ = nullptr;
  static inline std::string text_;
};

std::vector<std::string> align_args(std::vector<std::string> extra) {
  std::vector<std::string> args{"distill", "align"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST_F(DistillAlignCommand, JsonCountsTheTokenizersTokensAndTheShapesAddUp) {
  const fs::path out = path("out.json"), err = path("err.log");
  const int status = apps_testing::run_retort_to_files(
      align_args({"--student-tokenizer", path("a.model"), "--teacher-tokenizer", path("b.model"), "--text",
                  path("text.txt"), "--strings", "--json"}),
      out.string(), err.string());
  ASSERT_EQ(status, 0) << read_bytes(err);
  const std::string printed = read_bytes(out);
  EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 1) << printed;
  const nlohmann::json j = nlohmann::json::parse(printed);
  const data::Tokenizer a = data::Tokenizer::load(path("a.model")), b = data::Tokenizer::load(path("b.model"));
  EXPECT_EQ(j.at("documents"), 1);
  EXPECT_EQ(j.at("bytes"), int64_t(text_.size()));
  EXPECT_EQ(j.at("characters"), int64_t(text_.size()) - 2 * 3 - 2 - 1);  // 日本語: 3 x 3 bytes, ✓ 3 bytes, é 2
  const nlohmann::json& offsets = j.at("offsets");
  EXPECT_EQ(offsets.at("student_tokens"), int64_t(a.encode(text_).size()));
  EXPECT_EQ(offsets.at("teacher_tokens"), int64_t(b.encode(text_).size()));
  int64_t by_shape = 0;
  for (const auto& [shape, count] : offsets.at("chunks_by_shape").items()) by_shape += count.get<int64_t>();
  EXPECT_EQ(by_shape, offsets.at("chunks").get<int64_t>());
  // The same text read by two tokenizers with identity normalisation: every chunk is correct.
  EXPECT_EQ(offsets.at("correct_chunks"), offsets.at("chunks"));
  EXPECT_DOUBLE_EQ(offsets.at("student_share_aligned").get<double>(), 1.0);
  EXPECT_GT(offsets.at("chunks_by_shape").at("1:N").get<int64_t>() +
                offsets.at("chunks_by_shape").at("N:1").get<int64_t>() +
                offsets.at("chunks_by_shape").at("N:M").get<int64_t>(),
            0);
  EXPECT_GT(j.at("characters_per_second").get<double>(), 0.0);
  EXPECT_EQ(j.at("strings").at("documents_equal_to_offsets"), 1);
  EXPECT_TRUE(j.at("warning").is_null());
}

TEST_F(DistillAlignCommand, TextReportAndACorpusCutAtMaxBytes) {
  const apps_testing::CommandOutput text = apps_testing::run_retort(align_args(
      {"--student-tokenizer", path("a.model"), "--teacher-tokenizer", path("b.model"), "--text", path("text.txt")}));
  ASSERT_EQ(text.exit_code, 0) << text.text;
  for (const char* expected : {"offset alignment", "1:N", "student-only", "characters/s on one core", "tokenizing"}) {
    EXPECT_NE(text.text.find(expected), std::string::npos) << expected << " missing from:\n" << text.text;
  }
  const fs::path out = path("corpus.json");
  ASSERT_EQ(apps_testing::run_retort_to_files(
                align_args({"--student-tokenizer", path("a.model"), "--teacher-tokenizer", path("b.model"), "--corpus",
                            "/usr/share/games/fortunes/debian", "--max-bytes", "5000", "--json"}),
                out.string(), path("corpus.log").string()),
            0)
      << read_bytes(path("corpus.log"));
  const nlohmann::json j = nlohmann::json::parse(read_bytes(out));
  EXPECT_EQ(j.at("bytes"), 5000);
  EXPECT_GT(j.at("documents").get<int64_t>(), 5);
}

TEST_F(DistillAlignCommand, BothTextAndCorpusIsAnInputError) {
  const apps_testing::CommandOutput both =
      apps_testing::run_retort(align_args({"--student-tokenizer", path("a.model"), "--teacher-tokenizer",
                                           path("b.model"), "--text", path("text.txt"), "--corpus", path("text.txt")}));
  EXPECT_EQ(both.exit_code, 2) << both.text;
  EXPECT_NE(both.text.find("--text FILE or --corpus SPEC"), std::string::npos) << both.text;
}

}  // namespace
}  // namespace retort::apps
