#pragma once
// Where this process sits in a multi-process run, read from the environment its launcher left, and the
// world communicator built from it. Launchers understood, in order of precedence:
//   retort launch / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI (mpirun):        OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun):             SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (local size: SLURM_NTASKS_PER_NODE
//                             when it is a plain number)
// The first launcher whose rank variable is set wins, so `retort launch` inside an srun allocation uses its
// own numbering. Nothing set: a single process, rank 0 of 1.
// The rendezvous (RETORT_RENDEZVOUS) is a folder that every rank can see, on a shared filesystem across nodes, or
// a Redis server, redis://HOST:PORT/PREFIX, for nodes without one (redis_rendezvous.h); either must be fresh for
// every run (a new folder, a new prefix), since the stores refuse to overwrite keys of an earlier run.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "parallel/comm/gloo_communicator.h"

namespace retort {

inline constexpr const char* kRendezvousEnv = "RETORT_RENDEZVOUS";
inline constexpr const char* kGlooHostnameEnv = "RETORT_GLOO_HOSTNAME";  // address this rank listens on
inline constexpr const char* kGlooIfaceEnv = "RETORT_GLOO_IFACE";        // or a network interface name

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // 0 when the launcher does not say
  std::string rendezvous;    // the store's folder; empty for a single process
  std::string launcher;      // "retort launch / torchrun", "Open MPI", "Slurm" or "none"
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads and validates the variables above; every inconsistency (a rank without a size, a rank not below
// the size, a value that is not a number, a multi-rank run without a rendezvous folder) is an InputError
// naming the variables.
LaunchEnv read_launch_env(const EnvLookup& lookup);
LaunchEnv read_launch_env();  // from this process's environment

// The Gloo world group of this process: a FileStore in env.rendezvous, or a Redis store for a redis:// address (an
// in-memory store for a single rank). Unless options name an interface or host, RETORT_GLOO_IFACE /
// RETORT_GLOO_HOSTNAME decide where this rank listens; otherwise loopback when all ranks are on this node, and this
// host's name when they are not. `name` keys the group in the store: a process that joins several worlds one after
// another gives each its own.
std::shared_ptr<GlooCommunicator> connect_world(const LaunchEnv& env, GlooOptions options = {},
                                                const std::string& name = "world");

}  // namespace retort
