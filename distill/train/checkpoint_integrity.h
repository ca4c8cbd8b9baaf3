#pragma once
// Whether a checkpoint folder is still what was saved. Every save records each file's size and content hash in the
// folder's manifest.json; every load checks them, so a flipped bit or a truncated file is an error naming the file,
// never weights. A resume whose newest checkpoint is damaged falls back to the newest intact one (with a warning
// naming both), never silently to a fresh start; what a crash in the middle of a save leaves behind is cleaned.
#include <filesystem>
#include <optional>
#include <string>

namespace retort::distill {

// Writes `dir`/manifest.json: every other file of the folder with its size and content hash.
void write_checkpoint_manifest(const std::filesystem::path& dir);

// "" when `dir` holds every file its manifest lists, each with the recorded size and hash (or when it has no
// manifest: a checkpoint from before manifests, accepted as it is); else what is wrong, naming the file.
std::string checkpoint_damage(const std::filesystem::path& dir);

// An InputError naming the damage unless checkpoint_damage(dir) is "".
void verify_checkpoint(const std::filesystem::path& dir);

// The checkpoint `--resume` continues from: the one `latest` names when it is intact, else the newest intact one
// (a warning names both); an InputError when `latest` names a missing folder or no checkpoint is intact. Nothing
// when the run has no checkpoint.
std::optional<std::filesystem::path> checkpoint_to_resume(const std::filesystem::path& run_dir);

// Removes the temporary folders of saves a crash interrupted; a step folder moved aside by a re-save of the same
// step that never completed is moved back. Call on one rank, before any rank looks for a checkpoint.
void clean_interrupted_saves(const std::filesystem::path& run_dir);

}  // namespace retort::distill
