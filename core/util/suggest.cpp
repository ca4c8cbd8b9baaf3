#include "core/util/suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace retort {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rolling rows suffice: a transposition looks back two rows.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

namespace {

std::string_view last_component(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// Beyond about a third of the word, a "suggestion" is a different word rather than a typo.
size_t tolerance(std::string_view word) {
  return std::max<size_t>(1, (word.size() + 1) / 3);
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  size_t best = std::numeric_limits<size_t>::max();
  const std::string* best_candidate = nullptr;
  for (const std::string& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance > tolerance(word)) distance = std::numeric_limits<size_t>::max();
    const std::string_view leaf = last_component(word);
    const size_t leaf_distance = edit_distance(leaf, last_component(candidate));
    // A leaf-only match counts a little worse than a full match, so a near-exact full key still wins.
    if (leaf_distance <= tolerance(leaf)) distance = std::min(distance, leaf_distance + 1);
    if (distance < best) {
      best = distance;
      best_candidate = &candidate;
    }
  }
  if (best_candidate == nullptr) return std::nullopt;
  return *best_candidate;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto match = closest_match(word, candidates);
  return match ? fmt::format(" (did you mean '{}'?)", *match) : std::string();
}

}  // namespace retort
