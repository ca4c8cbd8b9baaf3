#pragma once
// `retort distill align`: the chunk statistics and the speed of the cross-tokenizer alignment of a corpus.
#include <CLI/CLI.hpp>

namespace retort::apps {

void add_distill_align_verb(CLI::App& distill);

}  // namespace retort::apps
