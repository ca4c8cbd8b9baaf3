#include "parallel/launch/launcher.h"

#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/util/error.h"
#include "parallel/comm/redis_rendezvous.h"
#include "parallel/launch/rank_errors.h"

namespace retort {

namespace fs = std::filesystem;

namespace {

int status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

pid_t spawn_rank(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
  const pid_t pid = ::fork();
  RETORT_CHECK(pid >= 0, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "retort launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

// The signal that asked the launcher to stop (0: none). A terminal's Ctrl-C reaches the ranks directly (they share
// its process group), but a scheduler's or a user's `kill` of the launcher alone would leave the ranks running.
volatile std::sig_atomic_t stop_signal = 0;

void remember_stop_signal(int signal_number) {
  stop_signal = signal_number;
}

// Installs remember_stop_signal for SIGINT, SIGTERM and SIGHUP while the launcher waits, and restores the previous
// handlers afterwards.
class StopSignals {
 public:
  StopSignals() {
    stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = remember_stop_signal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

// The first rank to exit may only have noticed another's failure (a peer lost in a collective): then the run's
// status and failed rank are those of a rank whose error is a cause, the lowest such rank on this node.
void blame_the_cause(const std::vector<RankErrorGroup>& groups, const std::vector<int>& exit_codes, int first_rank,
                     LaunchResult& result) {
  if (result.failed_rank < 0) return;
  const auto holds = [](const RankErrorGroup& group, int rank) {
    return std::find(group.ranks.begin(), group.ranks.end(), rank) != group.ranks.end();
  };
  const bool first_lost_a_peer = std::any_of(groups.begin(), groups.end(), [&](const RankErrorGroup& group) {
    return group.kind == RankErrorKind::kLostPeer && holds(group, result.failed_rank);
  });
  if (!first_lost_a_peer) return;
  int cause = -1;
  for (const RankErrorGroup& group : groups) {
    if (group.kind != RankErrorKind::kCause) continue;
    for (int rank : group.ranks) {
      const int local = rank - first_rank;
      if (local < 0 || local >= static_cast<int>(exit_codes.size()) || exit_codes[local] == 0) continue;
      if (cause < 0 || rank < cause) cause = rank;
    }
  }
  if (cause < 0) return;
  result.exit_code = exit_codes[cause - first_rank];
  result.failed_rank = cause;
}

}  // namespace

int default_omp_threads(int nproc) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0
                       ? CPU_COUNT(&set)
                       : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cpus / std::max(1, nproc));
}

LaunchResult launch_local(const std::vector<std::string>& argv, const LaunchOptions& options) {
  RETORT_INPUT_CHECK(!argv.empty(), "retort launch: nothing to run (give the command after --)");
  RETORT_INPUT_CHECK(options.nproc >= 1, "retort launch: --nproc must be at least 1, got {}", options.nproc);
  RETORT_INPUT_CHECK(options.nnodes >= 1 && options.node_rank >= 0 && options.node_rank < options.nnodes,
                     "retort launch: --node-rank {} is not one of the {} nodes (0 .. {})", options.node_rank,
                     options.nnodes, options.nnodes - 1);
  RETORT_INPUT_CHECK(options.nnodes == 1 || !options.rendezvous.empty(),
                     "retort launch: {} nodes need a rendezvous they all reach: --rendezvous with a shared folder or "
                     "redis://HOST:PORT/PREFIX (the same on every node, new for every run)",
                     options.nnodes);
  const bool own_rendezvous = options.rendezvous.empty();
  const fs::path rendezvous =
      own_rendezvous ? fs::temp_directory_path() / fmt::format("retort-rdzv-{}-{}", ::getpid(), std::time(nullptr))
                     : fs::path(options.rendezvous);
  if (!is_redis_url(options.rendezvous)) fs::create_directories(rendezvous);
  // The ranks' error messages, printed once each after the ranks exit (parallel/launch/rank_errors.h); on this node,
  // whatever the rendezvous is.
  const fs::path errors =
      fs::temp_directory_path() / fmt::format("retort-errors-{}-{}", ::getpid(), std::time(nullptr));
  fs::create_directories(errors);

  // Every rank's OpenMP team would otherwise take every CPU: N teams spin-waiting against each other on the same
  // cores made a tp 4 step of the toy GPT on 2 cores 5x slower (docs/parallel.md). A value the caller set wins.
  const bool share_cpus = options.nproc > 1 && std::getenv("OMP_NUM_THREADS") == nullptr;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.nproc; ++rank) {
    const int global_rank = options.node_rank * options.nproc + rank;
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(global_rank)},      {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc)},
        {"LOCAL_RANK", std::to_string(rank)},       {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
        {"RETORT_RENDEZVOUS", rendezvous.string()}, {kRankErrorsVariable, errors.string()}};
    if (share_cpus) env.emplace_back("OMP_NUM_THREADS", std::to_string(default_omp_threads(options.nproc)));
    pids.push_back(spawn_rank(argv, env));
  }

  LaunchResult result;
  std::vector<int> exit_codes(options.nproc, 0);  // by local rank
  const StopSignals signals;
  int running = options.nproc;
  std::chrono::steady_clock::time_point kill_deadline{};
  bool terminating = false;
  // Set when the first failure only lost a peer: the others are stopped at this time unless they exit before.
  std::optional<std::chrono::steady_clock::time_point> stop_at;
  const auto stop_the_others = [&] {
    for (pid_t other : pids)
      if (other > 0) ::kill(other, SIGTERM);
    terminating = true;
    stop_at.reset();
    kill_deadline = std::chrono::steady_clock::now() + options.grace;
  };
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      const auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      const int rank = options.node_rank * options.nproc + static_cast<int>(it - pids.begin());  // the global rank
      *it = -1;
      --running;
      const int code = status_to_code(status);
      exit_codes[it - pids.begin()] = code;
      if (code != 0 && result.failed_rank < 0 && !terminating) {
        result.exit_code = code;
        result.failed_rank = rank;
        if (rank_lost_a_peer(errors, rank) && running > 0) {
          spdlog::error(
              "retort launch: rank {} exited with status {} after losing a peer; the other ranks get {} ms "
              "to exit before they are stopped",
              rank, code, options.lost_peer_wait.count());
          stop_at = std::chrono::steady_clock::now() + options.lost_peer_wait;
        } else {
          spdlog::error("retort launch: rank {} exited with status {}; stopping the other ranks", rank, code);
          stop_the_others();
        }
      }
      continue;
    }
    if (stop_at && std::chrono::steady_clock::now() > *stop_at) {
      spdlog::error("retort launch: stopping the other ranks");
      stop_the_others();
    }
    if (stop_signal != 0 && !terminating) {
      spdlog::error("retort launch: stopped by signal {}; stopping the ranks", static_cast<int>(stop_signal));
      result.exit_code = 128 + static_cast<int>(stop_signal);
      result.failed_rank = -1;
      stop_the_others();
    }
    if (terminating && std::chrono::steady_clock::now() > kill_deadline) {
      for (pid_t other : pids)
        if (other > 0) ::kill(other, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  blame_the_cause(collect_rank_errors(errors, result.failed_rank), exit_codes, options.node_rank * options.nproc,
                  result);
  for (const RankErrorGroup& group : collect_rank_errors(errors, result.failed_rank)) {
    spdlog::error("{}", format_rank_error_group(group));
    result.rank_errors.push_back(format_rank_error_group(group));
  }
  std::error_code ignored;
  fs::remove_all(errors, ignored);
  if (own_rendezvous) fs::remove_all(rendezvous, ignored);
  return result;
}

}  // namespace retort
