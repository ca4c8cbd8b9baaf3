#pragma once
// A vocabulary projection saved beside the teacher cache, so a tokenizer pair's projection is built once.
//
// The file: 8 bytes "RTVPROJ\n"; a little-endian u64 header length; the header, JSON (format version, each side's
// tokenizer fingerprint, tokenizer and model vocabulary sizes, the build options, nnz, the payload's size and its
// FNV-1a 64 content hash, the build report); the payload (row_offsets i32 [V_s + 1], teacher_ids i32 [nnz], weights
// f32 [nnz], exact u8 [V_s], canonical u8 [V_s], all little-endian); and a trailer "fnv1a64 " + 16 hex digits hashing
// every byte before it, so a flipped byte anywhere (header included) is found before anything is read.
// Written atomically (a temporary file renamed into place).
#include <filesystem>

#include "distill/xtoken/vocab_projection.h"

namespace retort::distill::xtoken {

// The usual name of the file in a cache folder.
inline constexpr const char* kVocabProjectionFile = "vocab_projection.bin";

void save_projection(const StudentTeacherProjection& projection, const std::filesystem::path& path);

// Reads and verifies the file: a damaged one (checksum, sizes, a CSR that is not one: offsets out of order, ids
// outside the teacher's tokenizer, weights not summing to 1), one of another format version, or one made for
// another identity or other options is an InputError naming the file, what differs, and the fix (delete it to
// rebuild).
StudentTeacherProjection load_projection(const std::filesystem::path& path, const ProjectionIdentity& expected,
                                         const ProjectionOptions& options = {});

// What load_or_build_projection does with a file that fails verification.
enum class InvalidProjectionFile {
  kRefuse,   // the InputError of load_projection
  kRebuild,  // a warning naming the file and the reason, then a rebuild written over it
};

// The projection of the tokenizer pair: read from `path` when a valid file for this identity and options is there,
// else built and saved to `path` (atomically; parent folders are created).
StudentTeacherProjection load_or_build_projection(const data::Tokenizer& student_tokenizer,
                                                  const data::Tokenizer& teacher_tokenizer, int64_t student_model_vocab,
                                                  int64_t teacher_model_vocab, const std::filesystem::path& path,
                                                  const ProjectionOptions& options = {},
                                                  InvalidProjectionFile invalid = InvalidProjectionFile::kRefuse);

}  // namespace retort::distill::xtoken
