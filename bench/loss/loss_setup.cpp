#include "bench/loss/loss_setup.h"

#include <fmt/format.h>

#include "bench/harness/rank_device.h"
#include "core/util/error.h"

namespace retort::bench {

LossKind parse_loss(const std::string& name) {
  if (name == "ce") return LossKind::CrossEntropy;
  if (name == "fkl") return LossKind::ForwardKL;
  if (name == "rkl") return LossKind::ReverseKL;
  throw InputError(fmt::format("--losses: unknown loss '{}' (ce, fkl, rkl)", name));
}

LossRun open_loss_run(const LossBenchOptions& o, const LaunchEnv& env) {
  LossRun run;
  run.tp = o.tp;
  run.rank = env.rank;
  run.tokens = o.tokens;
  const std::string device_text = o.device.empty() ? (cuda_device_count() > 0 ? "cuda" : "cpu") : o.device;
  run.device = Device::parse(device_text);
  if (run.device.is_cuda()) {
    if (o.tp > 1) {
      RETORT_INPUT_CHECK(device_text == "cuda",
                         "--device {}: with --tp > 1 every rank takes the GPU of its local rank; "
                         "say --device cuda",
                         device_text);
      run.device = Device::cuda(env.local_rank);
    }
    use_gpu(run.device, env.rank);
    run.device_name = device_name(run.device);
  }
  if (o.tp > 1) {
    run.world = connect_world(env);
    run.comm = collective_group(run.world, run.device);
  }
  return run;
}

}  // namespace retort::bench
