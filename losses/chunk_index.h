#pragma once
// The host-side index of one call of the cross-tokenizer losses (chunk_distillation.h): the inputs checked, the
// valid chunks (at least one student and one teacher position) renumbered, their rows grouped, each chunk's column
// set S_c (the union of the teacher ids listed at its teacher positions) and the teacher's chunk-averaged
// log-probabilities over it. Every rank builds the same index from the same inputs, so a bad input stops every rank
// at the same point, before any collective. Built in double; the teacher side costs O(teacher rows x |S_c|).
#include <cstdint>
#include <string_view>
#include <vector>

#include "losses/chunk_distillation.h"

namespace retort::losses::chunk_index {

struct ChunkIndex {
  int64_t student_rows = 0, teacher_rows = 0, topk = 0, teacher_vocab = 0;
  int64_t chunks = 0;                    // valid chunks C
  std::vector<int32_t> row_chunk;        // [N_s]: the row's valid chunk or -1
  std::vector<int32_t> chunk_rows;       // [C + 1] offsets into rows
  std::vector<int32_t> rows;             // student rows grouped by valid chunk, increasing within a chunk
  std::vector<int32_t> chunk_slots;      // [C + 1] offsets into slot_ids
  std::vector<int32_t> slot_ids;         // the teacher ids of each S_c, increasing within a chunk
  std::vector<double> teacher_log;       // [G] R_c,v
  std::vector<double> teacher_rest;      // [C] R_c,rest
  std::vector<double> teacher_unlisted;  // [C] R_c of an id listed at none of the chunk's teacher positions
};

// Checks the teacher targets and the chunk assignment against `student_rows` and the teacher vocabulary, and
// builds the index. `op` names the loss in messages.
ChunkIndex build_chunk_index(int64_t student_rows, const ChunkTeacherTargets& teacher, const ChunkAssignment& chunks,
                             int64_t teacher_vocab, std::string_view op);

// The projection on the host, checked: student_vocab rows (the student's global vocabulary), teacher ids inside the
// teacher vocabulary, weights finite and >= 0.
struct HostProjection {
  std::vector<int32_t> row_offsets, teacher_ids;
  std::vector<double> weights;
};
HostProjection host_projection(const VocabProjection& projection, int64_t student_vocab, std::string_view op);

// An i32 / stat-dtype tensor of `values` on `device`, never empty (a trailing 0 is added to an empty list so every
// kernel argument has storage).
Tensor upload_ints(const std::vector<int32_t>& values, Device device);
Tensor upload_reals(const std::vector<double>& values, DType dtype, Device device);

}  // namespace retort::losses::chunk_index
