#pragma once
// A failing rank's error message, printed once by whoever can see all ranks. Started by `retort launch`, every
// rank of a bad config raises the same error: N copies interleaved on one terminal hide which rank failed first
// and why. So a launched rank hands its message to the launcher (a file per rank in a folder the launcher names
// in RETORT_RANK_ERRORS), and the launcher prints each distinct message once, with the ranks that raised it.
// Ranks started by mpirun or srun have no such folder: they print their own message, prefixed by their rank.
#include <filesystem>
#include <string>
#include <vector>

namespace retort {

// The environment variable naming the folder of the ranks' error files.
inline constexpr const char* kRankErrorsVariable = "RETORT_RANK_ERRORS";

// Whether a rank's error is the run's cause, or follows from another rank's (a peer lost in a collective:
// PeerLostError). When rank 0 stops on a missing file, rank 1 may exit first with "connection reset by peer": the
// launcher reports rank 0's error and exit status, whichever exited first.
enum class RankErrorKind { kCause, kLostPeer };

// Reports a rank's fatal error: to the launcher's folder when there is one (and returns true: nothing to print),
// else returns false and leaves the printing to the caller.
bool hand_error_to_launcher(const std::string& message, RankErrorKind kind = RankErrorKind::kCause);

// Whether `rank` (global) handed the launcher in `folder` an error of kind kLostPeer.
bool rank_lost_a_peer(const std::filesystem::path& folder, int rank);

// How the caller prints its own error: "rank R: message" in a multi-rank run without a launcher folder, the
// message alone in a single process.
std::string rank_error_line(const std::string& message);

struct RankErrorGroup {
  std::vector<int> ranks;  // in increasing order
  std::string message;
  RankErrorKind kind = RankErrorKind::kCause;
};

// The messages in `folder`, one group per distinct message and kind: causes before lost peers; within each, the
// group holding `first_rank` (the rank that failed first) comes first, the others by their lowest rank.
std::vector<RankErrorGroup> collect_rank_errors(const std::filesystem::path& folder, int first_rank);

// "rank 1: message" or "ranks 0, 1: message".
std::string format_rank_error_group(const RankErrorGroup& group);

}  // namespace retort
