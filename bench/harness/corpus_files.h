#pragma once
// The files a text benchmark reads from a corpus folder (Debian's fortunes by default): its plain files, in name
// order, without the .dat index files, the .u8 variants and the links (which repeat other files), as the tokenizer
// parity goldens read them too.
#include <filesystem>
#include <vector>

namespace retort::bench {

std::vector<std::filesystem::path> corpus_text_files(const std::filesystem::path& folder);

}  // namespace retort::bench
