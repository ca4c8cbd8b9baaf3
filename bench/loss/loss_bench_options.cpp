#include "bench/loss/loss_bench_options.h"

#include <fmt/format.h>

namespace retort::bench {

std::string comma_joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

void add_loss_bench_options(CLI::App& cmd, LossBenchOptions& o) {
  cmd.add_option("--losses", o.losses, "ce (cross-entropy), fkl (forward KL), rkl (reverse KL)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--vocab", o.vocabs, "vocabulary sizes (each divisible by --tp)")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--tokens", o.tokens, "rows of the logits")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--tp", o.tp, "ranks the vocabulary is split over (one GPU each); 1: one device")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--variants", o.variants, "fused, one_read (tp 1); fused_tp, manual_tp, gather (tp > 1); default all")
      ->delimiter(',');
  cmd.add_option("--device", o.device, "cpu, cuda or cuda:N (tp 1); cpu or cuda (tp > 1: NCCL, one GPU per rank)");
  cmd.add_option("--iters", o.iters, "timed steps (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  cmd.add_option("--logit-std", o.logit_std, "standard deviation of the random logits")->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of logits and targets")->capture_default_str();
  cmd.add_option("--copy-mib", o.copy_mib, "size of the copy that measures the bandwidth (0: 1024 GPU, 64 CPU)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd.add_option("--json", o.json, "rank 0 writes one JSON line per (loss, vocab, variant) here");
  cmd.add_flag("!--no-check-grads", o.check_grads,
               "tp > 1: skip comparing each variant's gradient with the first variant's (a host copy of each)");
  cmd.add_option("--simulate-oom", o.simulate_oom, "variants that fail with an out-of-memory error (tests that path)")
      ->delimiter(',');
}

std::vector<std::string> loss_bench_arguments(const LossBenchOptions& o) {
  std::vector<std::string> vocabs;
  for (int64_t v : o.vocabs) vocabs.push_back(std::to_string(v));
  std::vector<std::string> args{"--losses",    comma_joined(o.losses),         "--vocab",  comma_joined(vocabs),
                                "--tokens",    std::to_string(o.tokens),       "--tp",     std::to_string(o.tp),
                                "--iters",     std::to_string(o.iters),        "--warmup", std::to_string(o.warmup),
                                "--logit-std", fmt::format("{}", o.logit_std), "--seed",   std::to_string(o.seed),
                                "--copy-mib",  std::to_string(o.copy_mib)};
  if (!o.variants.empty()) args.insert(args.end(), {"--variants", comma_joined(o.variants)});
  if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
  if (!o.json.empty()) args.insert(args.end(), {"--json", o.json});
  if (!o.check_grads) args.push_back("--no-check-grads");
  if (!o.simulate_oom.empty()) args.insert(args.end(), {"--simulate-oom", comma_joined(o.simulate_oom)});
  return args;
}

}  // namespace retort::bench
