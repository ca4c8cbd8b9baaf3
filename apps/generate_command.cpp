#include "apps/generate_command.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/completion_text.h"
#include "parallel/launch/distributed_run.h"
#include "parallel/launch/launcher.h"
#include "apps/trained_model.h"
#include "core/tensor/dtype.h"
#include "core/util/error.h"
#include "parallel/generate/generator.h"

namespace retort::apps {

namespace fs = std::filesystem;

std::string unescape_stop_string(const std::string& typed) {
  std::string out;
  for (size_t i = 0; i < typed.size(); ++i) {
    if (typed[i] == '\\' && i + 1 < typed.size()) {
      const char next = typed[i + 1];
      if (next == 'n' || next == 't' || next == '\\') {
        out += next == 'n' ? '\n' : next == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += typed[i];
  }
  return out;
}

std::vector<std::string> read_prompts_file(const fs::path& file) {
  std::ifstream in(file);
  RETORT_INPUT_CHECK(in.good() && !fs::is_directory(file),
                     "cannot read the prompts file '{}': give a readable text file with one prompt per line (or JSON "
                     "lines with a \"prompt\" field)",
                     file.string());
  std::vector<std::string> prompts;
  std::optional<bool> json_lines;  // decided by the first non-blank line
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (!json_lines) json_lines = line[line.find_first_not_of(" \t")] == '{';
    if (!*json_lines) {
      prompts.push_back(line);
      continue;
    }
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(
          fmt::format("line {} of the prompts file '{}' is not valid JSON ({}): the file is read as JSON "
                      "lines because its first line starts with '{{'",
                      line_number, file.string(), e.what()));
    }
    RETORT_INPUT_CHECK(record.is_object() && record.contains("prompt") && record["prompt"].is_string(),
                       "line {} of the prompts file '{}' has no string field \"prompt\": write each line as "
                       "{{\"prompt\": \"...\"}}",
                       line_number, file.string());
    prompts.push_back(record["prompt"].get<std::string>());
  }
  RETORT_INPUT_CHECK(!in.bad(), "reading the prompts file '{}' failed", file.string());
  RETORT_INPUT_CHECK(!prompts.empty(), "the prompts file '{}' holds no prompt", file.string());
  return prompts;
}

namespace {

std::string finish_reason_name(generate::FinishReason finish, CompletionText::End end) {
  if (end == CompletionText::End::StopString) return "stop_string";
  if (end == CompletionText::End::EndOfText) return "end_of_text";
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

generate::SamplingOptions sampling_from(const GenerateArgs& args) {
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

void check_args(const GenerateArgs& args) {
  RETORT_INPUT_CHECK(!(args.prompt && args.prompts_file), "give either --prompt or --prompts, not both");
  RETORT_INPUT_CHECK(args.prompt || args.prompts_file,
                     "give a prompt: --prompt TEXT, or --prompts FILE (one prompt per line)");
  RETORT_INPUT_CHECK(args.max_new_tokens >= 1, "--max-new-tokens must be at least 1, got {}", args.max_new_tokens);
  RETORT_INPUT_CHECK(args.batch_size >= 1, "--batch-size must be at least 1, got {}", args.batch_size);
  RETORT_INPUT_CHECK(args.dtype.empty() || args.dtype == "f32" || args.dtype == "bf16",
                     "--dtype must be f32 or bf16, got '{}'", args.dtype);
}

Device requested_device(const std::string& name) {
  const Device device = Device::parse(name);
  if (device.is_cuda())
    RETORT_INPUT_CHECK(device.index < cuda_device_count(), "--device {}: this machine has {} CUDA device(s)",
                       device.str(), cuda_device_count());
  return device;
}

// `retort generate ... --nproc N` is `retort launch --nproc N -- retort generate ...` without --nproc. Values go as
// --option=value so that a stop string or prompt starting with '-' stays a value.
int relaunch_on_ranks(const GenerateArgs& args) {
  std::vector<std::string> argv{"/proc/self/exe", "generate", "--checkpoint=" + args.run_dir};
  if (args.prompt) argv.push_back("--prompt=" + *args.prompt);
  if (args.prompts_file) argv.push_back("--prompts=" + *args.prompts_file);
  argv.push_back(fmt::format("--max-new-tokens={}", args.max_new_tokens));
  argv.push_back(fmt::format("--temperature={}", args.temperature));
  argv.push_back(fmt::format("--top-k={}", args.top_k));
  argv.push_back(fmt::format("--top-p={}", args.top_p));
  argv.push_back(fmt::format("--seed={}", args.seed));
  for (const auto& stop : args.stop) argv.push_back("--stop=" + stop);
  argv.push_back(fmt::format("--batch-size={}", args.batch_size));
  if (!args.output.empty()) argv.push_back("--output=" + args.output);
  argv.push_back("--device=" + args.device);
  if (!args.dtype.empty()) argv.push_back("--dtype=" + args.dtype);
  LaunchOptions options;
  options.nproc = args.nproc;
  return launch_local(argv, options).exit_code;
}

}  // namespace

std::vector<GenerationRecord> run_generate(const GenerateArgs& args, std::ostream& out) {
  check_args(args);
  generate::GenerationOptions options;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling = sampling_from(args);
  std::vector<std::string> stops;
  for (const auto& stop : args.stop) stops.push_back(unescape_stop_string(stop));
  const std::vector<std::string> texts =
      args.prompt ? std::vector<std::string>{*args.prompt} : read_prompts_file(*args.prompts_file);
  for (size_t i = 0; i < texts.size(); ++i)
    RETORT_INPUT_CHECK(!texts[i].empty(), "{} is empty: give some text to continue",
                       args.prompt ? std::string("--prompt") : fmt::format("prompt {}", i));

  // Every rank of a launch holds a tensor-parallel slice of the model.
  const DistributedRun dist = start_distributed_run(requested_device(args.device), read_launch_env().world_size);
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
  for (int64_t begin = 0; begin < n; begin += args.batch_size) {
    const int64_t end = std::min(n, begin + args.batch_size);
    const std::vector<std::vector<int32_t>> batch(prompts.begin() + begin, prompts.begin() + end);
    std::vector<CompletionText> completions;
    options.sequence_ids.clear();
    for (int64_t i = begin; i < end; ++i) {
      completions.emplace_back(tokenizer, stops);
      options.sequence_ids.push_back(static_cast<uint64_t>(i));  // the global index: output independent of batching
    }
    if (streaming && main) out << texts[begin] << std::flush;
    options.on_token = [&](int64_t row, int32_t token) {
      CompletionText& completion = completions[static_cast<size_t>(row)];
      const bool more = completion.push(token);
      if (streaming && main) out << completion.take_stable() << std::flush;
      return more;
    };
    const auto start = std::chrono::steady_clock::now();
    const std::vector<generate::GeneratedSequence> generated = generate_tokens(model, batch, options);
    total_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int64_t i = begin; i < end; ++i) {
      const generate::GeneratedSequence& seq = generated[static_cast<size_t>(i - begin)];
      CompletionText& completion = completions[static_cast<size_t>(i - begin)];
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

void add_generate_command(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  auto prompt = std::make_shared<std::string>();
  auto prompts_file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("generate", "sample text from a trained model (KV cache, any tp, CPU or GPU)");
  cmd->add_option("--checkpoint", args->run_dir, "the model's run directory (its latest checkpoint is used)")
      ->required();
  CLI::Option* prompt_opt = cmd->add_option("--prompt", *prompt, "the text to continue");
  CLI::Option* prompts_opt = cmd->add_option("--prompts", *prompts_file,
                                             "a file of prompts: one per line, or JSON lines with a \"prompt\" field");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "new tokens per prompt at most")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "sampling temperature; 0: greedy")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "sample among the k most likely tokens only (0: off)")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "sample among the most likely tokens holding this probability (1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--stop", args->stop,
                  "stop a completion before this text (several allowed; \\n, \\t and \\\\ are understood)");
  cmd->add_option("--batch-size", args->batch_size, "prompts generated together")->capture_default_str();
  cmd->add_option("--output", args->output, "write one JSON object per prompt to this .jsonl file");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--nproc", args->nproc, "split the model over this many local tensor-parallel ranks")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--dtype", args->dtype, "compute dtype, f32 or bf16 (default: the run's model.dtype)");
  cmd->callback([args, prompt, prompts_file, prompt_opt, prompts_opt, exit_code] {
    if (prompt_opt->count() > 0) args->prompt = *prompt;
    if (prompts_opt->count() > 0) args->prompts_file = *prompts_file;
    check_args(*args);
    sampling_from(*args);  // bad options fail here, not once per rank
    if (args->nproc > 1) {
      *exit_code = relaunch_on_ranks(*args);
      return;
    }
    run_generate(*args, std::cout);
  });
}

}  // namespace retort::apps
