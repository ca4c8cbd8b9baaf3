// `retort generate` end to end on a tiny trained run: the JSON lines hold every field and agree with the tokenizer,
// batching changes no text, a stop string cuts the streamed and the written text, prompt files in both formats,
// the errors of bad input (each a clear InputError, or exit status 2 from the binary), and the same greedy text from
// two tensor-parallel processes as from one.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/tensor/device.h"
#include "core/util/error.h"
#include "distill/train/generate_from_run.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "parallel/generate/prompts_file.h"
#include "tests/apps/binary_output_support.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = testing::fresh_dir("generate_run");
    run_label_training(testing::resolve(testing::tiny_overrides(run_dir_)), Device::cpu(), false);
  }

  static GenerationRequest args_for(const std::string& prompt) {
    GenerationRequest a;
    a.run_dir = run_dir_.string();
    a.prompt = prompt;
    a.max_new_tokens = 8;
    return a;
  }

  static data::Tokenizer tokenizer() { return load_run_tokenizer(load_trained_model(run_dir_, Device::cpu())); }

  static fs::path write_file(const std::string& name, const std::string& text) {
    const fs::path file = fs::temp_directory_path() / ("retort_test_generate_" + name);
    std::ofstream(file) << text;
    return file;
  }

  static std::vector<nlohmann::json> read_jsonl(const fs::path& file) {
    std::vector<nlohmann::json> records;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
    return records;
  }

  static inline fs::path run_dir_;
};

std::string input_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST_F(GenerateCommand, JsonLinesHoldEveryFieldAndBatchingChangesNoText) {
  const std::vector<std::string> prompts = {"The computer", "A program is", "Unix"};
  GenerationRequest a;
  a.run_dir = run_dir_.string();
  a.prompts_file = write_file("three.txt", prompts[0] + "\n\n" + prompts[1] + "\n" + prompts[2] + "\n").string();
  a.max_new_tokens = 6;
  a.temperature = 1.0;
  a.seed = 5;
  a.batch_size = 3;
  a.output = (fs::temp_directory_path() / "retort_test_generate_out" / "all.jsonl").string();
  std::ostringstream printed;
  const auto records = generate_from_run(a, printed);
  const auto lines = read_jsonl(a.output);
  ASSERT_EQ(lines.size(), 3u);
  const data::Tokenizer tok = tokenizer();
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    for (const char* key :
         {"prompt", "completion", "new_tokens", "prompt_tokens", "finish_reason", "tokens_per_second", "prefill_ms"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["prompt"], prompts[i]);
    EXPECT_EQ(j["completion"], records[i].completion);
    EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), static_cast<int64_t>(tok.encode(prompts[i]).size()));
    const std::string reason = j["finish_reason"];
    EXPECT_TRUE(reason == "max_new_tokens" || reason == "end_of_text") << reason;
    EXPECT_EQ(j["new_tokens"].get<int64_t>() == 6, reason == "max_new_tokens");
    EXPECT_GT(j["prefill_ms"].get<double>(), 0.0);
    if (j["new_tokens"].get<int64_t>() > 1) {
      EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
    }
    EXPECT_NE(printed.str().find(fmt::format("### prompt {}", i)), std::string::npos);
    EXPECT_NE(printed.str().find(prompts[i] + records[i].completion), std::string::npos);
  }
  // Each prompt keeps its global index as its sequence id, so batches of one give the same text.
  a.batch_size = 1;
  a.output.clear();
  std::ostringstream again;
  const auto one_by_one = generate_from_run(a, again);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(one_by_one[i].completion, records[i].completion) << i;
  EXPECT_EQ(again.str(), printed.str());
}

TEST_F(GenerateCommand, AStopStringCutsTheStreamedAndWrittenText) {
  GenerationRequest a = args_for("The computer");
  a.temperature = 0;
  a.max_new_tokens = 10;
  std::ostringstream free_out;
  const std::string full = generate_from_run(a, free_out).at(0).completion;
  ASSERT_FALSE(full.empty()) << "the greedy completion is empty: nothing to cut";
  EXPECT_EQ(free_out.str(), "The computer" + full + "\n");
  const std::string stop = full.substr(full.size() / 2, 1);
  const std::string want = full.substr(0, full.find(stop));
  a.stop = {"zzzz", stop == "\n" ? "\\n" : stop};
  a.output = (fs::temp_directory_path() / "retort_test_generate_stop.jsonl").string();
  std::ostringstream cut_out;
  const auto cut = generate_from_run(a, cut_out);
  EXPECT_EQ(cut.at(0).completion, want);
  EXPECT_EQ(cut[0].finish_reason, "stop_string");
  EXPECT_EQ(cut_out.str(), "The computer" + want + "\n");
  const auto lines = read_jsonl(a.output);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["completion"], want);
  EXPECT_EQ(lines[0]["finish_reason"], "stop_string");
}

TEST_F(GenerateCommand, ALongPromptEndsAtTheContext) {
  // The tiny model's context is 16 tokens.
  const data::Tokenizer tok = tokenizer();
  std::string prompt = "The";
  while (tok.encode(prompt + " computer").size() < 15) prompt += " computer";
  const int64_t length = static_cast<int64_t>(tok.encode(prompt).size());
  ASSERT_LT(length, 16);
  GenerationRequest a = args_for(prompt);
  a.temperature = 0;
  a.max_new_tokens = 30;
  std::ostringstream out;
  const auto r = generate_from_run(a, out).at(0);
  EXPECT_EQ(r.finish_reason, "context_full");
  EXPECT_EQ(r.new_tokens, 16 - length);
  EXPECT_EQ(r.prompt_tokens, length);
}

TEST_F(GenerateCommand, PromptFilesOfJsonLines) {
  const fs::path file =
      write_file("prompts.jsonl", "{\"prompt\": \"two\\nlines\", \"id\": 1}\n\n{\"prompt\": \"x\"}\n");
  EXPECT_EQ(generate::read_prompts_file(file), (std::vector<std::string>{"two\nlines", "x"}));
  const fs::path bad = write_file("bad.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"\n");
  EXPECT_NE(input_error_of([&] { generate::read_prompts_file(bad); }).find("line 2 of the prompts file"),
            std::string::npos);
  const fs::path missing = write_file("missing.jsonl", "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n");
  EXPECT_NE(input_error_of([&] { generate::read_prompts_file(missing); }).find("line 2 of the prompts file"),
            std::string::npos);
  const fs::path blank = write_file("blank.txt", "\n  \n");
  EXPECT_NE(input_error_of([&] { generate::read_prompts_file(blank); }).find("holds no prompt"), std::string::npos);
}

TEST_F(GenerateCommand, BadInputIsAClearInputError) {
  std::ostringstream out;
  auto error_of = [&](const GenerationRequest& a) { return input_error_of([&] { generate_from_run(a, out); }); };
  auto expect_in = [](const std::string& message, const std::string& fragment) {
    EXPECT_NE(message.find(fragment), std::string::npos) << message << "\nlacks: " << fragment;
  };
  expect_in(error_of(args_for("")), "--prompt is empty");
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "computer program ";
  expect_in(error_of(args_for(long_prompt)), "model's context is 16 tokens");
  GenerationRequest both = args_for("The");
  both.prompts_file = "prompts.txt";
  expect_in(error_of(both), "either --prompt or --prompts, not both");
  GenerationRequest neither = args_for("The");
  neither.prompt.reset();
  expect_in(error_of(neither), "give a prompt");
  GenerationRequest unreadable = args_for("The");
  unreadable.prompt.reset();
  unreadable.prompts_file = "/nonexistent/prompts.txt";
  expect_in(error_of(unreadable), "cannot read the prompts file '/nonexistent/prompts.txt'");
  GenerationRequest cold = args_for("The");
  cold.temperature = -1;
  expect_in(error_of(cold), "temperature");
  GenerationRequest top_p = args_for("The");
  top_p.top_p = 1.5;
  expect_in(error_of(top_p), "top_p");
  GenerationRequest top_k = args_for("The");
  top_k.top_k = -2;
  expect_in(error_of(top_k), "top_k");
  GenerationRequest dtype = args_for("The");
  dtype.dtype = "f16";
  expect_in(error_of(dtype), "--dtype must be f32 or bf16");
}

// A copy of the run as runs were before they kept their tokenizer (no RUN/tokenizer.model nor its record), whose
// config points at another data folder, holding the run's manifest and `tokenizer`.
fs::path run_with_data_folder(const fs::path& run_dir, const std::string& name, const std::string& manifest,
                              const std::optional<fs::path>& tokenizer) {
  const fs::path copy = testing::fresh_dir(name), data = testing::fresh_dir(name + "_data");
  fs::copy(run_dir, copy, fs::copy_options::recursive);
  EXPECT_TRUE(fs::remove(copy / "tokenizer.model"));
  EXPECT_TRUE(fs::remove(copy / "run_tokenizer.json"));
  fs::create_directories(data);
  std::ofstream(data / "manifest.json") << manifest;
  if (tokenizer) fs::copy_file(*tokenizer, data / "tokenizer.model");
  std::ifstream in(copy / "config.yaml");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string old_dir = testing::process_temp_path("tiny_data").string();
  const size_t at = config.find(old_dir);
  EXPECT_NE(at, std::string::npos) << config;
  config.replace(at, old_dir.size(), data.string());
  std::ofstream(copy / "config.yaml") << config;
  return copy;
}

TEST_F(GenerateCommand, AMissingOrForeignTokenizerSaysWhichFileAndWhatToDo) {
  const fs::path data = testing::process_temp_path("tiny_data");
  std::ifstream in(data / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  std::ostringstream out;

  GenerationRequest a = args_for("The");
  a.run_dir = run_with_data_folder(run_dir_, "generate_no_tokenizer", manifest.dump(), std::nullopt).string();
  const std::string missing = input_error_of([&] { generate_from_run(a, out); });
  EXPECT_NE(missing.find("tokenizer.model does not exist"), std::string::npos) << missing;
  EXPECT_NE(missing.find("prepare its data again"), std::string::npos) << missing;

  nlohmann::json other = manifest;
  other["tokenizer_fingerprint"] = "0123456789abcdef";
  a.run_dir =
      run_with_data_folder(run_dir_, "generate_foreign_tokenizer", other.dump(), data / "tokenizer.model").string();
  const std::string foreign = input_error_of([&] { generate_from_run(a, out); });
  EXPECT_NE(foreign.find("does not match the run"), std::string::npos) << foreign;
  EXPECT_NE(foreign.find("0123456789abcdef"), std::string::npos) << foreign;
}

// The real binary, as a user runs it: exit status and stderr.
// `retort generate <args...>`, its output in `log`.
int run_binary(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> words{"generate"};
  words.insert(words.end(), args.begin(), args.end());
  return apps_testing::run_retort_to_files(words, log.string());
}

TEST_F(GenerateCommand, TheBinaryReportsBadInputWithStatusTwo) {
  const fs::path log = fs::temp_directory_path() / "retort_test_generate_binary.log";
  EXPECT_EQ(run_binary({"--checkpoint", run_dir_.string(), "--prompt", ""}, log), 2);
  EXPECT_NE(::retort::testing::read_bytes(log).find("--prompt is empty"), std::string::npos)
      << ::retort::testing::read_bytes(log);
  EXPECT_EQ(run_binary({"--checkpoint", run_dir_.string(), "--prompt", "a", "--prompts", "p.txt"}, log), 2);
  EXPECT_NE(::retort::testing::read_bytes(log).find("not both"), std::string::npos)
      << ::retort::testing::read_bytes(log);
  EXPECT_EQ(run_binary({"--checkpoint", run_dir_.string(), "--prompt", "a", "--top-p", "0"}, log), 2);
  EXPECT_NE(::retort::testing::read_bytes(log).find("top_p"), std::string::npos) << ::retort::testing::read_bytes(log);
}

TEST_F(GenerateCommand, TwoTensorParallelProcessesWriteTheSameGreedyText) {
  const fs::path prompts = write_file("tp.txt", "The computer\nA program is\n-- a dash\n");
  const fs::path out1 = fs::temp_directory_path() / "retort_test_generate_tp1.jsonl";
  const fs::path out2 = fs::temp_directory_path() / "retort_test_generate_tp2.jsonl";
  const fs::path log = fs::temp_directory_path() / "retort_test_generate_tp.log";
  const std::vector<std::string> common{"--checkpoint",     run_dir_.string(),
                                        "--prompts",        prompts.string(),
                                        "--max-new-tokens", "6",
                                        "--temperature",    "0",
                                        "--stop",           "-",
                                        "--batch-size",     "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = common;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  ASSERT_EQ(run_binary(with({"--output", out1.string()}), log), 0) << ::retort::testing::read_bytes(log);
  ASSERT_EQ(run_binary(with({"--output", out2.string(), "--nproc", "2"}), log), 0)
      << ::retort::testing::read_bytes(log);
  const auto a = read_jsonl(out1), b = read_jsonl(out2);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["prompt"], a[i]["prompt"]);
    EXPECT_EQ(b[i]["completion"], a[i]["completion"]) << i;
    EXPECT_EQ(b[i]["new_tokens"], a[i]["new_tokens"]) << i;
    EXPECT_EQ(b[i]["finish_reason"], a[i]["finish_reason"]) << i;
  }
  EXPECT_EQ(a[2]["prompt"], "-- a dash");
}

}  // namespace
}  // namespace retort::distill
