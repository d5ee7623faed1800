// The OD API's BalancedPositiveNegativeSampler (core/balanced_positive_negative_sampler.py,
// non-static), which picks the minibatches of Faster R-CNN's two stages: the RPN's 256 anchors
// (half positive at most) and the box classifier's 64 proposals (a quarter positive at most).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace orchard::detect {

// Of the entries where `indicator` [N] (bool) is set, floor(positive_fraction * batch_size)
// positives (`labels` [N] set) at most, chosen uniformly at random, then negatives at random up
// to batch_size in all (fewer when the candidates run out). -> bool [N]. Draws from libtorch's
// default CPU generator (torch::manual_seed makes it repeatable).
at::Tensor balanced_sample(const at::Tensor& indicator, const at::Tensor& labels, int64_t batch_size,
                           float positive_fraction);

}  // namespace orchard::detect
