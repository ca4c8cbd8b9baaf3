#pragma once
// The prompts of `retort generate`: a --prompts file and the stop strings as typed on a command line.
#include <filesystem>
#include <string>
#include <vector>

namespace retort::generate {

// The prompts of a --prompts file: one per line, or JSON lines each with a string "prompt" when the first non-blank
// line starts with '{'. Blank lines are skipped. An unreadable file, a bad JSON line or no prompt: InputError.
std::vector<std::string> read_prompts_file(const std::filesystem::path& file);

// "\n", "\t" and "\\" in a stop string typed on the command line become a newline, a tab and a backslash.
std::string unescape_stop_string(const std::string& typed);

}  // namespace retort::generate
