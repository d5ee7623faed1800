// `orchard checkpoint inspect|export`: TensorFlow checkpoints (core/tf_checkpoint.h) listed as
// inspect_checkpoint / tf.train.list_variables do, mapped onto Orchard's models, and written.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/detect/config/config.h"
#include "orchard/models/registry.h"
#include "orchard/models/tf_weights.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/detect/fine_tune.h"

namespace orchard::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  bool stats = false;
  std::string tensor;  // print one variable's values
  std::string map;     // an image model's name
  std::string pipeline_config_path;
  int64_t num_classes = 0;
};

// The model a checkpoint is mapped onto, with its TensorFlow names.
struct MappedModel {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<void> owner;  // keeps a detection task alive
  models::TfNameMap map;
  std::string description;
  // A detection model: what its fine_tune_checkpoint_type restores.
  std::optional<tasks::FineTuneSelection> fine_tune;
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
        if (const auto* v = name ? reader.find(name->name) : nullptr; v && v->shape.size() == 1) c.num_classes = v->shape[0];
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
  const auto pipeline = detect::load_pipeline_config(config_path, /*strict=*/false, nullptr, /*allow_unknown_fields=*/true);
  detect::validate_pipeline_config(pipeline, config_path);
  auto task = std::make_shared<tasks::DetectionTask>(tasks::detection_config(pipeline, false));
  const std::string type = tasks::fine_tune_checkpoint_type(pipeline.train_config());
  const bool load_all = pipeline.train_config().load_all_detection_checkpoint_vars();
  MappedModel m;
  m.module = task->module();
  m.owner = task;
  m.map = task->meta_architecture().tf_name_map(type);
  if (!m.map) throw Error(config_path + ": " + task->meta_architecture().name() + " has no TensorFlow name map");
  m.description = task->meta_architecture().describe() + ", fine_tune_checkpoint_type " + type +
                  (type == "detection" && load_all ? " with load_all_detection_checkpoint_vars" : "");
  m.fine_tune = tasks::fine_tune_selection(*task, type, load_all);
  m.fine_tune_type = type;
  m.pipeline = pipeline;
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
  for (const auto& h : tasks::fine_tune_hints(reader, unfit, m.pipeline)) v.notes.push_back("hint: " + h);
  const auto absent = reader.missing_data_files();
  if (!absent.empty())
    v.notes.push_back("warning: its data file " + absent[0] +
                      " is missing: the names and shapes above come from the index; training cannot read the "
                      "values until the file is there");
  const std::string counts = std::to_string(v.restored) + " restored, " + std::to_string(v.reinitialised) +
                             " re-initialised, " + std::to_string(v.skipped) + " skipped";
  if (v.restored == 0) {
    v.verdict = "this checkpoint does not fine-tune this config: none of the model's variables is in it with its "
                "shape (" + counts + ")";
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
void print_map(const tf::CheckpointReader& reader, const InspectOptions& o) {
  const MappedModel m =
      o.pipeline_config_path.empty() ? image_model(o.map, o.num_classes, reader) : detection_model(o.pipeline_config_path);
  const models::TfMapping mapping =
      models::match_tf_checkpoint(reader, *m.module, m.map,
                                  m.fine_tune ? m.fine_tune->skip : std::function<bool(const std::string&)>());
  std::optional<FineTuneVerdict> verdict;
  if (m.fine_tune) verdict = fine_tune_verdict(reader, mapping, m);
  if (o.json) {
    nlohmann::json j{{"checkpoint", reader.prefix()}, {"model", m.description}};
    nlohmann::json vars = nlohmann::json::array();
    for (const auto& v : mapping.variables)
      vars.push_back({{"orchard", v.orchard}, {"orchard_shape", v.orchard_shape}, {"tensorflow", v.tf},
                      {"tensorflow_shape", v.tf_shape}, {"status", status_name(v.status)}});
    j["variables"] = vars;
    j["unused"] = mapping.unused;
    for (auto s : {models::TfMatch::kMatched, models::TfMatch::kDefaulted, models::TfMatch::kMissing,
                   models::TfMatch::kShapeMismatch, models::TfMatch::kNoTfName, models::TfMatch::kSkipped})
      j["counts"][status_name(s)] = mapping.count(s);
    if (verdict)
      j["fine_tune"] = {{"restored", verdict->restored}, {"re-initialised", verdict->reinitialised},
                        {"skipped", verdict->skipped},   {"fits", verdict->fits},
                        {"notes", verdict->notes},        {"verdict", verdict->verdict}};
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

void run_inspect(const InspectOptions& o) {
  const tf::CheckpointReader reader(o.path);
  // The index lists every variable; a missing data file is said here, not only when --stats
  // or a restore reads it.
  const auto absent = reader.missing_data_files();
  for (const auto& file : absent)
    spdlog::warn("{}: the data file is missing: names and shapes come from {}.index, the values cannot be read "
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
  std::cout << out["checkpoint"].get<std::string>() << " (" << out["format"].get<std::string>() << "): "
            << vars.size() << " variables, " << total << " values\n";
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

struct ExportOptions {
  std::string model_dir, out, checkpoint, format = "tf";
};

// `checkpoint export`: the model_dir's task's own `export --format tf`, run in this process's
// place (the task knows how to rebuild its model from the model_dir).
void run_export(const ExportOptions& o) {
  if (o.format != "tf") throw Error("--format must be tf, not '" + o.format + "' (ONNX: orchard <task> export)");
  const std::string config = join_path(o.model_dir, "config.json");
  if (!file_exists(config)) throw Error(o.model_dir + ": no config.json (not an Orchard model_dir)");
  const std::string task = nlohmann::json::parse(read_file(config)).value("task", "");
  if (task != "classify" && task != "multilabel" && task != "detect")
    throw Error(o.model_dir + ": a " + (task.empty() ? "model_dir without a task" : task + " model") +
                "; TensorFlow export covers classify, multilabel and detect models");
  std::vector<std::string> args{"orchard", task, "export", "--model_dir", o.model_dir, "--format", "tf", "--out", o.out};
  if (!o.checkpoint.empty()) args.insert(args.end(), {"--checkpoint", o.checkpoint});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  throw Error(std::string("cannot run orchard ") + task + " export: " + std::strerror(errno));
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "TensorFlow checkpoints: list, map onto Orchard models, write");
  cmd->require_subcommand(1);
  {
    auto o = std::make_shared<InspectOptions>();
    auto* c = cmd->add_subcommand(
        "inspect", "Variables of a TensorFlow checkpoint (V2 bundle or V1 TensorSlice): names, dtypes, shapes");
    c->add_option("path", o->path,
                  "The checkpoint: a prefix (model.ckpt, model.ckpt-1000), one of its files, or a directory")
        ->required();
    c->add_flag("--json", o->json, "One JSON document instead of text");
    c->add_flag("--stats", o->stats, "Also each variable's min, max, mean and std (reads the data shards)");
    c->add_option("--tensor", o->tensor, "Only this variable, with its values (inspect_checkpoint --tensor_name)");
    c->add_option("--map", o->map,
                  "Also match the variables with this Orchard model's (mobilenet_v2, inception_v3: TF-Slim's names)");
    c->add_option("--pipeline_config_path", o->pipeline_config_path,
                  "Match them with this pipeline.config's detection model (its fine_tune_checkpoint_type chooses "
                  "the names)");
    c->add_option("--num_classes", o->num_classes, "With --map: the classifier's classes (default: the checkpoint's)");
    c->callback([o] {
      if (!o->map.empty() && !o->pipeline_config_path.empty())
        throw Error("--map and --pipeline_config_path: give one");
      run_inspect(*o);
    });
  }
  {
    auto o = std::make_shared<ExportOptions>();
    auto* c = cmd->add_subcommand(
        "export", "A model_dir's model as a TensorFlow V2 checkpoint under TensorFlow's names (= <task> export --format tf)");
    c->add_option("--model_dir", o->model_dir, "An Orchard model_dir (classify, multilabel, detect)")->required();
    c->add_option("--out", o->out, "The checkpoint prefix to write, e.g. out/model.ckpt")->required();
    c->add_option("--checkpoint", o->checkpoint, "An Orchard checkpoint file (default: the latest)");
    c->add_option("--format", o->format, "tf")->capture_default_str();
    c->callback([o] { run_export(*o); });
  }
}

}  // namespace orchard::cli
