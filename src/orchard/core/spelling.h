// Suggestions for misspelt names (flags, config fields): "did you mean ...?".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace orchard {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `name` when it is a plausible misspelling (at most a third of the
// name's letters differ, at least 2 allowed), else "".
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace orchard
