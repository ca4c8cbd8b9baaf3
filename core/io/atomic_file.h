#pragma once
// Whole-file writes that never leave a half-written target: the data goes to a temporary file in the same
// directory, is fsync'ed, renamed over the target, and the directory is fsync'ed so the rename survives a
// crash. A reader therefore sees either the old content or the new, never a mix.
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace retort {

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
void write_text_atomic(const std::filesystem::path& path, std::string_view text);

// Streaming form for large files (checkpoints): `produce` writes into the stream. If it throws, or any
// write fails, the temporary file is removed, the target is untouched, and the error propagates.
void write_file_atomic(const std::filesystem::path& path, const std::function<void(std::ostream&)>& produce);

// The whole file; errors name the path and say why (missing, a directory, permission, I/O error).
std::string read_file(const std::filesystem::path& path);

}  // namespace retort
