#pragma once
// What every part of the loss benchmark shares: which loss it measures, and the run (device, ranks, groups).
#include <cstdint>
#include <memory>
#include <string>

#include "bench/loss/loss_bench_options.h"
#include "core/tensor/device.h"
#include "parallel/comm/gloo_communicator.h"
#include "parallel/comm/rendezvous.h"

namespace retort::bench {

enum class LossKind { CrossEntropy, ForwardKL, ReverseKL };

// "ce", "fkl", "rkl" (an InputError naming --losses otherwise).
LossKind parse_loss(const std::string& name);

// The KL losses read a teacher's logits as well as the student's.
inline bool is_kl(LossKind kind) {
  return kind != LossKind::CrossEntropy;
}

struct LossRun {
  Device device = Device::cpu();
  std::string device_name = "cpu";
  int rank = 0;
  int tp = 1;
  int64_t tokens = 0;
  std::shared_ptr<GlooCommunicator> world;  // host-side agreement between ranks; null for tp 1
  std::shared_ptr<Communicator> comm;       // the tp group: NCCL on GPUs, the Gloo world on CPUs; null for tp 1
};

// This rank's device (a GPU of its own under tp > 1) and, for tp > 1, its groups.
LossRun open_loss_run(const LossBenchOptions& options, const LaunchEnv& env);

}  // namespace retort::bench
