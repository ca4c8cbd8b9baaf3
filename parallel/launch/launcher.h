#pragma once
// Local multi-process launch, like torchrun: N copies of a command, each with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, RETORT_RENDEZVOUS (a fresh folder every rank can see) and its share of the CPUs as
// OMP_NUM_THREADS. When one rank fails, the
// others are stopped (SIGTERM, then SIGKILL after a grace period) and the launch returns the first failure's
// exit status, so a dead rank never leaves the rest hanging.
#include <chrono>
#include <string>
#include <vector>

namespace retort {

struct LaunchOptions {
  int nproc = 1;  // ranks on this node
  // Several nodes, as torchrun's --nnodes / --node-rank: this node's ranks are node_rank * nproc ... + nproc - 1
  // of nnodes * nproc, and every node's launcher must name the same rendezvous.
  int nnodes = 1;
  int node_rank = 0;
  // A folder every rank can see, or redis://HOST:PORT/PREFIX; empty (one node only): a new folder under the
  // system temp directory, removed afterwards.
  std::string rendezvous;
  std::chrono::seconds grace{10};
  // A first failure that only lost a peer (RankErrorKind::kLostPeer) is a symptom: the rank that caused it is usually
  // still unwinding (its sockets close before its error is reported and it exits). The others get this long to exit
  // by themselves before they are stopped, so the cause's own status and message are the ones reported.
  std::chrono::milliseconds lost_peer_wait{5000};
};

struct LaunchResult {
  int exit_code = 0;     // 0, or the first failing rank's status (128 + signal for a killed rank, or for a signal
                         // that stopped the launcher itself: then every rank is stopped and failed_rank stays -1);
                         // when the first only lost a peer (RankErrorKind::kLostPeer), the status of the lowest rank
                         // whose error is a cause
  int failed_rank = -1;  // a global rank (RANK)
  // The ranks' error messages, one line per distinct message ("ranks 0, 1: ..."), the first failure's first; the
  // launcher has printed them.
  std::vector<std::string> rank_errors;
};

// The OpenMP threads each of nproc local ranks gets when OMP_NUM_THREADS is not set: the CPUs this process may
// run on, shared out (at least 1), as torchrun does for its ranks.
int default_omp_threads(int nproc);

// Runs argv (argv[0] a program path) nproc times and waits for all of them; with nproc > 1 and no
// OMP_NUM_THREADS in the environment, each rank gets OMP_NUM_THREADS = default_omp_threads(nproc).
LaunchResult launch_local(const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace retort
