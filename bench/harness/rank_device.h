#pragma once
// The device a benchmark rank runs on, and the group its collectives use. Every multi-rank benchmark does the
// same three things: claim its GPU (checking that there is one per rank, so two ranks never share a GPU and
// halve each other's numbers), name it for the table and the JSON, and put its collectives on NCCL when on
// GPUs, on the Gloo world when on CPUs.
#include <memory>
#include <string>

#include "core/tensor/device.h"
#include "parallel/comm/gloo_communicator.h"

namespace retort::bench {

// A GPU's product name ("NVIDIA H100 80GB HBM3"), or "cpu".
std::string device_name(Device device);

// Makes the GPU `device` current for this process (rank `rank`): an InputError when the machine has no such GPU,
// or when this build has no CUDA backend.
void use_gpu(Device device, int rank);

// NCCL over the world's ranks for a GPU `device`, the world itself for the CPU. check_metadata: exchange each
// collective's shape and dtype first (a round trip per call; for debugging).
std::shared_ptr<Communicator> collective_group(const std::shared_ptr<GlooCommunicator>& world, Device device,
                                               bool check_metadata = false);

// The end of a multi-rank benchmark: this rank's device work, then a barrier of `group` (null: one process).
// A rank that left early would tear down its communicators while a peer still waits on it in a collective.
void leave_together(Device device, Communicator* group);

}  // namespace retort::bench
