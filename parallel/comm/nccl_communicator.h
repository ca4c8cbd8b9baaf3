#pragma once
// The NCCL backend: collectives on CUDA tensors, one rank per GPU. It rides on a Gloo group of the same
// ranks (the bootstrap): NCCL's unique id travels by a Gloo broadcast, so it needs no store of its own, and
// split() splits the Gloo group first.
//
// Ordering: collectives run on the communicator's own stream. Each waits (by a CUDA event) for the work already
// queued on the device's compute stream, and the compute stream waits for the collective before anything queued
// after it, so callers see the usual stream semantics and tensors freed through the stream-ordered pool are
// never reused while NCCL still reads them. bf16 is reduced natively (NCCL accumulates in its own precision).
//
// Timeouts: a watchdog thread polls each collective's completion event and ncclCommGetAsyncError; a collective
// that has not finished within the timeout, or an asynchronous NCCL error, aborts the communicator
// (ncclCommAbort, which also ends the kernels spinning on a dead peer) and every later call throws the reason.
// The NCCL id travels over the Gloo bootstrap, whose own timeout catches a rank that never arrives.
// The communicator is non-blocking by default (ncclConfig_t::blocking = 0): every host-side NCCL call returns
// at once and is polled with the deadline, so no NCCL call can hold a rank forever. That costs ~50-100 us of
// host time per collective, which matters for small messages (docs/benchmarks.md measures both modes).
// NcclOptions::blocking = true or RETORT_NCCL_BLOCKING=1 selects NCCL's blocking mode, as PyTorch uses:
// collectives launch in microseconds, but a host call that blocks inside NCCL (teardown next to a dead peer;
// ranks as threads of one process) is outside the timeout's reach.
#ifdef RETORT_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/comm/communicator.h"
#include "parallel/comm/gloo_communicator.h"

namespace retort {

struct NcclOptions {
  std::chrono::milliseconds timeout = kDefaultCommTimeout;
  // Check signatures over the bootstrap Gloo group before each collective (a host round trip per call; for
  // debugging a hang rather than for training runs).
  bool check_metadata = false;
  // NCCL's blocking mode (see above): faster small collectives, weaker guarantee against hangs.
  bool blocking = false;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over the bootstrap group's ranks: every rank passes its own GPU.
  static std::shared_ptr<NcclCommunicator> create(std::shared_ptr<GlooCommunicator> bootstrap, int device,
                                                  NcclOptions options = {});
  ~NcclCommunicator() override;

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string_view backend() const override { return "nccl"; }
  const std::string& name() const override { return bootstrap_->name(); }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const std::shared_ptr<GlooCommunicator>& bootstrap() const { return bootstrap_; }

  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& tensor, int root) override;
  // Host-blocking: returns when every rank's GPU has reached it (or throws after the timeout).
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;

 protected:
  void all_gather_flat(const Tensor& input, Tensor& output) override;
  void reduce_scatter_flat(const Tensor& input, Tensor& output, ReduceOp op) override;
  void check_signatures(const CollectiveSignature& mine) override;

 private:
  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point deadline;
    std::string what;
  };

  NcclCommunicator(std::shared_ptr<GlooCommunicator> bootstrap, int device, NcclOptions options);
  void init();
  void check_device(const Tensor& tensor, std::string_view what) const;
  // Enqueues `call` (one NCCL collective) on the communicator's stream, ordered against the compute stream,
  // and hands its completion to the watchdog. Returns the completion event's copy the caller may wait on.
  template <typename Call>
  void enqueue(const std::string& what, Call&& call, cudaEvent_t* done_out = nullptr);
  // Polls until a non-blocking NCCL call has finished its host-side part; the caller holds call_mutex_.
  void wait_for_nccl(const std::string& what, std::chrono::steady_clock::time_point deadline);
  // Callers holding call_mutex_ use the _locked forms, which abort the communicator at once.
  void throw_if_broken_locked(std::string_view what);
  void mark_broken_locked(const std::string& reason);
  void mark_broken(const std::string& reason);  // any thread: records the reason, aborts when it can
  void watchdog_loop();

  std::shared_ptr<GlooCommunicator> bootstrap_;
  int device_ = 0;
  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::mutex call_mutex_;  // serialises host calls

  mutable std::mutex state_mutex_;  // guards everything below, shared with the watchdog
  std::condition_variable state_changed_;
  std::deque<Pending> pending_;
  std::string broken_;
  bool aborted_ = false;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace retort
#endif  // RETORT_WITH_CUDA
