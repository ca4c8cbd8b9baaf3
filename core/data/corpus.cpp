#include "core/data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::data {
namespace fs = std::filesystem;
namespace {

bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 1 && name[0] == '.' && name != "..";
}

bool has_glob_characters(const std::string& spec) {
  return spec.find_first_of("*?[") != std::string::npos;
}

void add_text_file(const fs::path& path, std::vector<fs::path>& files) {
  if (!is_binary_file(path)) files.push_back(fs::canonical(path));
}

void add_folder(const fs::path& folder, std::vector<fs::path>& files) {
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::skip_permission_denied, error);
  RETORT_INPUT_CHECK(!error, "cannot list corpus folder '{}': {}", folder.string(), error.message());
  for (const fs::recursive_directory_iterator end; it != end; it.increment(error)) {
    RETORT_INPUT_CHECK(!error, "cannot list corpus folder '{}': {}", folder.string(), error.message());
    if (is_hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    // is_regular_file follows symlinks, so a link to a text file counts; canonical paths dedupe it later.
    if (it->is_regular_file(error)) add_text_file(it->path(), files);
  }
}

std::vector<fs::path> expand_glob(const std::string& pattern) {
  glob_t matches{};
  const int result = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<fs::path> paths;
  if (result == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  RETORT_INPUT_CHECK(result == 0 || result == GLOB_NOMATCH, "cannot expand corpus pattern '{}' (glob error {})",
                     pattern, result);
  return paths;
}

std::string_view without_carriage_return(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

// Lines without their '\n'; a final line without '\n' still counts.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

bool is_binary_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  RETORT_INPUT_CHECK(in.good(), "cannot read corpus file '{}'", path.string());
  std::array<char, 4096> head{};
  in.read(head.data(), head.size());
  const auto begin = head.begin();
  return std::find(begin, begin + in.gcount(), '\0') != begin + in.gcount();
}

std::vector<fs::path> resolve_corpus(const std::string& spec) {
  RETORT_INPUT_CHECK(!spec.empty(), "the corpus is empty: give a text file, a folder or a glob pattern (e.g. '{}')",
                     kDefaultCorpus);
  std::vector<fs::path> files;
  std::error_code error;
  if (fs::exists(spec, error)) {
    if (fs::is_directory(spec)) {
      add_folder(spec, files);
    } else {
      RETORT_INPUT_CHECK(!is_binary_file(spec), "corpus file '{}' is binary (it holds a NUL byte), not text", spec);
      add_text_file(spec, files);
    }
  } else {
    RETORT_INPUT_CHECK(has_glob_characters(spec),
                       "corpus '{}' does not exist: give a text file, a folder or a glob pattern such as "
                       "'texts/*.txt'",
                       spec);
    for (const fs::path& match : expand_glob(spec)) {
      if (fs::is_directory(match)) {
        add_folder(match, files);
      } else if (fs::is_regular_file(match)) {
        add_text_file(match, files);
      }
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  RETORT_INPUT_CHECK(!files.empty(),
                     "corpus '{}' matched no text files (binary files such as fortune's .dat indexes are skipped): "
                     "check the path or pattern",
                     spec);
  return files;
}

std::vector<std::string> split_documents(std::string_view text) {
  const std::vector<std::string_view> lines = split_lines(text);
  const bool fortune_format = std::any_of(lines.begin(), lines.end(),
                                          [](std::string_view line) { return without_carriage_return(line) == "%"; });

  std::vector<std::string> documents;
  std::string current;
  const auto finish_document = [&] {
    if (!is_blank(current)) documents.push_back(std::move(current));
    current.clear();
  };
  for (const std::string_view line : lines) {
    const bool ends_document = fortune_format ? without_carriage_return(line) == "%" : is_blank(line);
    if (ends_document) {
      finish_document();
      continue;
    }
    current.append(line);
    current.push_back('\n');
  }
  finish_document();
  return documents;
}

bool is_jsonl_file(const fs::path& path) {
  return path.extension() == ".jsonl";
}

std::vector<std::string> split_jsonl_documents(std::string_view text, const std::string& source,
                                               const std::string& text_field) {
  std::vector<std::string> documents;
  const std::vector<std::string_view> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    const std::string where = fmt::format("{}:{}", source, i + 1);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(lines[i]);
    } catch (const nlohmann::json::parse_error& error) {
      throw InputError(fmt::format(
          "{} is not valid JSON ({}): a .jsonl corpus holds one JSON object per line, e.g. {{\"{}\": \"...\"}}", where,
          error.what(), text_field));
    }
    RETORT_INPUT_CHECK(record.is_object(),
                       "{} is a JSON {}, not an object: each line of a .jsonl corpus must be an "
                       "object with a \"{}\" field",
                       where, record.type_name(), text_field);
    const auto field = record.find(text_field);
    RETORT_INPUT_CHECK(field != record.end(),
                       "{} has no \"{}\" field: give every line that field, or name the field that holds the text "
                       "with data.text_field",
                       where, text_field);
    RETORT_INPUT_CHECK(field->is_string(), "{}: field \"{}\" is a JSON {}, not a string", where, text_field,
                       field->type_name());
    std::string document = field->get<std::string>();
    if (!is_blank(document)) documents.push_back(std::move(document));
  }
  return documents;
}

std::vector<std::string> read_documents(const std::vector<fs::path>& files, const std::string& text_field) {
  std::vector<std::string> documents;
  for (const fs::path& file : files) {
    std::vector<std::string> parts = is_jsonl_file(file)
                                         ? split_jsonl_documents(read_file(file), file.string(), text_field)
                                         : split_documents(read_file(file));
    documents.insert(documents.end(), std::make_move_iterator(parts.begin()), std::make_move_iterator(parts.end()));
  }
  return documents;
}

}  // namespace retort::data
