#include "bench/harness/corpus_files.h"

#include <algorithm>
#include <string>

namespace retort::bench {

std::vector<std::filesystem::path> corpus_text_files(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink() || !entry.is_regular_file() || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace retort::bench
