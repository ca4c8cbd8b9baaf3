#include "parallel/generate/prompts_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/util/error.h"

namespace retort::generate {

namespace fs = std::filesystem;

std::string unescape_stop_string(const std::string& typed) {
  std::string out;
  for (size_t i = 0; i < typed.size(); ++i) {
    if (typed[i] == '\\' && i + 1 < typed.size()) {
      const char next = typed[i + 1];
      if (next == 'n' || next == 't' || next == '\\') {
        out += next == 'n' ? '\n' : next == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += typed[i];
  }
  return out;
}

std::vector<std::string> read_prompts_file(const fs::path& file) {
  std::ifstream in(file);
  RETORT_INPUT_CHECK(in.good() && !fs::is_directory(file),
                     "cannot read the prompts file '{}': give a readable text file with one prompt per line (or JSON "
                     "lines with a \"prompt\" field)",
                     file.string());
  std::vector<std::string> prompts;
  std::optional<bool> json_lines;  // decided by the first non-blank line
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (!json_lines) json_lines = line[line.find_first_not_of(" \t")] == '{';
    if (!*json_lines) {
      prompts.push_back(line);
      continue;
    }
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(
          fmt::format("line {} of the prompts file '{}' is not valid JSON ({}): the file is read as JSON "
                      "lines because its first line starts with '{{'",
                      line_number, file.string(), e.what()));
    }
    RETORT_INPUT_CHECK(record.is_object() && record.contains("prompt") && record["prompt"].is_string(),
                       "line {} of the prompts file '{}' has no string field \"prompt\": write each line as "
                       "{{\"prompt\": \"...\"}}",
                       line_number, file.string());
    prompts.push_back(record["prompt"].get<std::string>());
  }
  RETORT_INPUT_CHECK(!in.bad(), "reading the prompts file '{}' failed", file.string());
  RETORT_INPUT_CHECK(!prompts.empty(), "the prompts file '{}' holds no prompt", file.string());
  return prompts;
}

}  // namespace retort::generate
