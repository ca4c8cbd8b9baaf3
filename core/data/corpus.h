#pragma once
// A plain-text corpus: which files a spec names, and how their text divides into documents. Documents are
// the unit of the train/validation split and are separated by the tokenizer's end-of-document id.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace retort::data {

// Debian's `fortunes` package: the corpus used when a config names none.
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

// Resolves a corpus spec to the text files it names, as sorted, de-duplicated canonical paths.
//  - a file: that file (an InputError if it is binary);
//  - a folder: every text file below it, recursively; hidden entries (".git") are skipped;
//  - a glob pattern (POSIX glob(3): *, ?, [..]; no "**"): every match, folders expanded as above.
// Binary files (a NUL byte in the first 4 KiB, e.g. fortune's .dat indexes) are skipped, and paths that
// reach the same file (fortune's "x.u8 -> x" symlinks) count once. A spec that names no text file is an
// InputError naming the spec.
std::vector<std::filesystem::path> resolve_corpus(const std::string& spec);

// True when the first 4 KiB of the file hold a NUL byte.
bool is_binary_file(const std::filesystem::path& path);

// Splits one file's text into documents:
//  - fortune format (some line is exactly "%"): each entry between "%" lines is a document;
//  - otherwise paragraphs: one or more blank (whitespace-only) lines end a document.
// A document keeps its lines verbatim, each ending in '\n'; whitespace-only documents are dropped.
std::vector<std::string> split_documents(std::string_view text);

// The documents of every file, in file order; errors name the unreadable file.
std::vector<std::string> read_documents(const std::vector<std::filesystem::path>& files);

}  // namespace retort::data
