#include "orchard/tasks/checkpoint_inspect.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/models/registry.h"
#include "orchard/models/tf_weights.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/detect/fine_tune.h"
#include "orchard/tasks/detect/load_pipeline.h"

namespace orchard::tasks {
namespace {

// The model a checkpoint is mapped onto, with its TensorFlow names.
struct MappedModel {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<void> owner;  // keeps a detection task alive
  models::TfNameMap map;
  std::string description;
  // A detection model: what its fine_tune_checkpoint_type restores.
  std::optional<FineTuneSelection> fine_tune;
  std::string fine_tune_type;
  object_detection::protos::TrainEvalPipelineConfig pipeline;
};

MappedModel image_model(const std::string& arch, int64_t num_classes, const tf::CheckpointReader& reader) {
  MappedModel m;
  m.map = models::tf_name_map(arch);
  if (!m.map) {
    std::string mapped;
    for (const auto& name : models::model_names())
      if (models::tf_name_map(name)) mapped += (mapped.empty() ? "" : ", ") + name;
    throw Error("--map " + arch + ": no TensorFlow name map for this model (these have one: " + mapped + ")");
  }
  models::ModelConfig c;
  c.arch = arch;
  c.initialize = false;
  if (num_classes <= 0) {
    // The checkpoint's own class count (TF-Slim's: 1001), from its logits' bias.
    c.num_classes = 1001;
    for (const char* bias : {"fc.bias", "classifier.1.bias"}) {
      try {
        const auto name = m.map(bias);
        if (const auto* v = name ? reader.find(name->name) : nullptr; v && v->shape.size() == 1)
          c.num_classes = v->shape[0];
      } catch (const std::invalid_argument&) {
      }
    }
  } else {
    c.num_classes = num_classes;
  }
  m.module = models::build_model(c);
  m.description = arch + " (" + std::to_string(c.num_classes) + " classes)";
  return m;
}

MappedModel detection_model(const std::string& config_path) {
  PipelineLoadOptions load;
  load.allow_unknown_fields = true;
  const auto pipeline = load_detection_pipeline(config_path, load);
  auto task = std::make_shared<DetectionTask>(pipeline.config);
  const std::string type = fine_tune_checkpoint_type(pipeline.pipeline.train_config());
  const bool load_all = pipeline.pipeline.train_config().load_all_detection_checkpoint_vars();
  MappedModel m;
  m.module = task->module();
  m.owner = task;
  m.map = task->meta_architecture().tf_name_map(type);
  if (!m.map) throw Error(config_path + ": " + task->meta_architecture().name() + " has no TensorFlow name map");
  m.description = task->meta_architecture().describe() + ", fine_tune_checkpoint_type " + type +
                  (type == "detection" && load_all ? " with load_all_detection_checkpoint_vars" : "");
  m.fine_tune = fine_tune_selection(*task, type, load_all);
  m.fine_tune_type = type;
  m.pipeline = pipeline.pipeline;
  return m;
}

const char* status_name(models::TfMatch::Status s) {
  switch (s) {
    case models::TfMatch::kMatched: return "matched";
    case models::TfMatch::kDefaulted: return "default";
    case models::TfMatch::kMissing: return "MISSING";
    case models::TfMatch::kShapeMismatch: return "SHAPE";
    case models::TfMatch::kNoTfName: return "no TF name";
    case models::TfMatch::kSkipped: return "re-init";
  }
  return "";
}

// What `detect train` would do with this checkpoint as fine_tune_checkpoint: the lines before
// the verdict (why variables do not fit, a missing data file) and the verdict,
// "this checkpoint fine-tunes this config: N restored, M re-initialised, K skipped".
struct FineTuneVerdict {
  std::vector<std::string> notes;
  std::string verdict;
  int restored = 0, reinitialised = 0, skipped = 0;
  bool fits = false;
};

FineTuneVerdict fine_tune_verdict(const tf::CheckpointReader& reader, const models::TfMapping& mapping,
                                  const MappedModel& m) {
  FineTuneVerdict v;
  std::vector<models::TfMatch> unfit;
  for (const auto& x : mapping.variables) {
    if (x.status == models::TfMatch::kMatched || x.status == models::TfMatch::kDefaulted) ++v.restored;
    if (x.status == models::TfMatch::kSkipped) ++v.reinitialised;
    if (x.status == models::TfMatch::kMissing || x.status == models::TfMatch::kShapeMismatch) unfit.push_back(x);
  }
  v.skipped = static_cast<int>(unfit.size());
  for (const auto& h : fine_tune_hints(reader, unfit, m.pipeline)) v.notes.push_back("hint: " + h);
  const auto absent = reader.missing_data_files();
  if (!absent.empty())
    v.notes.push_back("warning: its data file " + absent[0] +
                      " is missing: the names and shapes above come from the index; training cannot read the "
                      "values until the file is there");
  const std::string counts = std::to_string(v.restored) + " restored, " + std::to_string(v.reinitialised) +
                             " re-initialised, " + std::to_string(v.skipped) + " skipped";
  if (v.restored == 0) {
    v.verdict =
        "this checkpoint does not fine-tune this config: none of the model's variables is in it with its "
        "shape (" +
        counts + ")";
  } else if (!m.fine_tune->skip_unavailable && v.skipped > 0) {
    v.verdict = "this checkpoint does not fine-tune this config: fine_tune_checkpoint_type " + m.fine_tune_type +
                " needs every variable, and " + std::to_string(v.skipped) + " are absent or of another shape";
  } else {
    v.fits = true;
    v.verdict = "this checkpoint fine-tunes this config: " + counts;
    if (v.skipped > 0)
      v.verdict += " (absent or of another shape: left as initialised; --strict_fine_tune refuses them)";
    if (!absent.empty()) v.verdict += ", once its data file is there";
  }
  return v;
}

// inspect --map: every model variable with its TensorFlow variable, then what is left over.
// With --pipeline_config_path: what fine-tuning would restore, ending with a verdict.
void print_map(const tf::CheckpointReader& reader, const CheckpointInspectOptions& o) {
  const MappedModel m = o.pipeline_config_path.empty() ? image_model(o.map, o.num_classes, reader)
                                                       : detection_model(o.pipeline_config_path);
  const models::TfMapping mapping = models::match_tf_checkpoint(
      reader, *m.module, m.map, m.fine_tune ? m.fine_tune->skip : std::function<bool(const std::string&)>());
  std::optional<FineTuneVerdict> verdict;
  if (m.fine_tune) verdict = fine_tune_verdict(reader, mapping, m);
  if (o.json) {
    nlohmann::json j{{"checkpoint", reader.prefix()}, {"model", m.description}};
    nlohmann::json vars = nlohmann::json::array();
    for (const auto& v : mapping.variables)
      vars.push_back({{"orchard", v.orchard},
                      {"orchard_shape", v.orchard_shape},
                      {"tensorflow", v.tf},
                      {"tensorflow_shape", v.tf_shape},
                      {"status", status_name(v.status)}});
    j["variables"] = vars;
    j["unused"] = mapping.unused;
    for (auto s : {models::TfMatch::kMatched, models::TfMatch::kDefaulted, models::TfMatch::kMissing,
                   models::TfMatch::kShapeMismatch, models::TfMatch::kNoTfName, models::TfMatch::kSkipped})
      j["counts"][status_name(s)] = mapping.count(s);
    if (verdict)
      j["fine_tune"] = {{"restored", verdict->restored}, {"re-initialised", verdict->reinitialised},
                        {"skipped", verdict->skipped},   {"fits", verdict->fits},
                        {"notes", verdict->notes},       {"verdict", verdict->verdict}};
    std::cout << j.dump(1) << "\n";
    return;
  }
  std::cout << reader.prefix() << " -> " << m.description << "\n";
  for (const auto& v : mapping.variables) {
    std::cout << fmt::format("{:<10} {:<48} {:<18} <- {} {}\n", status_name(v.status), v.orchard,
                             tf::shape_string(v.orchard_shape), v.tf.empty() ? "-" : v.tf,
                             v.tf_shape.empty() && v.tf.empty() ? "" : tf::shape_string(v.tf_shape));
  }
  for (const auto& u : mapping.unused) std::cout << "unused     " << u << "\n";
  std::cout << fmt::format(
      "{} matched, {} set to their default (absent from the checkpoint), {} missing, {} with another shape, {} "
      "without a TensorFlow name{}; {} checkpoint variables unused\n",
      mapping.count(models::TfMatch::kMatched), mapping.count(models::TfMatch::kDefaulted),
      mapping.count(models::TfMatch::kMissing), mapping.count(models::TfMatch::kShapeMismatch),
      mapping.count(models::TfMatch::kNoTfName),
      m.fine_tune && !m.fine_tune->why.empty()
          ? fmt::format(", {} re-initialised ({})", mapping.count(models::TfMatch::kSkipped), m.fine_tune->why)
          : "",
      mapping.unused.size());
  if (!verdict) return;
  for (const auto& n : verdict->notes) std::cout << n << "\n";
  std::cout << verdict->verdict << "\n";
}

struct Stats {
  double min = 0, max = 0, mean = 0, std = 0;
  int64_t nonfinite = 0;
};

Stats value_stats(const tf::Tensor& t) {
  Stats s;
  const auto v = t.floats();
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
  for (float x : v) {
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      continue;
    }
    s.min = std::min<double>(s.min, x);
    s.max = std::max<double>(s.max, x);
    sum += x;
    sum2 += double{x} * x;
    ++n;
  }
  if (n == 0) return Stats{0, 0, 0, 0, s.nonfinite};
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sum2 / n - s.mean * s.mean));
  return s;
}

}  // namespace

void inspect_checkpoint(const CheckpointInspectOptions& o) {
  const tf::CheckpointReader reader(o.path);
  // The index lists every variable; a missing data file is said here, not only when --stats
  // or a restore reads it.
  const auto absent = reader.missing_data_files();
  for (const auto& file : absent)
    spdlog::warn(
        "{}: the data file is missing: names and shapes come from {}.index, the values cannot be read "
        "(a partial download or copy?)",
        file, reader.prefix());
  if (!o.map.empty() || !o.pipeline_config_path.empty()) return print_map(reader, o);
  const bool numeric_stats = o.stats || !o.tensor.empty();
  nlohmann::json out;
  out["checkpoint"] = reader.prefix();
  out["format"] = reader.version() == 2 ? "V2 tensor bundle" : "V1 TensorSlice";
  if (!absent.empty()) out["missing_data_files"] = absent;
  nlohmann::json vars = nlohmann::json::array();
  int64_t total = 0;
  for (const auto& v : reader.variables()) {
    if (!o.tensor.empty() && v.name != o.tensor) continue;
    nlohmann::json j{{"name", v.name}, {"dtype", tf::dtype_name(v.dtype)}, {"shape", v.shape}};
    int64_t n = 1;
    for (int64_t d : v.shape) n *= d;
    total += v.dtype == tf::kString ? 0 : n;
    if (numeric_stats) {
      const tf::Tensor t = reader.read(v.name);  // also checks the data's CRC
      if (t.dtype == tf::kString) {
        if (t.strings.size() == 1 && t.strings[0].size() <= 200 && v.name != "_CHECKPOINTABLE_OBJECT_GRAPH")
          j["value"] = t.strings[0];
      } else {
        const Stats s = value_stats(t);
        j["min"] = s.min;
        j["max"] = s.max;
        j["mean"] = s.mean;
        j["std"] = s.std;
        if (s.nonfinite) j["nonfinite"] = s.nonfinite;
        if (!o.tensor.empty()) j["values"] = t.floats();
        else if (n == 1) j["value"] = t.floats()[0];
      }
    }
    vars.push_back(std::move(j));
  }
  if (!o.tensor.empty() && vars.empty()) throw Error(reader.prefix() + ": no variable '" + o.tensor + "'");
  out["variables"] = vars;
  out["num_values"] = total;
  // TF2's object graph is a tensor in the data shard: without the shard (still downloading,
  // or not fetched), the keys are listed without their variable names.
  std::vector<tf::TrackedVariable> tracked;
  try {
    tracked = reader.tracked_variables();
  } catch (const DataError& e) {
    spdlog::warn("{}; the keys are listed without their variable names", e.what());
    out["object_graph_error"] = e.what();
  }
  if (!tracked.empty()) {
    nlohmann::json t = nlohmann::json::object();
    for (const auto& v : tracked) t[v.key] = v.full_name;
    out["object_graph"] = t;
  }
  if (o.json) {
    std::cout << out.dump(1) << "\n";
    return;
  }
  std::cout << out["checkpoint"].get<std::string>() << " (" << out["format"].get<std::string>() << "): " << vars.size()
            << " variables, " << total << " values\n";
  for (const auto& j : vars) {
    std::string line = j["name"].get<std::string>() + " (" + j["dtype"].get<std::string>() + ") " +
                       tf::shape_string(j["shape"].get<std::vector<int64_t>>());
    if (j.contains("value") && j["value"].is_string()) line += "  '" + j["value"].get<std::string>() + "'";
    else if (j.contains("value")) line += fmt::format("  = {:g}", j["value"].get<double>());
    else if (j.contains("mean"))
      line += fmt::format("  min {:.6g} max {:.6g} mean {:.6g} std {:.6g}", j["min"].get<double>(),
                          j["max"].get<double>(), j["mean"].get<double>(), j["std"].get<double>());
    if (j.contains("nonfinite")) line += fmt::format(" ({} not finite)", j["nonfinite"].get<int64_t>());
    std::cout << line << "\n";
    if (j.contains("values")) {
      const auto values = j["values"].get<std::vector<float>>();
      for (size_t i = 0; i < values.size(); ++i) std::cout << (i ? " " : "  ") << fmt::format("{:g}", values[i]);
      std::cout << "\n";
    }
  }
  for (const auto& v : tracked)
    if (!v.full_name.empty() && v.full_name != v.key) std::cout << "  " << v.key << " <- " << v.full_name << "\n";
}

}  // namespace orchard::tasks
