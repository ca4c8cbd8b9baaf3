#include "parallel/launch/rank_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "core/io/atomic_file.h"
#include "parallel/comm/rendezvous.h"

namespace retort {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFilePrefix = "rank-";

// Launch variables that do not parse are an error of their own, reported elsewhere; here the message must get out.
LaunchEnv launch_env_or_single() {
  try {
    return read_launch_env();
  } catch (const std::exception&) {
    return LaunchEnv{};
  }
}

}  // namespace

bool hand_error_to_launcher(const std::string& message) {
  const char* folder = std::getenv(kRankErrorsVariable);
  if (folder == nullptr || *folder == '\0') return false;
  try {
    write_text_atomic(fs::path(folder) / fmt::format("{}{}.txt", kFilePrefix, launch_env_or_single().rank), message);
    return true;
  } catch (const std::exception&) {
    return false;  // the folder is gone: print it here rather than lose it
  }
}

std::string rank_error_line(const std::string& message) {
  const LaunchEnv env = launch_env_or_single();
  return env.world_size > 1 ? fmt::format("rank {}: {}", env.rank, message) : message;
}

std::vector<RankErrorGroup> collect_rank_errors(const fs::path& folder, int first_rank) {
  std::map<std::string, std::vector<int>> ranks_by_message;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kFilePrefix) || entry.path().extension() != ".txt") continue;
    int rank = -1;
    try {
      rank = std::stoi(name.substr(std::string(kFilePrefix).size()));
      ranks_by_message[read_file(entry.path())].push_back(rank);
    } catch (const std::exception&) {
      continue;  // a half-written or foreign file: the rank's exit status still tells the story
    }
  }
  std::vector<RankErrorGroup> groups;
  for (auto& [message, ranks] : ranks_by_message) {
    std::sort(ranks.begin(), ranks.end());
    groups.push_back({std::move(ranks), message});
  }
  std::sort(groups.begin(), groups.end(), [first_rank](const RankErrorGroup& a, const RankErrorGroup& b) {
    const bool a_first = std::binary_search(a.ranks.begin(), a.ranks.end(), first_rank);
    const bool b_first = std::binary_search(b.ranks.begin(), b.ranks.end(), first_rank);
    if (a_first != b_first) return a_first;
    return a.ranks.front() < b.ranks.front();
  });
  return groups;
}

std::string format_rank_error_group(const RankErrorGroup& group) {
  return fmt::format("{} {}: {}", group.ranks.size() == 1 ? "rank" : "ranks", fmt::join(group.ranks, ", "),
                     group.message);
}

}  // namespace retort
