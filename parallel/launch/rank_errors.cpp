#include "parallel/launch/rank_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "core/io/atomic_file.h"
#include "parallel/comm/rendezvous.h"

namespace retort {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFilePrefix = "rank-";
// rank-3.txt holds a cause, rank-3.lost-peer.txt an error that follows from another rank's.
constexpr const char* kLostPeerSuffix = ".lost-peer";

// Launch variables that do not parse are an error of their own, reported elsewhere; here the message must get out.
LaunchEnv launch_env_or_single() {
  try {
    return read_launch_env();
  } catch (const std::exception&) {
    return LaunchEnv{};
  }
}

}  // namespace

bool hand_error_to_launcher(const std::string& message, RankErrorKind kind) {
  const char* folder = std::getenv(kRankErrorsVariable);
  if (folder == nullptr || *folder == '\0') return false;
  try {
    const char* suffix = kind == RankErrorKind::kLostPeer ? kLostPeerSuffix : "";
    write_text_atomic(fs::path(folder) / fmt::format("{}{}{}.txt", kFilePrefix, launch_env_or_single().rank, suffix),
                      message);
    return true;
  } catch (const std::exception&) {
    return false;  // the folder is gone: print it here rather than lose it
  }
}

bool rank_lost_a_peer(const fs::path& folder, int rank) {
  std::error_code ignored;
  return fs::exists(folder / fmt::format("{}{}{}.txt", kFilePrefix, rank, kLostPeerSuffix), ignored);
}

std::string rank_error_line(const std::string& message) {
  const LaunchEnv env = launch_env_or_single();
  return env.world_size > 1 ? fmt::format("rank {}: {}", env.rank, message) : message;
}

std::vector<RankErrorGroup> collect_rank_errors(const fs::path& folder, int first_rank) {
  std::map<std::pair<RankErrorKind, std::string>, std::vector<int>> ranks_by_message;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kFilePrefix) || entry.path().extension() != ".txt") continue;
    const std::string stem = entry.path().stem().string().substr(std::string(kFilePrefix).size());
    const bool lost_peer = stem.ends_with(kLostPeerSuffix);
    const std::string rank_text = lost_peer ? stem.substr(0, stem.size() - std::string(kLostPeerSuffix).size()) : stem;
    if (rank_text.empty() || !std::all_of(rank_text.begin(), rank_text.end(), ::isdigit)) continue;  // a foreign file
    try {
      const RankErrorKind kind = lost_peer ? RankErrorKind::kLostPeer : RankErrorKind::kCause;
      ranks_by_message[{kind, read_file(entry.path())}].push_back(std::stoi(rank_text));
    } catch (const std::exception&) {
      continue;  // a half-written file: the rank's exit status still tells the story
    }
  }
  std::vector<RankErrorGroup> groups;
  for (auto& [key, ranks] : ranks_by_message) {
    std::sort(ranks.begin(), ranks.end());
    groups.push_back({std::move(ranks), key.second, key.first});
  }
  std::sort(groups.begin(), groups.end(), [first_rank](const RankErrorGroup& a, const RankErrorGroup& b) {
    if (a.kind != b.kind) return a.kind == RankErrorKind::kCause;
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
