#pragma once
// Where each data-parallel rank's loader stands, as trainer.json records it, so a resumed run reads exactly the
// batches it would have read. Every dp rank reads its own share of the data, so rank 0 gathers all positions.
#include <nlohmann/json.hpp>

#include "core/data/loader.h"
#include "parallel/launch/distributed_run.h"

namespace retort::distill {

// trainer.json's loader fields: "train_loader" alone, or "train_loader_dp<r>" for every dp rank. Collective over
// the world when dp > 1.
nlohmann::json gather_loader_positions(const data::TokenLoader& loader, const DistributedRun& run);

// This rank's position out of a trainer.json written by gather_loader_positions.
data::LoaderState loader_position_of(const nlohmann::json& trainer_state, const ProcessGrid& grid);

}  // namespace retort::distill
