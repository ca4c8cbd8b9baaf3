#include "parallel/launch/distributed_run.h"

#include <spdlog/spdlog.h>

#include <atomic>

#include "core/util/error.h"
#ifdef RETORT_WITH_CUDA
#include "parallel/comm/nccl_communicator.h"
#endif

namespace retort {

void DistributedRun::barrier() const {
  if (host_world) host_world->barrier();
}

DistributedRun start_distributed_run(Device requested, int tp_size, std::chrono::milliseconds timeout) {
  DistributedRun run;
  run.env = read_launch_env();
  run.device = requested;
  if (run.env.world_size == 1) {
    RETORT_INPUT_CHECK(tp_size == 1,
                       "parallel.tp = {} needs {} ranks but this is a single process: add --nproc {} (or start it "
                       "with retort launch, mpirun or srun)",
                       tp_size, tp_size, tp_size);
    run.grid = make_process_grid(nullptr, 1);
    return run;
  }
  if (requested.is_cuda()) {
    const int gpus = cuda_device_count();
    RETORT_INPUT_CHECK(run.env.local_rank < gpus,
                       "local rank {} has no GPU: this node has {} CUDA device(s) for {} local ranks; start at most {} "
                       "ranks per node",
                       run.env.local_rank, gpus, run.env.local_world_size, gpus);
    run.device = Device::cuda(run.env.local_rank);
  }
  // A command of several stages (`distill run`: teacher, cache, students) starts one run per stage in the same
  // process; the store keeps every key of the earlier ones, so each joins a world of its own name. Every rank
  // runs the same stages in the same order, so the names agree.
  static std::atomic<int> runs_started{0};
  const int index = runs_started++;
  GlooOptions gloo;
  gloo.timeout = timeout;
  run.host_world = connect_world(run.env, gloo, index == 0 ? "world" : fmt::format("world.{}", index));
  std::shared_ptr<Communicator> world = run.host_world;
#ifdef RETORT_WITH_CUDA
  if (run.device.is_cuda())
    world = NcclCommunicator::create(run.host_world, run.device.index, NcclOptions{.timeout = timeout});
#endif
  RETORT_CHECK(run.device.is_cpu() || world->backend() == "nccl", "CUDA tensors need the NCCL backend");
  run.grid = make_process_grid(world, tp_size);
  spdlog::info("rank {} of {} ({}): {} on {}", run.env.rank, run.env.world_size, run.env.launcher, run.grid.describe(),
               run.device.str());
  return run;
}

}  // namespace retort
