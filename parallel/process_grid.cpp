#include "parallel/process_grid.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace retort {

std::string ProcessGrid::describe() const {
  return fmt::format("world {} = dp {} x tp {}; this rank: dp {}, tp {}", dp_size * tp_size, dp_size, tp_size, dp_rank,
                     tp_rank);
}

ProcessGrid make_process_grid(std::shared_ptr<Communicator> world, int tp_size) {
  RETORT_INPUT_CHECK(tp_size >= 1, "parallel.tp must be at least 1, got {}", tp_size);
  ProcessGrid grid;
  const int world_size = world ? world->size() : 1;
  RETORT_INPUT_CHECK(world_size % tp_size == 0,
                     "parallel.tp = {} does not divide the world of {} ranks: launch a multiple of {} ranks "
                     "(retort launch --nproc N) or lower parallel.tp",
                     tp_size, world_size, tp_size);
  grid.tp_size = tp_size;
  grid.dp_size = world_size / tp_size;
  if (!world) return grid;
  grid.world = world;
  const int rank = world->rank();
  grid.tp_rank = rank % tp_size;
  grid.dp_rank = rank / tp_size;
  // Same color, same group; the key keeps ranks in world order inside each group.
  grid.tp = world->split(grid.dp_rank, rank);
  grid.dp = world->split(grid.tp_rank, rank);
  return grid;
}

}  // namespace retort
