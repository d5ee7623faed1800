#include "orchard/layers/depth.h"

#include <algorithm>

namespace orchard::layers {

int64_t make_divisible(double v, int64_t divisor, int64_t min_value) {
  int64_t out = std::max(min_value, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (out < 0.9 * v) out += divisor;
  return out;
}

int64_t scale_depth(int64_t channels, double multiplier, int64_t min_depth) {
  return std::max(static_cast<int64_t>(static_cast<double>(channels) * multiplier), min_depth);
}

int64_t scale_filters(double filters, double multiplier) {
  const auto rounded = static_cast<int64_t>(static_cast<int64_t>(filters) * multiplier / 8 + 0.5);
  return std::max<int64_t>(rounded * 8, 8);
}

}  // namespace orchard::layers
