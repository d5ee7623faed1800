#include <gtest/gtest.h>

#include <cmath>

#include "orchard/core/error.h"
#include "orchard/train/schedule.h"

namespace orchard::train {
namespace {

TEST(LearningSchedules, ExponentialDecayAsSsdModelCoco) {
  // The sample config: initial 0.004, decay_steps 800720, decay_factor 0.95, staircase.
  ExponentialDecay c;
  c.initial_learning_rate = 0.004;
  c.decay_steps = 800720;
  c.decay_factor = 0.95;
  const auto lr = exponential_decay(c);
  EXPECT_DOUBLE_EQ(lr(0), 0.004);
  EXPECT_DOUBLE_EQ(lr(800719), 0.004);
  EXPECT_DOUBLE_EQ(lr(800720), 0.004 * 0.95);
  c.staircase = false;
  EXPECT_NEAR(exponential_decay(c)(400360), 0.004 * std::sqrt(0.95), 1e-12);
  c.burnin_steps = 100;
  c.burnin_learning_rate = 0.001;
  c.min_learning_rate = 0.0039;
  EXPECT_DOUBLE_EQ(exponential_decay(c)(99), 0.001);
  EXPECT_DOUBLE_EQ(exponential_decay(c)(100), 0.004);
  EXPECT_DOUBLE_EQ(exponential_decay(c)(100 + 10 * 800720), 0.0039);  // floored
}

TEST(LearningSchedules, ManualStepWithAndWithoutWarmup) {
  ManualStep c;
  c.initial_learning_rate = 0.1;
  c.schedule = {{100, 0.5}, {200, 0.05}};
  auto lr = manual_step(c);
  EXPECT_DOUBLE_EQ(lr(0), 0.1);
  EXPECT_DOUBLE_EQ(lr(99), 0.1);
  EXPECT_DOUBLE_EQ(lr(100), 0.5);
  EXPECT_DOUBLE_EQ(lr(250), 0.05);
  c.warmup = true;
  lr = manual_step(c);
  EXPECT_DOUBLE_EQ(lr(0), 0.1);
  EXPECT_DOUBLE_EQ(lr(50), 0.3);
  EXPECT_DOUBLE_EQ(lr(100), 0.5);
  c.schedule = {{100, 0.5}, {100, 0.05}};
  EXPECT_THROW(manual_step(c), Error);
}

TEST(LearningSchedules, CosineDecayWarmupHoldAndEnd) {
  CosineDecay c;
  c.learning_rate_base = 0.04;
  c.total_steps = 1100;
  c.warmup_learning_rate = 0.01;
  c.warmup_steps = 100;
  c.hold_base_rate_steps = 0;
  auto lr = cosine_decay(c);
  EXPECT_DOUBLE_EQ(lr(0), 0.01);
  EXPECT_DOUBLE_EQ(lr(50), 0.025);
  EXPECT_NEAR(lr(100), 0.04, 1e-12);
  EXPECT_NEAR(lr(600), 0.02, 1e-12);  // half way: cos(pi / 2) = 0
  EXPECT_NEAR(lr(1100), 0.0, 1e-12);
  EXPECT_EQ(lr(1101), 0.0);
  c.hold_base_rate_steps = 200;
  lr = cosine_decay(c);
  EXPECT_DOUBLE_EQ(lr(250), 0.04);
  EXPECT_NEAR(lr(700), 0.02, 1e-12);  // half way through the 800 decay steps
  c.warmup_steps = 2000;
  EXPECT_THROW(cosine_decay(c), Error);
}

}  // namespace
}  // namespace orchard::train
