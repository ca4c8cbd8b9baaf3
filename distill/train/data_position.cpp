#include "distill/train/data_position.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace retort::distill {

namespace {

// The loader state travels as bytes in a fixed-size i32 tensor: Gloo gathers equal sizes only.
constexpr int64_t kExchangeBytes = 4096;

std::string loader_key(int dp_rank) {
  return fmt::format("train_loader_dp{}", dp_rank);
}

}  // namespace

nlohmann::json gather_loader_positions(const data::TokenLoader& loader, const DistributedRun& run) {
  const ProcessGrid& grid = run.grid;
  nlohmann::json state;
  if (grid.dp_size == 1) {
    state["train_loader"] = loader.state();
    return state;
  }
  const std::string mine = nlohmann::json(loader.state()).dump();
  RETORT_CHECK(static_cast<int64_t>(mine.size()) < kExchangeBytes, "loader state of {} bytes does not fit the exchange",
               mine.size());
  std::vector<int32_t> bytes(mine.begin(), mine.end());
  bytes.resize(kExchangeBytes, 0);
  Tensor all = run.host_world->all_gather(Tensor::from_ints(bytes, {1, kExchangeBytes}), 0);
  const auto flat = all.to_ints();
  for (int w = 0; w < run.env.world_size; ++w) {
    if (w % grid.tp_size != 0) continue;  // one replica per dp rank
    std::string text;
    for (int64_t i = 0; i < kExchangeBytes && flat[w * kExchangeBytes + i] != 0; ++i)
      text.push_back(static_cast<char>(flat[w * kExchangeBytes + i]));
    state[loader_key(w / grid.tp_size)] = nlohmann::json::parse(text);
  }
  return state;
}

data::LoaderState loader_position_of(const nlohmann::json& trainer_state, const ProcessGrid& grid) {
  return trainer_state.at(grid.dp_size == 1 ? "train_loader" : loader_key(grid.dp_rank)).get<data::LoaderState>();
}

}  // namespace retort::distill
