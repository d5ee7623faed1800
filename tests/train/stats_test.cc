#include "orchard/train/stats.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/test_util.h"

namespace orchard::train {
namespace {

TEST(Stats, SeedBuildStatsKeys) {
  RunStats s;
  s.train = {{"loss", 1.5}, {"accuracy", 0.25}};
  s.eval = {{"loss", 1.25}, {"accuracy", 0.5}, {"top_5_accuracy", 0.75}};
  s.avg_exp_per_second = 123.5;
  s.step_timestamp_log = {{100, 1000.5}, {200, 1010.25}};
  s.global_step = 200;
  test::TempDir dir;
  write_stats(dir.file("stats.json"), s);
  auto j = nlohmann::json::parse(test::read_bytes(dir.file("stats.json")));
  EXPECT_DOUBLE_EQ(j.at("loss").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j.at("training_accuracy_top_1").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j.at("accuracy_top_1").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j.at("top_5_accuracy").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j.at("eval_loss").get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j.at("avg_exp_per_second").get<double>(), 123.5);
  ASSERT_EQ(j.at("step_timestamp_log").size(), 2u);
  EXPECT_EQ(j["step_timestamp_log"][1].at("batch_index").get<int64_t>(), 200);
  EXPECT_DOUBLE_EQ(j["step_timestamp_log"][1].at("timestamp").get<double>(), 1010.25);
  EXPECT_EQ(j.at("global_step").get<int64_t>(), 200);
  EXPECT_EQ(test::list_dir(dir.str()), (std::vector<std::string>{"stats.json"}));  // no temp file left
}

TEST(Stats, AbsentKeysLeftOut) {
  RunStats s;  // --skip_eval: no eval metrics
  s.train = {{"loss", 2.0}, {"accuracy", 0.1}};
  auto j = nlohmann::json::parse(stats_json(s));
  EXPECT_TRUE(j.contains("loss"));
  EXPECT_FALSE(j.contains("accuracy_top_1"));
  EXPECT_FALSE(j.contains("eval_loss"));
  EXPECT_TRUE(j.at("step_timestamp_log").is_array());
}

}  // namespace
}  // namespace orchard::train
