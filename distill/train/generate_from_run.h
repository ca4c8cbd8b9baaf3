#pragma once
// Text from a trained run: the run's model (its latest checkpoint, split over the ranks of a launch) and tokenizer,
// the prompts encoded and generated in batches with the KV cache and the vocab-parallel sampler
// (parallel/generate/), the text streamed as it comes (one prompt) or printed per prompt, and one JSON object per
// prompt written to an output file. `retort generate` is this function behind a command line.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace retort::distill {

struct GenerationRequest {
  std::string run_dir;
  std::optional<std::string> prompt;
  std::optional<std::string> prompts_file;
  int64_t max_new_tokens = 64;
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // as typed: \\n, \\t and \\\\ are unescaped when the run starts
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

// The request's own errors (both or neither prompt source, bad sizes, bad sampling options), before any model is
// loaded: an InputError naming the option.
void check_generation_request(const GenerationRequest& request);

// Generates on this process (alone, or as one rank of a launch: the ranks split the model tensor-parallel). Rank
// 0 prints the text to `out` and writes request.output; every rank returns the records.
std::vector<GenerationRecord> generate_from_run(const GenerationRequest& request, std::ostream& out);

}  // namespace retort::distill
