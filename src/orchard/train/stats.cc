#include "orchard/train/stats.h"

#include <nlohmann/json.hpp>

#include "orchard/core/files.h"

namespace orchard::train {

std::string stats_json(const RunStats& s) {
  nlohmann::json j;
  auto put = [&](const std::map<std::string, double>& m, const char* key, const char* name) {
    auto it = m.find(key);
    if (it != m.end()) j[name] = it->second;
  };
  put(s.train, "loss", "loss");
  put(s.train, "accuracy", "training_accuracy_top_1");
  put(s.eval, "accuracy", "accuracy_top_1");
  put(s.eval, "top_5_accuracy", "top_5_accuracy");
  put(s.eval, "loss", "eval_loss");
  for (const auto& [k, v] : s.train)
    if (k != "loss" && k != "accuracy") j["train_" + k] = v;
  for (const auto& [k, v] : s.eval)
    if (k != "loss" && k != "accuracy" && k != "top_5_accuracy") j["eval_" + k] = v;
  j["avg_exp_per_second"] = s.avg_exp_per_second;
  nlohmann::json log = nlohmann::json::array();
  for (const auto& [b, t] : s.step_timestamp_log) log.push_back({{"batch_index", b}, {"timestamp", t}});
  j["step_timestamp_log"] = log;
  j["train_finish_time"] = s.train_finish_time;
  j["global_step"] = s.global_step;
  j["skipped_records"] = s.skipped_records;
  if (!s.skipped.empty()) j["skipped"] = s.skipped;
  return j.dump(2);
}

void write_stats(const std::string& path, const RunStats& stats) { atomic_write_file(path, stats_json(stats) + "\n"); }

}  // namespace orchard::train
