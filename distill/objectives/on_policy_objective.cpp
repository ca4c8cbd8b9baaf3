#include "distill/objectives/on_policy_objective.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "distill/distill_config.h"
#include "distill/onpolicy/held_out_divergence.h"
#include "distill/onpolicy/on_policy_loss.h"
#include "distill/onpolicy/student_rollout.h"

namespace retort::distill {

namespace {

// The most validation batches whose prompts are rolled out at each validation: a rollout is a whole generation.
constexpr int64_t kMaxValidationRollouts = 4;

// A different seed for every step's draws (splitmix64's increment and finaliser), the same on every rank.
uint64_t step_seed(uint64_t seed, int64_t step) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void OnPolicyDistillationObjective::prepare(const RunContext& run) {
  const ResolvedConfig& config = *run.config;
  RETORT_INPUT_CHECK(!cross_tokenizer(config),
                     "distill.on_policy_ratio > 0 needs a teacher of the student's tokenizer, but "
                     "distill.xtoken.enabled is true: set distill.on_policy_ratio=0 or distill.xtoken.enabled=false");
  const TrainedModel* teacher = shared_teacher_;
  if (!teacher) {
    own_teacher_ =
        std::make_unique<TrainedModel>(load_trained_model(teacher_run_dir(config), run.device, run.tp_group));
    teacher = own_teacher_.get();
  }
  RETORT_INPUT_CHECK(
      teacher->vocab_size == run.dataset->vocab_size &&
          teacher->tokenizer_fingerprint == run.dataset->tokenizer_fingerprint,
      "distill.on_policy_ratio > 0: the teacher '{}' uses tokenizer {} (vocabulary {}) but the student's data uses {} "
      "(vocabulary {}); on-policy distillation scores the student's own tokens with the teacher, so it needs a teacher "
      "of the same tokenizer: set distill.teacher to one trained on the same data.dir and data.vocab_size, or "
      "distill.on_policy_ratio=0",
      teacher->run_dir.string(), teacher->tokenizer_fingerprint, teacher->vocab_size,
      run.dataset->tokenizer_fingerprint, run.dataset->vocab_size);
  teacher_run_ = teacher;
  prepare_with(on_policy_options_from(config), *teacher->model, teacher->dtype, run.tp_group);
  spdlog::info(
      "distill: on-policy on {:.0f}% of the steps, teacher {} (step {}): {} new tokens after {}-token prompts, "
      "temperature {}, top-p {}, {}",
      100 * options_.ratio, teacher->checkpoint.string(), teacher->step, options_.new_tokens, options_.prompt_tokens,
      options_.sample_temperature, options_.top_p, divergence_name(options_.divergence));

  if (options_.ratio >= 1 && config.get_double("distill.kd_ratio") < 1)
    spdlog::warn(
        "distill: distill.kd_ratio = {} mixes the data's labels into off-policy steps only; with "
        "distill.on_policy_ratio = 1 every step is on-policy and trains on the divergence alone",
        config.get_double("distill.kd_ratio"));
  if (!run.dataset->val_shards.empty()) {
    const int64_t batches = std::min(config.get_int("train.eval_batches"), kMaxValidationRollouts);
    data::TokenLoader loader(run.dataset->val_shards, run.dataset->vocab_size,
                             {config.get_int("train.batch_size"), config.get_int("train.seq_len"),
                              data::LoaderMode::kEval, options_.seed, 0, 1, batches});
    for (int64_t i = 0; i < std::min(batches, loader.batches_per_epoch()); ++i)
      validation_prompts_.push_back(loader.next());
  }
}

void OnPolicyDistillationObjective::prepare_with(const OnPolicyOptions& options, const GptModel& teacher,
                                                 DType teacher_dtype, std::shared_ptr<Communicator> tp_group) {
  options_ = options;
  teacher_ = &teacher;
  teacher_dtype_ = teacher_dtype;
  tp_group_ = std::move(tp_group);
}

void OnPolicyDistillationObjective::choose_batch(int64_t step, const GptModel& student, DType compute_dtype,
                                                 data::TokenBatch& batch) {
  RETORT_CHECK(teacher_ != nullptr, "the on-policy objective was used before prepare()");
  RolloutOptions rollout;
  rollout.prompt_tokens = options_.prompt_tokens;
  rollout.new_tokens = options_.new_tokens;
  rollout.sampling.temperature = options_.sample_temperature;
  rollout.sampling.top_p = options_.top_p;
  rollout.sampling.seed = step_seed(options_.seed, step);
  rollout.compute_dtype = compute_dtype;
  batch = rollout_training_batch(roll_out_student(student, batch, rollout), batch, options_.ignore_index);
}

ObjectiveLoss OnPolicyDistillationObjective::micro_batch_loss(const Tensor& logits, const data::TokenBatch& batch) {
  const Device device = logits.device();
  const Tensor tokens = Tensor::from_ints(batch.inputs, {batch.batch, batch.seq}, device);
  const Tensor targets = Tensor::from_ints(batch.targets, {batch.batch, batch.seq}, device);
  Tensor teacher_logits;
  {
    NoGradGuard no_grad;
    teacher_logits = teacher_->forward(tokens, teacher_dtype_);
  }
  Tensor loss = on_policy_loss(logits, teacher_logits, targets, options_, tp_group_);
  const double value = loss.item();
  return ObjectiveLoss{loss, {{"kd", value}, {"on_policy_" + divergence_name(options_.divergence), value}}};
}

nlohmann::json OnPolicyDistillationObjective::description() const {
  nlohmann::json j{{"name", "on_policy"},
                   {"divergence", divergence_name(options_.divergence)},
                   {"temperature", options_.kd_temperature},
                   {"sample_temperature", options_.sample_temperature},
                   {"top_p", options_.top_p},
                   {"prompt_tokens", options_.prompt_tokens},
                   {"new_tokens", options_.new_tokens}};
  if (options_.divergence == OnPolicyDivergence::Mixed) j["forward_weight"] = options_.mix;
  return j;
}

std::map<std::string, double> OnPolicyDistillationObjective::validation_metrics(const GptModel& student,
                                                                                DType compute_dtype) {
  if (validation_prompts_.empty() || !teacher_) return {};
  const HeldOutDivergence d =
      held_out_divergence(student, compute_dtype, *teacher_, teacher_dtype_, validation_prompts_, options_);
  return {{"eval_on_policy_reverse_kl", d.reverse_kl}, {"eval_on_policy_forward_kl", d.forward_kl}};
}

}  // namespace retort::distill
