#pragma once
// The cross-tokenizer part of `retort distill run` (distill.xtoken.enabled): before the teacher is trained, the
// student's data is prepared, the teacher's own tokenizer is trained on the same corpus (teacher.data.*: its
// algorithm and size, in a data folder of its own) or taken from the teacher named by distill.teacher, and the
// paired token streams are made (distill/xtoken/paired_stream.h). The teacher then trains on the teacher's tokens of
// the STUDENT's training split, and is scored on the teacher's tokens of the student's validation split: the same
// documents on both sides, so no held-out text of the students was seen by the teacher, and the bits per byte of
// all three models are over the same text.
#include <filesystem>
#include <string>
#include <vector>

#include "core/config/resolved_config.h"
#include "core/data/dataset.h"
#include "distill/xtoken/paired_stream.h"
#include "parallel/launch/distributed_run.h"

namespace retort::distill {

struct XtokenData {
  data::PreparedDataset student;
  std::filesystem::path teacher_tokenizer;  // the teacher's tokenizer file
  std::string teacher_fingerprint;
  int64_t teacher_vocab = 0;
  xtoken::PairedStream stream;
};

// teacher.data.dir, or data.dir + "-teacher" when it is empty.
std::filesystem::path teacher_data_dir(const ResolvedConfig& config);

// Rank 0 prepares the data and makes (or reuses) the paired stream while the others wait, then they read it.
// `teacher_dir`: the teacher named by distill.teacher (its tokenizer is used), or empty for the one distill run
// trains (a tokenizer of teacher.data.*).
XtokenData prepare_xtoken_data(const ResolvedConfig& config, const std::filesystem::path& external_teacher,
                               const DistributedRun& dist);

// The overrides that make the teacher's run train on its tokens of the student's text (data.shards of the paired
// stream, data.tokenizer its tokenizer, data.vocab_size its size, data.tokenizer_type its type).
std::vector<std::string> xtoken_teacher_data_overrides(const XtokenData& data, const ResolvedConfig& config);

}  // namespace retort::distill
