#pragma once
// `retort generate --checkpoint RUN_DIR (--prompt TEXT | --prompts FILE) [options]`: text from a trained model,
// sampled with a KV cache on the CPU or a GPU, over N tensor-parallel ranks with --nproc N. One prompt streams
// token by token; several print each as its batch finishes; --output writes one JSON object per prompt.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace retort::apps {

struct GenerateArgs {
  std::string run_dir;
  std::optional<std::string> prompt;
  std::optional<std::string> prompts_file;
  int64_t max_new_tokens = 64;
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // as typed: \n, \t and \\ are unescaped when the run starts
  int64_t batch_size = 16;
  std::string output;  // a .jsonl file; empty: none
  std::string device = "cpu";
  int nproc = 1;
  std::string dtype;  // f32 | bf16; empty: the run's model.dtype
};

// One prompt's result, as written to --output.
struct GenerationRecord {
  std::string prompt, completion;
  int64_t prompt_tokens = 0, new_tokens = 0;
  std::string finish_reason;  // max_new_tokens | stop_string | end_of_text | context_full
  double prefill_ms = 0.0;
  std::optional<double> tokens_per_second;  // decode rate: tokens after the first / decode time (none for one)
};

void add_generate_command(CLI::App& app, int* exit_code);

// Generates on this process (alone, or as one rank of a launch: the ranks split the model tensor-parallel). Rank
// 0 prints the text to `out` and writes --output; every rank returns the records.
std::vector<GenerationRecord> run_generate(const GenerateArgs& args, std::ostream& out);

// The prompts of a --prompts file: one per line, or JSON lines each with a string "prompt" when the first non-blank
// line starts with '{'. Blank lines are skipped. An unreadable file, a bad JSON line or no prompt: InputError.
std::vector<std::string> read_prompts_file(const std::filesystem::path& file);

// "\n", "\t" and "\\" in a stop string typed on the command line become a newline, a tab and a backslash.
std::string unescape_stop_string(const std::string& typed);

}  // namespace retort::apps
