// The seed's build_stats: a JSON summary of a run (loss, accuracies, throughput, and a
// timestamp every log_steps steps).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace orchard::train {

struct RunStats {
  std::map<std::string, double> train;  // "loss", "accuracy" -> loss, training_accuracy_top_1
  std::map<std::string, double> eval;   // "loss", "accuracy", "top_5_accuracy"
  double avg_exp_per_second = 0;
  std::vector<std::pair<int64_t, double>> step_timestamp_log;  // (batch_index, unix seconds)
  double train_finish_time = 0;
  int64_t global_step = 0;
  int64_t skipped_records = 0;
  std::vector<std::string> skipped;  // "file: record N ...: why" of each skipped record
};

// Writes {loss, training_accuracy_top_1, accuracy_top_1, top_5_accuracy, eval_loss,
// avg_exp_per_second, step_timestamp_log: [{batch_index, timestamp}], train_finish_time,
// global_step, skipped_records} atomically. Keys absent from the run are left out.
void write_stats(const std::string& path, const RunStats& stats);
std::string stats_json(const RunStats& stats);

}  // namespace orchard::train
