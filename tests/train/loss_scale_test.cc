// train/loss_scale: dynamic loss scaling skips steps with non-finite gradients and lowers
// the scale; finite steps unscale the gradients and grow it on schedule.
#include "orchard/train/loss_scale.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "orchard/core/error.h"

namespace orchard::train {
namespace {

torch::Tensor param_with_grad(std::vector<float> grad) {
  auto p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(grad);
  return p;
}

TEST(LossScaler, SkipsNonFiniteStepsAndLowersTheScale) {
  LossScaler s("dynamic", /*growth_interval=*/3);
  EXPECT_EQ(s.scale(), 128);  // the seed's initial dynamic scale
  EXPECT_EQ(s.scale_loss(torch::tensor(0.5f)).item<float>(), 64.f);

  auto p = param_with_grad({256.f, -128.f});
  EXPECT_TRUE(s.unscale({p}));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({2.f, -1.f})));  // divided by 128

  auto bad = param_with_grad({1.f, std::numeric_limits<float>::infinity()});
  auto good = param_with_grad({128.f});
  EXPECT_FALSE(s.unscale({good, bad}));
  EXPECT_EQ(s.scale(), 64);
  EXPECT_EQ(good.grad().item<float>(), 128.f);  // a skipped step leaves the gradients alone
  EXPECT_FALSE(s.unscale({param_with_grad({std::nanf("")})}));
  EXPECT_EQ(s.scale(), 32);

  // Three finite steps in a row double it.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.unscale({param_with_grad({1.f})}));
  EXPECT_EQ(s.scale(), 64);
}

TEST(LossScaler, FixedScaleNeverChanges) {
  LossScaler s("1024", 1);
  EXPECT_FALSE(s.dynamic());
  EXPECT_FALSE(s.unscale({param_with_grad({std::numeric_limits<float>::infinity()})}));
  EXPECT_TRUE(s.unscale({param_with_grad({2048.f})}));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_THROW(LossScaler("-1"), Error);
  EXPECT_THROW(LossScaler("lots"), Error);
}

}  // namespace
}  // namespace orchard::train
