#pragma once
// The first and last kernels of a graphed decode step (GraphedDecodeStep): they move the step's inputs in from, and
// its sampled winners out to, pinned host pages mapped into the device's address space, so that the host can fill
// and launch the next step while the GPU still runs this one.
//
// The pages hold two slots, used by alternate steps; a device-side count of the steps run picks the slot, so one
// captured graph serves both (its kernels' arguments never change between replays). The host counts its launches
// the same way: step s reads and writes slot s % 2.
#include <cstdint>

namespace retort::generate::kernels::cuda {

// The words of one input slot: [rows] SamplerRowParams (4 words each), [rows] ids, [rows] positions, then one word
// that is 1 when the ids were written by the host (the first step) and 0 when each row is to be fed the token the
// previous step drew for it, decoded on the device from that step's packed winners (sampling::pack_candidate).
inline constexpr int64_t step_input_words(int64_t rows) {
  return 6 * rows + 1;
}
inline constexpr int64_t step_input_ids_at(int64_t rows) {
  return 4 * rows;
}

// inputs[0, words) = slot (*steps_run % 2) of `slots` (2 x words words, mapped host pages), the ids taken from
// previous_winners[rows] when the slot says so; then previous_winners = 0, ready for this step's sampler pass
// (enqueue_argmax and enqueue_best_gumbel with best_zeroed). An id outside [0, vocab) (a winner of a row that had
// no candidate: its NaN logits are reported to the host when it reads that step) becomes 0, so the step never
// reads outside the embedding.
void enqueue_stage_step_inputs(const uint32_t* slots, uint32_t* inputs, int64_t rows, const uint32_t* steps_run,
                               uint64_t* previous_winners, int32_t vocab);

// Slot (*steps_run % 2) of `slots` (2 x rows words of 64 bits, mapped host pages) = winners[rows]; then counts the
// step as run (rows 0: only counts it, for a step whose sampler runs on the host).
void enqueue_publish_step_winners(const uint64_t* winners, uint64_t* slots, int64_t rows, uint32_t* steps_run);

}  // namespace retort::generate::kernels::cuda
