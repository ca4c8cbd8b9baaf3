#include "parallel/comm/rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "core/util/error.h"
#include "parallel/comm/redis_rendezvous.h"

namespace retort {
namespace {

struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

// Precedence order: see rendezvous.h.
const std::vector<LauncherVariables>& launchers() {
  static const std::vector<LauncherVariables> all = {
      {"retort launch / torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  return all;
}

std::optional<int> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < INT_MIN || value > INT_MAX) return std::nullopt;
  return static_cast<int>(value);
}

// A variable that must hold a whole number when set.
std::optional<int> read_int(const EnvLookup& lookup, const char* name, const char* launcher) {
  const auto text = lookup(name);
  if (!text) return std::nullopt;
  const auto value = parse_int(*text);
  RETORT_INPUT_CHECK(value.has_value(), "{}={} (set by {}) is not a whole number", name, *text, launcher);
  return value;
}

}  // namespace

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  LaunchEnv env;
  env.launcher = "none";
  for (const auto& vars : launchers()) {
    if (!lookup(vars.rank)) continue;
    env.launcher = vars.launcher;
    const auto rank = read_int(lookup, vars.rank, vars.launcher);
    const auto size = read_int(lookup, vars.size, vars.launcher);
    RETORT_INPUT_CHECK(size.has_value(), "{} is set but {} is not: {} must set both", vars.rank, vars.size,
                       vars.launcher);
    RETORT_INPUT_CHECK(*size >= 1, "{}={} must be at least 1", vars.size, *size);
    RETORT_INPUT_CHECK(*rank >= 0 && *rank < *size, "{}={} must be in 0..{} because {}={}", vars.rank, *rank, *size - 1,
                       vars.size, *size);
    env.rank = *rank;
    env.world_size = *size;
    const auto local_rank = read_int(lookup, vars.local_rank, vars.launcher);
    // Slurm writes SLURM_NTASKS_PER_NODE as "2(x3)" on uneven allocations: then the local size is unknown.
    std::optional<int> local_size;
    if (const auto text = lookup(vars.local_size)) {
      local_size = parse_int(*text);
      RETORT_INPUT_CHECK(local_size.has_value() || std::string_view(vars.launcher) == "Slurm",
                         "{}={} (set by {}) is not a whole number", vars.local_size, *text, vars.launcher);
    }
    env.local_rank = local_rank.value_or(*size == 1 ? 0 : -1);
    RETORT_INPUT_CHECK(env.local_rank >= 0, "{} is set but {} is not: {} must set the local rank too", vars.rank,
                       vars.local_rank, vars.launcher);
    env.local_world_size = local_size.value_or(0);
    if (local_size) {
      RETORT_INPUT_CHECK(*local_size >= 1 && *local_size <= *size, "{}={} must be in 1..{} because {}={}",
                         vars.local_size, *local_size, *size, vars.size, *size);
      RETORT_INPUT_CHECK(env.local_rank < *local_size, "{}={} must be below {}={}", vars.local_rank, env.local_rank,
                         vars.local_size, *local_size);
    }
    break;
  }
  if (const auto path = lookup(kRendezvousEnv)) env.rendezvous = *path;
  RETORT_INPUT_CHECK(env.world_size == 1 || !env.rendezvous.empty(),
                     "{} started {} ranks but {} is not set: point it at a fresh folder that every rank can see "
                     "(on a shared filesystem across nodes)",
                     env.launcher, env.world_size, kRendezvousEnv);
  return env;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

std::shared_ptr<GlooCommunicator> connect_world(const LaunchEnv& env, GlooOptions options, const std::string& name) {
  if (const char* iface = std::getenv(kGlooIfaceEnv)) {
    options.iface = iface;
  } else if (const char* host = std::getenv(kGlooHostnameEnv)) {
    options.hostname = host;
  } else if (env.local_world_size != env.world_size && options.iface.empty() && options.hostname == "127.0.0.1") {
    // Ranks on other nodes cannot reach loopback: listen on this host's name (what other nodes resolve).
    char name[HOST_NAME_MAX + 1] = {};
    RETORT_CHECK(gethostname(name, sizeof(name)) == 0, "gethostname failed: set {} or {}", kGlooHostnameEnv,
                 kGlooIfaceEnv);
    options.hostname = name;
  }
  auto store = env.world_size == 1            ? make_hash_store()
               : is_redis_url(env.rendezvous) ? make_redis_store(env.rendezvous)
                                              : make_file_store(env.rendezvous);
  return GlooCommunicator::create(std::move(store), name, env.rank, env.world_size, std::move(options));
}

}  // namespace retort
