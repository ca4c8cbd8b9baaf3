// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// One block each: a step's inputs and results are a few words a row, and a single block can order its own reads
// of the step count before the one write that advances it.
#include "parallel/generate/decode_step_io.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/generate/sampling_math.h"

namespace retort::generate::kernels::cuda {
namespace {

namespace rc = ::retort::cuda;
namespace sm = ::retort::generate::sampling;

constexpr int kThreads = 256;

__global__ void stage_step_inputs_kernel(const uint32_t* slots, uint32_t* inputs, int64_t words, int64_t ids_at,
                                         int64_t rows, const uint32_t* steps_run, uint64_t* previous_winners,
                                         int32_t vocab) {
  const uint32_t* slot = slots + static_cast<int64_t>(*steps_run & 1u) * words;
  const bool ids_from_host = slot[words - 1] != 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    uint32_t word = slot[i];
    if (!ids_from_host && i >= ids_at && i < ids_at + rows) {
      const int64_t id = sm::id_of_candidate(previous_winners[i - ids_at]);
      word = static_cast<uint32_t>(id >= 0 && id < vocab ? id : 0);
    }
    inputs[i] = word;
  }
  __syncthreads();  // every id has been read before the winners are cleared
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) previous_winners[r] = 0;
}

__global__ void publish_step_winners_kernel(const uint64_t* winners, uint64_t* slots, int64_t rows,
                                            uint32_t* steps_run) {
  const uint32_t step = *steps_run;
  uint64_t* slot = slots + static_cast<int64_t>(step & 1u) * rows;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) slot[r] = winners[r];
  __syncthreads();  // every thread has read the count before it moves
  if (threadIdx.x == 0) *steps_run = step + 1;
}

}  // namespace

static_assert(sizeof(SamplerRowParams) == 16, "four words a row");

void enqueue_stage_step_inputs(const uint32_t* slots, uint32_t* inputs, int64_t rows, const uint32_t* steps_run,
                               uint64_t* previous_winners, int32_t vocab) {
  stage_step_inputs_kernel<<<1, kThreads, 0, rc::current_stream()>>>(
      slots, inputs, step_input_words(rows), step_input_ids_at(rows), rows, steps_run, previous_winners, vocab);
  RETORT_CUDA_CHECK_LAUNCH();
}

void enqueue_publish_step_winners(const uint64_t* winners, uint64_t* slots, int64_t rows, uint32_t* steps_run) {
  publish_step_winners_kernel<<<1, kThreads, 0, rc::current_stream()>>>(winners, slots, rows, steps_run);
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::generate::kernels::cuda
