#include "distill/train/generate_from_run.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/tensor/device_choice.h"
#include "core/tensor/dtype.h"
#include "core/util/error.h"
#include "distill/train/trained_model.h"
#include "parallel/generate/completion_text.h"
#include "parallel/generate/generator.h"
#include "parallel/generate/prompts_file.h"
#include "parallel/launch/distributed_run.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

std::string finish_reason_name(generate::FinishReason finish, generate::CompletionText::End end) {
  if (end == generate::CompletionText::End::StopString) return "stop_string";
  if (end == generate::CompletionText::End::EndOfText) return "end_of_text";
  return finish == generate::FinishReason::ContextFull ? "context_full" : "max_new_tokens";
}

nlohmann::json to_json(const GenerationRecord& r) {
  nlohmann::json j{{"prompt", r.prompt},
                   {"completion", r.completion},
                   {"new_tokens", r.new_tokens},
                   {"prompt_tokens", r.prompt_tokens},
                   {"finish_reason", r.finish_reason},
                   {"prefill_ms", r.prefill_ms}};
  j["tokens_per_second"] = r.tokens_per_second ? nlohmann::json(*r.tokens_per_second) : nlohmann::json(nullptr);
  return j;
}

generate::SamplingOptions sampling_from(const GenerationRequest& args) {
  generate::SamplingOptions s;
  s.temperature = args.temperature;
  s.top_k = args.top_k;
  s.top_p = args.top_p;
  s.seed = args.seed;
  try {
    s.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("bad --temperature, --top-k or --top-p: {}", e.what()));
  }
  return s;
}

}  // namespace

void check_generation_request(const GenerationRequest& args) {
  RETORT_INPUT_CHECK(!(args.prompt && args.prompts_file), "give either --prompt or --prompts, not both");
  RETORT_INPUT_CHECK(args.prompt || args.prompts_file,
                     "give a prompt: --prompt TEXT, or --prompts FILE (one prompt per line)");
  RETORT_INPUT_CHECK(args.max_new_tokens >= 1, "--max-new-tokens must be at least 1, got {}", args.max_new_tokens);
  RETORT_INPUT_CHECK(args.batch_size >= 1, "--batch-size must be at least 1, got {}", args.batch_size);
  RETORT_INPUT_CHECK(args.dtype.empty() || args.dtype == "f32" || args.dtype == "bf16",
                     "--dtype must be f32 or bf16, got '{}'", args.dtype);
  sampling_from(args);
}

std::vector<GenerationRecord> generate_from_run(const GenerationRequest& args, std::ostream& out) {
  check_generation_request(args);
  generate::GenerationOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling = sampling_from(args);
  std::vector<std::string> stops;
  for (const auto& stop : args.stop) stops.push_back(generate::unescape_stop_string(stop));
  const std::vector<std::string> texts =
      args.prompt ? std::vector<std::string>{*args.prompt} : generate::read_prompts_file(*args.prompts_file);
  for (size_t i = 0; i < texts.size(); ++i)
    RETORT_INPUT_CHECK(!texts[i].empty(), "{} is empty: give some text to continue",
                       args.prompt ? std::string("--prompt") : fmt::format("prompt {}", i));

  // Every rank of a launch holds a tensor-parallel slice of the model.
  const DistributedRun dist =
      start_distributed_run(usable_device(args.device, "--device"), read_launch_env().world_size);
  const bool main = dist.is_main();
  if (!main) spdlog::set_level(spdlog::level::warn);
  const TrainedModel trained = load_trained_model(args.run_dir, dist.device, dist.grid.tp);
  const data::Tokenizer tokenizer = load_run_tokenizer(trained);
  const GptModel& model = *trained.model;
  options.compute_dtype = args.dtype.empty() ? trained.dtype : dtype_from_name(args.dtype);
  spdlog::info("{} (step {}) on {}{}, {} compute", trained.checkpoint.string(), trained.step, dist.device.str(),
               dist.grid.tp_size > 1 ? fmt::format(" x {} tp ranks", dist.grid.tp_size) : "",
               dtype_name(options.compute_dtype));

  const int64_t context = model.config().block_size;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    prompts.push_back(tokenizer.encode(texts[i]));
    const int64_t length = static_cast<int64_t>(prompts.back().size());
    RETORT_INPUT_CHECK(length < context,
                       "{} is {} tokens long but the model's context is {} tokens (model.block_size): shorten it to "
                       "at most {} tokens so that there is room to generate",
                       args.prompt ? std::string("--prompt") : fmt::format("prompt {}", i), length, context,
                       context - 1);
  }

  std::ofstream output;
  if (main && !args.output.empty()) {
    if (fs::path(args.output).has_parent_path()) fs::create_directories(fs::path(args.output).parent_path());
    output.open(args.output);
    RETORT_INPUT_CHECK(output.good(), "cannot write the output file '{}'", args.output);
  }

  // One prompt streams as it is produced; several print whole, in order, as their batch finishes.
  const bool streaming = texts.size() == 1;
  std::vector<GenerationRecord> records;
  int64_t total_new = 0;
  double total_seconds = 0;
  const int64_t n = static_cast<int64_t>(prompts.size());
  // The weights in the compute dtype once for every batch (they do not change between batches).
  options.inference_model = model.inference_copy(options.compute_dtype);
  for (int64_t begin = 0; begin < n; begin += args.batch_size) {
    const int64_t end = std::min(n, begin + args.batch_size);
    const std::vector<std::vector<int32_t>> batch(prompts.begin() + begin, prompts.begin() + end);
    std::vector<generate::CompletionText> completions;
    options.sequence_ids.clear();
    for (int64_t i = begin; i < end; ++i) {
      completions.emplace_back(tokenizer, stops);
      options.sequence_ids.push_back(static_cast<uint64_t>(i));  // the global index: output independent of batching
    }
    if (streaming && main) out << texts[begin] << std::flush;
    options.on_token = [&](int64_t row, int32_t token) {
      generate::CompletionText& completion = completions[static_cast<size_t>(row)];
      const bool more = completion.push(token);
      if (streaming && main) out << completion.take_stable() << std::flush;
      return more;
    };
    const auto start = std::chrono::steady_clock::now();
    const std::vector<generate::GeneratedSequence> generated = generate_tokens(model, batch, options);
    total_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int64_t i = begin; i < end; ++i) {
      const generate::GeneratedSequence& seq = generated[static_cast<size_t>(i - begin)];
      generate::CompletionText& completion = completions[static_cast<size_t>(i - begin)];
      completion.finish();
      GenerationRecord r;
      r.prompt = texts[i];
      r.completion = completion.text();
      r.prompt_tokens = static_cast<int64_t>(prompts[i].size());
      r.new_tokens = static_cast<int64_t>(seq.tokens.size());
      r.finish_reason = finish_reason_name(seq.finish, completion.end());
      r.prefill_ms = 1e3 * seq.prefill_seconds;
      if (r.new_tokens > 1 && seq.decode_seconds > 0)
        r.tokens_per_second = static_cast<double>(r.new_tokens - 1) / seq.decode_seconds;
      total_new += r.new_tokens;
      if (main) {
        if (streaming)
          out << completion.take_stable() << "\n";
        else
          out << fmt::format("### prompt {} ({} new tokens, {})\n{}{}\n\n", i, r.new_tokens, r.finish_reason, r.prompt,
                             r.completion);
        out.flush();
        if (output.is_open()) output << to_json(r).dump() << "\n" << std::flush;
      }
      records.push_back(std::move(r));
    }
  }
  spdlog::info("{} prompt(s), {} new tokens in {:.2f} s ({:.1f} tokens/s){}", n, total_new, total_seconds,
               total_seconds > 0 ? total_new / total_seconds : 0.0,
               args.output.empty() ? "" : fmt::format("; written to {}", args.output));
  RETORT_INPUT_CHECK(!output.is_open() || output.good(), "writing the output file '{}' failed", args.output);
  dist.barrier();  // no rank tears the group down while another still needs it
  return records;
}

}  // namespace retort::distill
