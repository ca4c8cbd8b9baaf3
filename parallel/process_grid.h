#pragma once
// The process grid of a run: world = dp x tp with tp innermost, so the ranks of one tensor-parallel group are
// consecutive (on one node, over NVLink, when a node holds a multiple of tp GPUs). World rank w sits at
// tp_rank = w % tp and dp_rank = w / tp.
#include <memory>
#include <string>

#include "parallel/comm/communicator.h"

namespace retort {

struct ProcessGrid {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp;  // the ranks that split one model's layers
  std::shared_ptr<Communicator> dp;  // the ranks that hold the same shard and average their gradients
  int tp_size = 1, dp_size = 1, tp_rank = 0, dp_rank = 0;

  std::string describe() const;  // "world 4 = dp 2 x tp 2; this rank: dp 1, tp 0"
};

// Collective over `world`: splits it into tp and dp groups. world->size() must divide by tp_size (an InputError
// naming both otherwise). A null world means a single process: every group is null and every size 1.
ProcessGrid make_process_grid(std::shared_ptr<Communicator> world, int tp_size);

}  // namespace retort
