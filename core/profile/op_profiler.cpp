#include "core/profile/op_profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

#include "core/util/error.h"
#ifdef RETORT_WITH_CUDA
#include "core/cuda/cuda_context.h"
#endif

namespace retort::profile {

namespace detail {
std::atomic<bool> active{false};
thread_local int open_ops = 0;
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

thread_local const char* tls_phase = "forward";

struct Record {
  const char* phase;
  std::string name;  // a copy: a backward node's name dies with its graph, before the profile is read
  bool is_node;
  Clock::time_point host_start;
  double host_ms = 0;
#ifdef RETORT_WITH_CUDA
  cudaEvent_t start = nullptr, stop = nullptr;
#endif
};

struct State {
  std::mutex mutex;
  Device device = Device::cpu();
  std::vector<Record> records;
  Clock::time_point host_start;
#ifdef RETORT_WITH_CUDA
  std::vector<cudaEvent_t> spare_events;  // created once on the profiled device, reused by every profile
  int events_device = -1;
  cudaEvent_t step_start = nullptr, step_stop = nullptr;

  cudaEvent_t take_event() {
    if (spare_events.empty()) {
      cuda::DeviceGuard guard(device);
      cudaEvent_t event;
      RETORT_CUDA_CHECK(cudaEventCreate(&event));
      return event;
    }
    cudaEvent_t event = spare_events.back();
    spare_events.pop_back();
    return event;
  }
  void record(cudaEvent_t event) const {
    RETORT_CUDA_CHECK(cudaEventRecord(event, cuda::compute_stream(device.index)));
  }
  void drop_events_of_other_device() {
    if (events_device == device.index) return;
    if (events_device >= 0) {
      cuda::DeviceGuard guard(events_device);
      for (cudaEvent_t event : spare_events) cudaEventDestroy(event);
      for (cudaEvent_t event : {step_start, step_stop})
        if (event) cudaEventDestroy(event);
    }
    spare_events.clear();
    step_start = step_stop = nullptr;
    events_device = device.index;
  }
#endif
};

State& state() {
  static State s;
  return s;
}

std::vector<OpTiming> largest_first(const std::map<std::tuple<std::string, std::string>, OpTiming>& by_name) {
  std::vector<OpTiming> out;
  for (const auto& [key, timing] : by_name) out.push_back(timing);
  std::stable_sort(out.begin(), out.end(),
                   [](const OpTiming& a, const OpTiming& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace

namespace detail {

int begin_range(const char* name, bool is_node, Device device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  // A profile covers one device; work elsewhere (host-side tensors of a GPU step) is not its time.
  if (!active.load(std::memory_order_relaxed) || device != s.device) return -1;
  Record record{tls_phase, name, is_node, {}};
#ifdef RETORT_WITH_CUDA
  if (device.is_cuda()) {
    record.start = s.take_event();
    record.stop = s.take_event();
    s.record(record.start);
  }
#endif
  record.host_start = Clock::now();
  s.records.push_back(std::move(record));
  return static_cast<int>(s.records.size() - 1);
}

void end_range(int token) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (token >= static_cast<int>(s.records.size())) return;  // the profile was restarted meanwhile
  Record& record = s.records[static_cast<size_t>(token)];
#ifdef RETORT_WITH_CUDA
  if (record.stop) {
    s.record(record.stop);
    return;
  }
#endif
  record.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - record.host_start).count();
}

}  // namespace detail

PhaseScope::PhaseScope(const char* phase) : previous_(tls_phase) {
  tls_phase = phase;
}
PhaseScope::~PhaseScope() {
  tls_phase = previous_;
}

double OpProfile::ops_ms() const {
  double total = 0;
  for (const OpTiming& op : ops) total += op.total_ms;
  return total;
}

void start_op_profile(Device device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  RETORT_CHECK(!detail::active.load(), "an op profile is already open: stop_op_profile() it first");
  s.device = device;
  s.records.clear();
#ifdef RETORT_WITH_CUDA
  if (device.is_cuda()) {
    s.drop_events_of_other_device();
    if (!s.step_start) s.step_start = s.take_event();
    if (!s.step_stop) s.step_stop = s.take_event();
    s.record(s.step_start);
  }
#endif
  s.host_start = Clock::now();
  detail::active.store(true);
}

OpProfile stop_op_profile() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  RETORT_CHECK(detail::active.load(), "stop_op_profile() without start_op_profile()");
  detail::active.store(false);
  OpProfile out;
#ifdef RETORT_WITH_CUDA
  if (s.device.is_cuda()) {
    s.record(s.step_stop);
    RETORT_CUDA_CHECK(cudaEventSynchronize(s.step_stop));
    float ms = 0;
    RETORT_CUDA_CHECK(cudaEventElapsedTime(&ms, s.step_start, s.step_stop));
    out.step_ms = ms;
  }
#endif
  if (!s.device.is_cuda()) out.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - s.host_start).count();
  std::map<std::tuple<std::string, std::string>, OpTiming> ops, nodes;
  for (Record& record : s.records) {
    double ms = record.host_ms;
#ifdef RETORT_WITH_CUDA
    if (record.start) {
      float elapsed = 0;
      // A range still open at stop (an exception unwound past it) has no stop event recorded: it is skipped.
      if (cudaEventElapsedTime(&elapsed, record.start, record.stop) != cudaSuccess) (void)cudaGetLastError();
      ms = elapsed;
      s.spare_events.push_back(record.start);
      s.spare_events.push_back(record.stop);
    }
#endif
    OpTiming& timing = (record.is_node ? nodes : ops)[{record.phase, record.name}];
    timing.phase = record.phase;
    timing.name = record.name;
    ++timing.calls;
    timing.total_ms += ms;
  }
  s.records.clear();
  out.ops = largest_first(ops);
  out.nodes = largest_first(nodes);
  return out;
}

std::string format_op_profile(const OpProfile& p) {
  const auto share = [&](double ms) { return p.step_ms > 0 ? 100.0 * ms / p.step_ms : 0.0; };
  std::string out = fmt::format("{:<10} {:<28} {:>7} {:>11} {:>7}\n", "phase", "op", "calls", "total ms", "share");
  for (const OpTiming& op : p.ops)
    out += fmt::format("{:<10} {:<28} {:>7} {:>11.3f} {:>6.1f}%\n", op.phase, op.name, op.calls, op.total_ms,
                       share(op.total_ms));
  const double outside = std::max(0.0, p.step_ms - p.ops_ms());
  out += fmt::format("{:<10} {:<28} {:>7} {:>11.3f} {:>6.1f}%\n", "-", "(in no op: gaps, other kernels)", "", outside,
                     share(outside));
  out += fmt::format("{:<10} {:<28} {:>7} {:>11.3f} {:>6.1f}%\n", "-", "step", "", p.step_ms, 100.0);
  if (!p.nodes.empty()) {
    out += "backward nodes (each including the ops it ran):\n";
    for (const OpTiming& node : p.nodes)
      out += fmt::format("{:<10} {:<28} {:>7} {:>11.3f} {:>6.1f}%\n", node.phase, node.name, node.calls, node.total_ms,
                         share(node.total_ms));
  }
  return out;
}

nlohmann::json op_profile_json(const OpProfile& p) {
  const auto rows = [&](const std::vector<OpTiming>& timings) {
    nlohmann::json list = nlohmann::json::array();
    for (const OpTiming& t : timings)
      list.push_back({{"phase", t.phase},
                      {"name", t.name},
                      {"calls", t.calls},
                      {"total_ms", t.total_ms},
                      {"share", p.step_ms > 0 ? t.total_ms / p.step_ms : 0.0}});
    return list;
  };
  return {{"step_ms", p.step_ms}, {"ops_ms", p.ops_ms()}, {"ops", rows(p.ops)}, {"backward_nodes", rows(p.nodes)}};
}

}  // namespace retort::profile
