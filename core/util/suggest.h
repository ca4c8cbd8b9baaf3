#pragma once
// "Did you mean ...?" hints for misspelled names (config keys, tensor names, subcommands).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace retort {

// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent transpositions
// each cost 1, so the usual typos ("n_layr", "nlayer", "n_laeyr") all stay close.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or nothing when even the best one is too far to be a plausible typo.
// For dotted names the last component is also compared alone, so "n_layr" still finds "model.n_layer".
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "" when there is no plausible candidate; ready to append to a message.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace retort
