#include "orchard/layers/init.h"

#include <cmath>

namespace orchard::layers {

void truncated_normal_(at::Tensor& w, double stddev) {
  // Sampled by inverting the normal CDF on the kept range.
  const double lo = 0.5 * std::erfc(2.0 / std::sqrt(2.0));  // P(z < -2)
  w.uniform_(2 * lo - 1, 1 - 2 * lo).erfinv_().mul_(stddev * std::sqrt(2.0)).clamp_(-2 * stddev, 2 * stddev);
}

}  // namespace orchard::layers
