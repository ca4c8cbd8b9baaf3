#pragma once
// A text corpus: which files a spec names, and how their text divides into documents. Documents are the unit
// of the train/validation split and are separated by the tokenizer's end-of-document id. Files ending in
// ".jsonl" are JSON lines (one document per line, its text in a string field); every other file is plain text.
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

// The field of a JSON-lines record that holds its text when a config names none.
inline constexpr const char* kDefaultTextField = "text";

// True for a file read as JSON lines: its name ends in ".jsonl".
bool is_jsonl_file(const std::filesystem::path& path);

// Splits JSON-lines text into documents: each non-blank line is one JSON object whose `text_field` member (a
// string) is one document, kept verbatim (whitespace-only texts are dropped, as in split_documents). A line that
// is not valid JSON, not an object, or lacks the field (or holds a non-string there) is an InputError naming
// `source`:line and the field.
std::vector<std::string> split_jsonl_documents(std::string_view text, const std::string& source,
                                               const std::string& text_field = kDefaultTextField);

// The documents of every file, in file order (JSON lines through split_jsonl_documents, the rest through
// split_documents); errors name the unreadable file.
std::vector<std::string> read_documents(const std::vector<std::filesystem::path>& files,
                                        const std::string& text_field = kDefaultTextField);

}  // namespace retort::data
