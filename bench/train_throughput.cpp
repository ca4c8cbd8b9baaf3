// Training throughput of retort's GPT: forward, backward and an AdamW step on random tokens, timed after a
// warm-up. bench/train_throughput_torch.py measures the PyTorch eager twin of the same model and batch;
// bench/run_train_throughput.sh runs both in one go and prints the table for docs/benchmarks.md.
// --per-step-casts measures the bf16 forward as it was before weights kept bf16 working copies (one cast per weight
// per forward); --profile-ops times one extra step op by op (core/profile/op_profiler.h); --cuda-graphs replays
// every step after the first as the trainer's CUDA graphs (distill/train/graphed_train_step.h), and with
// --grad-clip clips the gradients as the trainer does (both ways).
// Under `retort launch --nproc N` the model is split over N tensor-parallel ranks, one GPU each (NCCL), every rank
// on the same batch; tokens/s counts the batch once and the step time is the slowest rank's, peak memory is
// per rank (the largest), and rank 0 prints the record:
//   retort launch --nproc 2 --exec -- build/bench/bench_train_throughput --device cuda ...
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "bench/harness/host_clock.h"
#include "bench/harness/json_lines.h"
#include "bench/harness/model_family.h"
#include "bench/harness/pool_meter.h"
#include "bench/harness/rank_device.h"
#include "bench/harness/rank_reduction.h"
#include "core/nn/working_copy.h"
#include "core/ops/ops.h"
#include "core/profile/op_profiler.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"
#include "distill/train/graphed_train_step.h"
#include "losses/cross_entropy.h"
#include "optim/adamw/adamw.h"
#include "optim/grad_clip.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/models/gpt_model.h"

using namespace retort;

int main(int argc, char** argv) {
  GptConfig config;
  std::string device_text = "cpu", dtype_name_arg = "f32", label = "custom";
  int64_t batch = 8, warmup = 3, steps = 10;
  CLI::App app{"retort training-throughput benchmark"};
  app.add_option("--label", label);
  app.add_option("--device", device_text);
  app.add_option("--dtype", dtype_name_arg, "compute dtype: f32 or bf16");
  app.add_option("--batch", batch);
  app.add_option("--seq", config.block_size, "sequence length (= context)");
  app.add_option("--vocab", config.vocab_size);
  app.add_option("--layers", config.n_layer);
  app.add_option("--heads", config.n_head);
  app.add_option("--embd", config.n_embd);
  bench::add_family_options(app, config);
  bool untied = false;
  app.add_flag("--untied", untied, "a separate LM head");
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps);
  bool per_step_casts = false, profile_ops = false, cuda_graphs = false, graphed_work_eager = false;
  double grad_clip = 0;
  app.add_flag("--cuda-graphs", cuda_graphs,
               "replay each step after the first as CUDA graphs (the trainer's train.cuda_graphs path)");
  app.add_flag("--graphed-work-eager", graphed_work_eager,
               "with --cuda-graphs: the graphed step's work enqueued eagerly, never recorded (tells the graphs' own "
               "cost from that of their work)");
  app.add_option("--grad-clip", grad_clip, "clip the global gradient norm at this value (0: no clipping)");
  app.add_flag("--per-step-casts", per_step_casts,
               "cast every f32 weight to the compute dtype on every forward instead of keeping bf16 working copies "
               "(the behaviour before working copies; same as RETORT_WEIGHT_CASTS=per-step)");
  app.add_flag("--profile-ops", profile_ops,
               "after the timed steps, time one more step op by op (CUDA events) and print the table on stderr and "
               "its JSON line on stdout (also RETORT_PROFILE_OPS=1)");
  CLI11_PARSE(app, argc, argv);
  if (per_step_casts) nn::set_working_copies_enabled(false);
  if (const char* env_profile = std::getenv("RETORT_PROFILE_OPS"); env_profile && std::string(env_profile) == "1")
    profile_ops = true;

  config.tie_weights = !untied;
  bench::apply_family_architecture(config);
  Device device = Device::parse(device_text);
  const LaunchEnv env = read_launch_env();
  std::shared_ptr<Communicator> tp_group;
  std::shared_ptr<GlooCommunicator> world;
  if (env.world_size > 1) {
    RETORT_INPUT_CHECK(device.is_cuda(), "tensor-parallel throughput runs on GPUs: pass --device cuda");
    world = connect_world(env, GlooOptions{});
    device = Device::cuda(env.local_rank);
    bench::use_gpu(device, env.rank);
    tp_group = bench::collective_group(world, device);
  }
  // The peak of the whole run (parameters, optimizer state, activations), as torch.cuda.max_memory_allocated
  // reports it for the twins.
  bench::PoolMeter memory(device);
  if (memory.available()) memory.start();
  const DType dtype = dtype_from_name(dtype_name_arg);
  GptModel model(config, tp_group);
  model.initialize(1);
  model.to(device);
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {});
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<int32_t> ids(static_cast<size_t>(batch * (config.block_size + 1)));
  for (auto& t : ids) t = token(rng);
  std::vector<int32_t> inputs, targets;
  for (int64_t b = 0; b < batch; ++b) {
    auto row = ids.begin() + b * (config.block_size + 1);
    inputs.insert(inputs.end(), row, row + config.block_size);
    targets.insert(targets.end(), row + 1, row + config.block_size + 1);
  }
  Tensor x = Tensor::from_ints(inputs, {batch, config.block_size}, device);
  Tensor y = Tensor::from_ints(targets, {batch, config.block_size});

  const Tensor y_device = y.to(device);
  std::unique_ptr<distill::GraphedTrainStep> graphed;
  if (cuda_graphs) {
    RETORT_INPUT_CHECK(!profile_ops || graphed_work_eager,
                       "--profile-ops times ops as they are enqueued: with --cuda-graphs add --graphed-work-eager");
    RETORT_INPUT_CHECK(!tp_group && device.is_cuda(), "--cuda-graphs measures one GPU: pass --device cuda, no launch");
    distill::GraphedStepOptions options;
    options.batch = batch;
    options.seq = config.block_size;
    options.max_norm = grad_clip;
    options.compute_dtype = dtype;
    options.record_graphs = !graphed_work_eager;
    // Two eager steps and the recording one stay out of the timed steps.
    warmup = std::max<int64_t>(warmup, 3);
    graphed = std::make_unique<distill::GraphedTrainStep>(model, optimizer, options, device);
  }
  data::TokenBatch host_batch{batch, config.block_size, inputs, targets, {}};
  const auto train_step = [&] {
    if (graphed) {
      const double loss = graphed->micro_batch(host_batch);
      graphed->update(1e-4);  // waits for the step: the timing covers the whole step
      return loss;
    }
    Tensor loss = losses::cross_entropy(model.forward(x, dtype), y_device);
    loss.backward();
    if (grad_clip > 0) optim::clip_grad_norm(model.parameters(), grad_clip);
    optimizer.step(1e-4);
    optimizer.zero_grad();
    return loss.item();  // waits for the step: the timing covers the whole step
  };
  double loss_value = 0, seconds = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    if (i == warmup) device_runtime::synchronize(device);
    const bench::Stopwatch watch;
    loss_value = train_step();
    if (i >= warmup) seconds += watch.seconds();
  }
  // Outside the timed steps: the events of the profile must not slow the measured ones.
  std::optional<profile::OpProfile> op_profile;
  if (profile_ops) {
    device_runtime::synchronize(device);
    profile::start_op_profile(device);
    train_step();
    op_profile = profile::stop_op_profile();
  }
  // The slowest rank sets the pace of a tensor-parallel step; the largest rank's memory is the one that must fit.
  seconds = bench::slowest_rank(world.get(), seconds);
  const double peak_gib =
      memory.available() ? bench::slowest_rank(world.get(), memory.extra() / double(1 << 30)) : -1.0;
  const double tokens_per_s = static_cast<double>(batch * config.block_size * steps) / seconds;
  const nlohmann::json out{
      {"framework", "retort"},
      {"label", label},
      {"device", device.str()},
      {"dtype", dtype_name_arg},
      {"batch", batch},
      {"seq", config.block_size},
      {"params", model.parameter_count()},
      {"warmup_steps", warmup},
      {"tokens_per_s", tokens_per_s},
      {"ms_per_step", 1000.0 * seconds / steps},
      {"final_loss", loss_value},
      {"tp", tp_group ? tp_group->size() : 1},
      {"weight_casts", nn::working_copies_enabled() ? "working-copies" : "per-step"},
      {"cuda_graphs", graphed ? graphed->graphed() : false},
      {"graph_nodes", graphed ? graphed->graph_nodes() : 0},
      {"graph_fallback", graphed ? graphed->fallback_reason() : ""},
      {"grad_clip", grad_clip},
      {"peak_memory_gib", memory.available() ? nlohmann::json(peak_gib) : nlohmann::json(nullptr)}};
  // stdout is the record: bench/run_train_throughput.sh collects the lines of both frameworks.
  if (!tp_group || tp_group->rank() == 0) {
    std::cout << bench::stamped(out, bench::record_origin(bench::device_name(device))).dump() << std::endl;
    if (op_profile) {
      std::cerr << fmt::format("op profile of one step ({}, {}, batch {} x {}):\n", label, dtype_name_arg, batch,
                               config.block_size)
                << profile::format_op_profile(*op_profile);
      const nlohmann::json record{{"framework", "retort"},
                                  {"label", label},
                                  {"kind", "op_profile"},
                                  {"weight_casts", out["weight_casts"]},
                                  {"profile", profile::op_profile_json(*op_profile)}};
      std::cout << record.dump() << std::endl;
    }
  }
  bench::leave_together(device, tp_group.get());
  return 0;
}
