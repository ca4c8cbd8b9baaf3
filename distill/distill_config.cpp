#include "distill/distill_config.h"

#include <fmt/format.h>

#include "distill/onpolicy/on_policy_options.h"
#include "distill/train/config_builders.h"

namespace retort::distill {

namespace {

// The on-policy keys that only make sense together (checked when distill.on_policy_ratio > 0).
std::string check_on_policy_keys(const ResolvedConfig& c) {
  const double ratio = c.get_double("distill.on_policy_ratio");
  if (ratio <= 0) return {};
  if (cross_tokenizer(c))
    return "distill.on_policy_ratio > 0 needs a teacher of the student's tokenizer (the teacher scores the "
           "student's own tokens), but distill.xtoken.enabled is true: set distill.on_policy_ratio=0 or "
           "distill.xtoken.enabled=false";
  const OnPolicyLengths lengths = on_policy_lengths_from(c);
  const int64_t prompt = lengths.prompt_tokens, fresh = lengths.new_tokens;
  const int64_t seq_len = c.get_int("train.seq_len"), block = c.get_int("model.block_size");
  if (prompt > seq_len)
    return fmt::format(
        "distill.on_policy_prompt_tokens = {} is longer than the data's windows (train.seq_len = {}): the prompts "
        "are cut from the batch's rows, so set distill.on_policy_prompt_tokens to at most {}",
        prompt, seq_len, seq_len);
  if (fresh < 1)
    return fmt::format(
        "distill.on_policy_prompt_tokens = {} fills the student's context (model.block_size = {}), leaving no room "
        "for a continuation: set it below {}",
        prompt, block, block);
  if (prompt + fresh > block)
    return fmt::format(
        "distill.on_policy_prompt_tokens + distill.on_policy_new_tokens = {} + {} exceeds the student's context "
        "(model.block_size = {}): shorten them to at most {} tokens together",
        prompt, fresh, block, block);
  if (c.get_double("distill.on_policy_top_p") <= 0)
    return "distill.on_policy_top_p must be above 0 (it keeps the most likely tokens holding that much probability; "
           "1 keeps all): set it in (0, 1]";
  return {};
}

}  // namespace

ConfigSchema distill_schema(const std::string& default_run_dir) {
  ConfigSchema s = training_schema(default_run_dir);
  s.add_string("distill.mode", "cache",
               "cache: the student learns from the teacher's cached top-k log-probabilities; online: the teacher "
               "runs in every step and the student matches its full distribution (the reference for what the cache "
               "loses)")
      .choices({"cache", "online"});
  s.add_string("distill.teacher", "",
               "the teacher's run directory (a `retort train` run: config.yaml and checkpoints) or a Hugging Face "
               "checkpoint folder (config.json, safetensors, tokenizer.json); empty: run.dir/teacher, the teacher "
               "`distill run` trains. A teacher named here is used as it is, never trained");
  s.add_string("distill.cache_dir", "",
               "folder of the teacher cache; empty: run.dir/teacher_topk (distill.cache_kind=topk) or "
               "run.dir/teacher_sampled (sampled)");
  s.add_string("distill.cache_kind", "topk",
               "topk: the teacher's top distill.k log-probabilities per token (distill.loss picks the divergence); "
               "sampled: distill.sample_k ids drawn per token from the teacher at distill.sample_temperature, with "
               "their counts and importance weights, trained with the unbiased sampled forward-KL estimate "
               "(sampled-logit KD, Anshumann et al. 2025)")
      .choices({"topk", "sampled"});
  s.add_int("distill.sample_k", 64, "sampled cache: draws per token (with replacement; K)").range(1, 65535);
  s.add_float("distill.sample_temperature", 1.0,
              "sampled cache: proposal temperature t, ids drawn from p^(1/t) renormalised (p: the teacher at "
              "distill.temperature); 1: the teacher itself, the weights are the draw counts / K")
      .greater_than(0);
  s.add_int("distill.sample_seed", 0, "sampled cache: seed of the draws (a position's draws depend only on it)").min(0);
  s.add_int("distill.k", 64, "teacher log-probabilities kept per token").range(1, 1 << 16);
  s.add_string("distill.cache_dtype", "bf16", "precision of the cached log-probabilities").choices({"bf16", "f32"});
  s.add_int("distill.topk_batch_size", 16, "windows per teacher call when the cache is written").range(1, 1 << 20);
  s.add_string("distill.loss", "forward_kl_rest",
               "forward_kl_rest: (k+1)-category forward KL with a rest bucket (exact); forward_kl_renormalized: "
               "forward KL over the top-k renormalised; reverse_kl; mixed (distill.forward_weight x forward + the "
               "rest reverse). The online mode always uses the full-vocabulary forward KL")
      .choices({"forward_kl_rest", "forward_kl_renormalized", "reverse_kl", "mixed"});
  s.add_float("distill.forward_weight", 0.5, "mixed: weight of the forward KL").range(0, 1);
  s.add_float("distill.kd_ratio", 1.0, "loss = kd_ratio x KD + (1 - kd_ratio) x cross-entropy on the data").range(0, 1);
  s.add_float("distill.temperature", 1.0,
              "softmax temperature of teacher and student (KD scaled by T^2); the cache is written at it")
      .greater_than(0);

  s.add_float("distill.on_policy_ratio", 0.0,
              "on-policy distillation: the share of steps whose batch is the student's own continuations of prompts "
              "from the data, scored by the teacher (in memory) and trained toward it with "
              "distill.on_policy_divergence; the other steps are off-policy (distill.mode). 0: off-policy only; 1: "
              "on-policy only (no cache is read or written); between: interleaved by step")
      .range(0, 1);
  s.add_float("distill.on_policy_temperature", 1.0,
              "on-policy: the temperature the student samples its continuations at (0: greedy)")
      .min(0);
  s.add_float("distill.on_policy_top_p", 1.0,
              "on-policy: nucleus sampling of the continuations, the smallest set of tokens holding this much "
              "probability (1: off)")
      .range(0, 1);
  s.add_int("distill.on_policy_new_tokens", 0,
            "on-policy: tokens the student generates after each prompt; 0: min(32, model.block_size - the prompt)")
      .range(0, 1 << 20);
  s.add_int("distill.on_policy_prompt_tokens", 0,
            "on-policy: tokens of each batch row's window used as its prompt (at most train.seq_len); 0: min(32, "
            "half of train.seq_len or model.block_size, the shorter)")
      .range(0, 1 << 20);
  s.add_string("distill.on_policy_divergence", "reverse",
               "on-policy: what the student minimises at its generated positions, over the full vocabulary at "
               "distill.temperature: reverse (KL(student || teacher), mode-seeking), forward (KL(teacher || "
               "student)) or mixed (distill.on_policy_mix x forward + the rest reverse)")
      .choices({"reverse", "forward", "mixed"});
  s.add_float("distill.on_policy_mix", 0.5, "on-policy, mixed: the weight of the forward KL").range(0, 1);

  s.add_bool("distill.xtoken.enabled", false,
             "cross-tokenizer distillation: the teacher reads the same text through its own tokenizer; teacher and "
             "student tokens are aligned into chunks by their bytes and the student's distribution, projected on "
             "the teacher's vocabulary, matches the teacher's per chunk (distill.mode picks the teacher signal: its "
             "top-k cache over its own tokens, or the teacher online). Required when the tokenizers differ");
  s.add_string("distill.xtoken.loss", "chunk_kl",
               "cross-tokenizer loss: chunk_kl (KL between the chunk-averaged distributions over the teacher's "
               "listed ids and a rest bucket) or gold (KL over the exactly mapped ids + L1 between the sorted "
               "probabilities of the others)")
      .choices({"chunk_kl", "gold"});
  s.add_bool("distill.xtoken.dynamic_ce_scaling", false,
             "cross-tokenizer loss: sg(|CE| / |KD|) x KD + CE instead of distill.kd_ratio's fixed mix");
  s.add_string("distill.xtoken.dir", "",
               "folder of the paired token streams (the teacher's tokens of the student's text, with byte positions) "
               "and of the vocabulary projection, made once and reused; empty: run.dir/xtoken");
  s.add_float("distill.xtoken.min_coverage", 0.5,
              "a warning when less than this share of the student's positions falls in an aligned chunk (the "
              "tokenizers hardly agree on the text)")
      .range(0, 1);

  s.add_string("teacher.data.tokenizer_type", "bpe",
               "`distill run` with distill.xtoken.enabled: the algorithm of the teacher's own tokenizer, trained on "
               "data.corpus (bpe or unigram)")
      .choices({"bpe", "unigram"});
  s.add_int("teacher.data.vocab_size", 8192,
            "`distill run` with distill.xtoken.enabled: the teacher's vocabulary (its tokenizer's size)")
      .range(2, int64_t{1} << 31);
  s.add_string("teacher.data.tokenizer", "",
               "`distill run` with distill.xtoken.enabled: a tokenizer file for the teacher (SentencePiece .model or "
               "tokenizer.json) used as it is; empty: train one of teacher.data.tokenizer_type and "
               "teacher.data.vocab_size on data.corpus");
  s.add_string("teacher.data.dir", "",
               "`distill run` with distill.xtoken.enabled: the data folder of the teacher's tokenizer; empty: "
               "data.dir + '-teacher'");

  s.add_int("teacher.n_layer", 4, "`distill run`: the teacher's transformer blocks").range(1, 1024);
  s.add_int("teacher.n_head", 4, "`distill run`: the teacher's attention heads").range(1, 1024);
  s.add_int("teacher.n_embd", 256, "`distill run`: the teacher's residual width").range(1, 1 << 16);
  s.add_int("teacher.steps", 1000, "`distill run`: the teacher's optimizer steps").range(1, int64_t{1} << 40);
  s.add_float("teacher.lr", 3e-3, "`distill run`: the teacher's peak learning rate").greater_than(0);
  s.add_float("teacher.min_lr", 3e-4, "`distill run`: the teacher's final learning rate").min(0);
  s.add_int("teacher.checkpoint_every", 200,
            "`distill run`: steps between the teacher's checkpoints (where --resume continues it; 0: only at the end)")
      .min(0);
  s.add_check([](const ResolvedConfig& c) -> std::string {
    if (c.get_string("distill.cache_kind") == "sampled" && c.get_string("distill.loss") != "forward_kl_rest")
      return "distill.cache_kind=sampled trains with the sampled forward-KL estimate, so distill.loss does not apply: "
             "leave distill.loss at forward_kl_rest, or use distill.cache_kind=topk for " +
             c.get_string("distill.loss");
    if (c.get_string("distill.cache_kind") == "sampled" && cross_tokenizer(c))
      return "distill.cache_kind=sampled is not available with distill.xtoken.enabled (the cross-tokenizer loss reads "
             "top-k rows): use distill.cache_kind=topk";
    if (const std::string on_policy = check_on_policy_keys(c); !on_policy.empty()) return on_policy;
    if (c.get_int("teacher.n_embd") % c.get_int("teacher.n_head") != 0)
      return "teacher.n_embd must be a multiple of teacher.n_head";
    if (c.get_double("teacher.min_lr") > c.get_double("teacher.lr")) return "teacher.min_lr must not exceed teacher.lr";
    return {};
  });
  return s;
}

DistillMode distill_mode_from(const ResolvedConfig& c) {
  return c.get_string("distill.mode") == "online" ? DistillMode::kOnline : DistillMode::kCache;
}

CacheKind cache_kind_from(const ResolvedConfig& c) {
  return cache_kind_from_name(c.get_string("distill.cache_kind"));
}

int cache_entries_from(const ResolvedConfig& c) {
  return static_cast<int>(cache_kind_from(c) == CacheKind::Sampled ? c.get_int("distill.sample_k")
                                                                   : c.get_int("distill.k"));
}

losses::TopkDistillationOptions topk_loss_options_from(const ResolvedConfig& c) {
  losses::TopkDistillationOptions o;
  const std::string loss = c.get_string("distill.loss");
  o.divergence = cache_kind_from(c) == CacheKind::Sampled ? losses::TopkDivergence::ForwardKLSampled
                 : loss == "forward_kl_renormalized"      ? losses::TopkDivergence::ForwardKLRenormalized
                 : loss == "reverse_kl"                   ? losses::TopkDivergence::ReverseKL
                 : loss == "mixed"                        ? losses::TopkDivergence::Mixed
                                                          : losses::TopkDivergence::ForwardKLRest;
  o.forward_weight = c.get_double("distill.forward_weight");
  o.temperature = c.get_double("distill.temperature");
  // The cache is always written at distill.temperature (and the cache's teacher.json records it), so its values
  // are the teacher at this temperature.
  o.targets_at_temperature = o.temperature != 1.0;
  o.kd_ratio = c.get_double("distill.kd_ratio");
  o.ignore_index = static_cast<int>(c.get_int("loss.ignore_index"));
  return o;
}

std::filesystem::path teacher_run_dir(const ResolvedConfig& c) {
  const std::string teacher = c.get_string("distill.teacher");
  return teacher.empty() ? std::filesystem::path(c.get_string("run.dir")) / "teacher" : std::filesystem::path(teacher);
}

std::filesystem::path cache_dir(const ResolvedConfig& c) {
  const std::string cache = c.get_string("distill.cache_dir");
  return cache.empty() ? default_cache_dir(c) : std::filesystem::path(cache);
}

std::filesystem::path default_cache_dir(const ResolvedConfig& c) {
  return std::filesystem::path(c.get_string("run.dir")) /
         (cache_kind_from(c) == CacheKind::Sampled ? "teacher_sampled" : "teacher_topk");
}

std::filesystem::path xtoken_dir(const ResolvedConfig& c) {
  const std::string dir = c.get_string("distill.xtoken.dir");
  return dir.empty() ? std::filesystem::path(c.get_string("run.dir")) / "xtoken" : std::filesystem::path(dir);
}

bool cross_tokenizer(const ResolvedConfig& c) {
  return c.get_bool("distill.xtoken.enabled");
}

bool has_external_teacher(const ResolvedConfig& c) {
  const std::filesystem::path own = std::filesystem::path(c.get_string("run.dir")) / "teacher";
  return teacher_run_dir(c).lexically_normal() != own.lexically_normal();
}

}  // namespace retort::distill
