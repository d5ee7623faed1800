// Channel counts under a depth (width) multiplier, as the TF-Slim and OD API networks round them.
#pragma once

#include <cstdint>

namespace orchard::layers {

// v rounded to the nearest multiple of `divisor` (halves up), at least `min_value`, plus one
// more `divisor` if rounding lost over 10% of v: TF-Slim's and torchvision's _make_divisible
// (MobileNetV2/V3, MnasFPN, the FPN's additional layers).
int64_t make_divisible(double v, int64_t divisor, int64_t min_value);

// max(int(channels * multiplier), min_depth): TF-Slim's `depth` closure in MobileNetV1,
// Inception-v2 and Inception-v3 (truncating, no rounding to a divisor).
int64_t scale_depth(int64_t channels, double multiplier, int64_t min_depth);

// max(int(int(filters) * multiplier / 8 + 0.5) * 8, 8): the OD API's MobileDet
// _scale_filters (rounds to a multiple of 8, no 10% rule; unlike make_divisible).
int64_t scale_filters(double filters, double multiplier);

}  // namespace orchard::layers
