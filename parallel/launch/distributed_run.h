#pragma once
// What every distributed command sets up first: where this process sits (from its launcher's environment), its
// device (cuda:LOCAL_RANK when the run is on GPUs: one GPU per local rank), the world group on the right backend
// (Gloo for CPU tensors, NCCL for CUDA tensors) and the dp x tp grid over it. A single process without a
// launcher gets a grid of null groups and runs exactly the dense code.
#include <chrono>
#include <memory>

#include "core/tensor/device.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/process_grid.h"

namespace retort {

struct DistributedRun {
  LaunchEnv env;
  Device device = Device::cpu();
  std::shared_ptr<GlooCommunicator> host_world;  // host-side coordination (barriers around files); null alone
  ProcessGrid grid;                              // tensor collectives, on the device's backend

  bool is_main() const { return env.rank == 0; }
  void barrier() const;  // a no-op for a single process
};

// `requested`: the device the config or --device asked for; "cuda" means this rank's local GPU. tp_size:
// parallel.tp. timeout: how long any join or collective may wait for a peer (parallel.timeout_s) before every
// waiting rank fails with an error naming the lost peer. Errors (too few GPUs, a tp that does not divide the
// world) name the setting to change.
DistributedRun start_distributed_run(Device requested, int tp_size,
                                     std::chrono::milliseconds timeout = kDefaultCommTimeout);

}  // namespace retort
