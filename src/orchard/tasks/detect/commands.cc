// orchard detect train|eval|export|predict: the TF Object Detection API's model_main.py over a
// pipeline.config, on the shared Trainer. Training interleaves evaluation each time a
// checkpoint is written; --checkpoint_dir switches to eval-only mode (continuous evaluation
// of new checkpoints, as model_lib.continuous_eval).
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/data/image.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/config/label_map.h"
#include "orchard/detect/heads/box_classifier.h"
#include "orchard/detect/metrics/coco_mask.h"
#include "orchard/engine/loop.h"
#include "orchard/tasks/command_support.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/detect/fine_tune.h"
#include "orchard/tasks/detect/load_pipeline.h"
#include "orchard/tasks/registry.h"
#include "orchard/tasks/train_driver.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/optimizers.h"
#include "orchard/train/runtime.h"
#include "orchard/train/schedule.h"

namespace stdfs = std::filesystem;
using nlohmann::json;
namespace pb = object_detection::protos;

namespace orchard::tasks {
namespace {

struct DetectFlags : RuntimeFlags {
  // model_main.py
  std::string pipeline_config_path;
  std::string model_dir;
  int64_t num_train_steps = 0;              // 0: train_config.num_steps
  int64_t sample_1_of_n_eval_examples = 0;  // 0: eval_input_reader.sample_1_of_n_examples (default 1)
  int64_t sample_1_of_n_eval_on_train_examples = 5;
  bool eval_training_data = false;
  engine::CheckpointWatch watch;  // eval-only mode: --checkpoint_dir, --run_once, --max_eval_retries, ...
  // Orchard additions
  bool strict = false;
  bool strict_fine_tune = false;
  bool allow_unknown_fields = false;
  bool clean = false;
  // --save_checkpoints_steps, --save_checkpoints_secs (the Estimator's default), --max_to_keep,
  // --log_steps; each checkpoint is evaluated, as the Estimator's train_and_evaluate does.
  engine::TrainerOptions run = [] {
    engine::TrainerOptions o;
    o.enable_checkpoints = true;
    o.checkpoint_every = 1000;
    o.checkpoint_every_secs = 600;
    o.eval_on_checkpoint = true;
    o.max_to_keep = 5;
    return o;
  }();
  int64_t eval_batch_size = 8;
  bool skip_eval = false;
  int num_preprocess_threads = 0;
  uint64_t seed = 0;
  std::string stats_file;
  std::string data_format = "channels_first";
  bool skip_corrupt_records = false;
  // model_tpu_main / the Model Garden
  std::string mode;                 // train | eval | train_and_eval ("": train_and_eval, as model_main)
  int64_t iterations_per_loop = 0;  // 0: the gcd of --log_steps and --save_checkpoints_steps
  int64_t train_batch_size = 0;     // 0: train_config.batch_size
  std::string hparams_overrides;    // "load_pretrained=false"
  // export_inference_graph.py
  std::string config_override;  // a TrainEvalPipelineConfig text proto merged over the config
};

void add_common_flags(FlagSet* c, DetectFlags& f) {
  c->add_option("--pipeline_config_path", f.pipeline_config_path, "pipeline.config (TF OD API text format)");
  c->add_flag("--strict", f.strict, "pipeline.config fields Orchard does not implement are errors, not warnings");
  c->add_flag("--allow_unknown_fields", f.allow_unknown_fields,
              "pipeline.config fields not in the schema (misspelt, or from a newer OD API) are warnings, not errors");
  c->add_option("--data_format", f.data_format, "channels_first | channels_last")->capture_default_str();
  add_host_flags(c, f);
  c->add_option("--num_preprocess_threads", f.num_preprocess_threads, "Input pipeline threads (0: all cores)");
  c->add_option("--eval_batch_size", f.eval_batch_size, "Images per evaluation batch")->capture_default_str();
  c->add_option("--sample_1_of_n_eval_examples", f.sample_1_of_n_eval_examples,
                "Evaluate one of every n eval examples (0: the config's eval_input_reader.sample_1_of_n_examples)")
      ->capture_default_str();
  c->add_option("--sample_1_of_n_eval_on_train_examples", f.sample_1_of_n_eval_on_train_examples,
                "With --eval_training_data: one of every n training examples")
      ->capture_default_str();
  c->add_option("--stats_file", f.stats_file, "Write the run's stats (or the metrics) as JSON here");
  c->add_option("--num_train_steps", f.num_train_steps, "Steps to train (default: train_config.num_steps)");
}

void add_eval_flags(FlagSet* c, DetectFlags& f) {
  c->add_option("--checkpoint_dir", f.watch.checkpoint_dir,
                "Eval-only mode: evaluate the checkpoints written into this directory");
  c->add_flag("--run_once", f.watch.run_once, "Eval-only: evaluate the latest checkpoint once and exit");
  c->add_option("--max_eval_retries", f.watch.max_eval_retries,
                "Eval-only: retries of a failed evaluation (negative: always retry)")
      ->capture_default_str();
  c->add_flag("--eval_training_data", f.eval_training_data, "Eval-only: evaluate the training data instead");
  c->add_option("--eval_timeout", f.watch.timeout_secs,
                "Eval-only: stop after this many seconds without a new checkpoint")
      ->capture_default_str();
  c->add_option("--eval_poll_secs", f.watch.poll_secs, "Eval-only: seconds between looks for a new checkpoint")
      ->capture_default_str();
}

void add_train_flags(FlagSet* c, DetectFlags& f) {
  c->add_option("--model_dir", f.model_dir, "Checkpoints, events (train/, eval/), the resolved config");
  add_common_flags(c, f);
  add_eval_flags(c, f);
  c->add_flag("--clean", f.clean, "Remove Orchard's files from model_dir first");
  c->add_flag("--strict_fine_tune", f.strict_fine_tune,
              "fine_tune_checkpoint variables absent or of another shape are an error, not skipped with a warning");
  c->add_option("--save_checkpoints_steps", f.run.checkpoint_every, "Checkpoint (and evaluate) every N steps")
      ->capture_default_str();
  c->add_option("--save_checkpoints_secs", f.run.checkpoint_every_secs,
                "Also checkpoint (and evaluate) when this many seconds passed since the last (0: never)")
      ->capture_default_str();
  c->add_option("--max_to_keep", f.run.max_to_keep, "Checkpoints to keep")->capture_default_str();
  c->add_option("--log_steps", f.run.log_steps, "Log every N steps")->capture_default_str();
  c->add_flag("--skip_eval", f.skip_eval, "Train only");
  c->add_option("--mode", f.mode,
                "model_tpu_main's: train (no interleaved evaluation), eval (evaluate model_dir's checkpoints as they "
                "appear, as --checkpoint_dir), train_and_eval (model_main's behaviour, the default)");
  c->add_option("--iterations_per_loop", f.iterations_per_loop,
                "model_tpu_main's: steps per host loop; checkpoints and evaluations happen at loop ends (default: "
                "the gcd of --log_steps and --save_checkpoints_steps)");
  c->add_option("--train_batch_size", f.train_batch_size,
                "model_tpu_main's: the global training batch, overriding train_config.batch_size");
  c->add_option("--hparams_overrides", f.hparams_overrides,
                "model_main's hyperparameters as name=value pairs: load_pretrained=false trains without "
                "train_config.fine_tune_checkpoint");
  c->add_option("--seed", f.seed, "Random seed (data order, augmentation, initialisation)")->capture_default_str();
  add_runtime_flags(c, f);
  c->add_flag("--skip_corrupt_records", f.skip_corrupt_records,
              "Skip records with bad CRCs and the rest of a truncated shard (counted in stats)");
}

// model_main's hparams (model_hparams.create_hparams): only load_pretrained, default true; TF's
// HParams.parse refuses any other name.
bool load_pretrained(const std::string& overrides) {
  bool load = true;
  std::stringstream items(overrides);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (name != "load_pretrained")
      throw Error("--hparams_overrides: unknown hyperparameter '" + name +
                  "' (model_main's hparams have only load_pretrained; other settings go in the pipeline.config)");
    if (value == "true" || value == "True" || value == "1") load = true;
    else if (value == "false" || value == "False" || value == "0") load = false;
    else throw Error("--hparams_overrides: load_pretrained must be true or false, not '" + value + "'");
  }
  return load;
}

using Loaded = DetectionPipeline;

// keep_aspect_ratio_resizer without pad_to_max_dimension: one image per evaluation (and predict)
// batch, each at its own size, as the OD API evaluates such models.
int64_t eval_batch_size(const tasks::DetectionConfig& config, int64_t requested, const char* flag) {
  const auto& keep = config.input.keep_aspect_ratio;
  if (!keep || keep->pad_to_max_dimension || requested <= 1) return requested;
  spdlog::info(
      "keep_aspect_ratio_resizer: images are evaluated one at a time, each at its own size ({} {} "
      "applies to fixed-size inputs)",
      flag, requested);
  return 1;
}

Loaded load(const DetectFlags& f, const std::string& config_path) {
  if (config_path.empty()) throw Error("--pipeline_config_path is required");
  if (f.data_format != "channels_first" && f.data_format != "channels_last")
    throw Error("--data_format must be channels_first or channels_last, not '" + f.data_format + "'");
  PipelineLoadOptions o;
  o.strict = f.strict;
  o.allow_unknown_fields = f.allow_unknown_fields;
  o.config_override = f.config_override;
  o.train_batch_size = f.train_batch_size;
  o.channels_last = f.data_format == "channels_last";
  Loaded l = load_detection_pipeline(config_path, o);
  l.config.input.max_image_pixels = f.max_image_pixels;
  if (l.pipeline.has_graph_rewriter() && l.pipeline.graph_rewriter().has_quantization()) {
    const auto& q = l.pipeline.graph_rewriter().quantization();
    spdlog::info(
        "{}: graph_rewriter: quantization-aware training, weights {} bits, activations {} bits{}, from step {} on "
        "(evaluation quantizes always)",
        config_path, q.weight_bits(), q.activation_bits(), q.symmetric() ? ", symmetric" : "", q.delay());
  }
  read_label_map(&l);
  return l;
}

// fine_tune_checkpoint as the OD API restores it (tasks/detect/fine_tune.h): what the type
// wants, where the checkpoint holds it with the model's shape; the rest is listed with the
// reason and left as initialised. --strict_fine_tune (`strict`) makes the rest an error, as type
// full always does.
void fine_tune(tasks::DetectionTask& task, const std::string& checkpoint, const std::string& type, bool load_all,
               const pb::TrainEvalPipelineConfig& pipeline, bool strict) {
  if (detect::is_placeholder_path(checkpoint) && !file_exists(checkpoint) && !file_exists(checkpoint + ".index"))
    throw Error(detect::placeholder_message("train_config.fine_tune_checkpoint", checkpoint,
                                            "your checkpoint, or remove the line to train from scratch"));
  const auto selection = tasks::fine_tune_selection(task, type, load_all);
  // Under --strict_fine_tune the variables that do not fit are collected, then refused with
  // all of them named (the partly restored model is dropped with the error).
  const auto r =
      train::restore_part(checkpoint, "fine_tune_checkpoint", *task.module(), selection.skip, selection.source_name,
                          task.meta_architecture().tf_name_map(type), selection.skip_unavailable);
  const auto& path = r.path;
  const auto& restored = r.restored;
  const auto& skipped = r.skipped;
  const auto& unavailable = r.unavailable;
  std::vector<std::string> hints;
  if (r.tensorflow && !unavailable.empty())
    hints = tasks::fine_tune_hints(tf::CheckpointReader(path), unavailable, pipeline);
  constexpr size_t kListed = 20;
  // Each variable that does not fit, then the hints, each after `separator`: lines in the log, one
  // line in an error.
  const auto listed = [&](const std::string& separator) {
    std::string s;
    for (size_t i = 0; i < unavailable.size() && i < kListed; ++i)
      s += separator + tasks::describe_unfit(unavailable[i]);
    if (unavailable.size() > kListed)
      s += separator + "... " + std::to_string(unavailable.size() - kListed) +
           " more ('orchard checkpoint inspect CHECKPOINT --pipeline_config_path CONFIG' lists them all)";
    for (const auto& h : hints) s += separator + "hint: " + h;
    return s;
  };
  if (strict && !unavailable.empty())
    throw Error("fine_tune_checkpoint " + path + ": " + std::to_string(unavailable.size()) +
                " variables fine_tune_checkpoint_type " + type +
                " restores are not in it with the model's shape (--strict_fine_tune; without it they are left as "
                "initialised, as the OD API does):" +
                listed(" | "));
  if (restored.empty())
    throw Error("fine_tune_checkpoint " + path + ": none of the model's variables is in it with its shape (" +
                std::to_string(unavailable.size()) + " absent or of another shape; another model's checkpoint?); " +
                "remove fine_tune_checkpoint to train from scratch:" + listed(" | "));
  if (r.tensorflow && !r.unused.empty())
    spdlog::info("fine_tune_checkpoint {}: {} TensorFlow variables not used (e.g. {})", path, r.unused.size(),
                 r.unused[0]);
  spdlog::info("fine-tuning from {} (fine_tune_checkpoint_type {}): {} variables restored, {} skipped{}{}", path, type,
               restored.size(), skipped.size(), skipped.empty() ? "" : " (" + selection.why + ")",
               unavailable.empty() ? ""
                                   : ", " + std::to_string(unavailable.size()) +
                                         " not in the checkpoint with the model's shape, left as initialised (as the "
                                         "OD API's get_variables_available_in_checkpoint; --strict_fine_tune refuses "
                                         "them):");
  if (!unavailable.empty()) spdlog::warn("fine_tune_checkpoint: not restored:{}", listed("\n  "));
  // One table instead of a flood of per-variable lines.
  struct Counts {
    int restored = 0, skipped = 0, unavailable = 0;
  };
  std::map<std::string, Counts> by_module;
  const auto module = [](const std::string& n) { return n.substr(0, n.find('.')); };
  for (const auto& n : restored) ++by_module[module(n)].restored;
  for (const auto& n : skipped) ++by_module[module(n)].skipped;
  for (const auto& v : unavailable) ++by_module[module(v.orchard)].unavailable;
  for (const auto& [name, c] : by_module)
    spdlog::info("  {:<14} restored {:>4}  skipped {:>4}  not in the checkpoint with its shape {:>4}", name, c.restored,
                 c.skipped, c.unavailable);
}

// One of every n eval records: --sample_1_of_n_eval_examples, else the config's
// eval_input_reader.sample_1_of_n_examples.
int64_t eval_sampling(const DetectFlags& f, const pb::InputReader& reader) {
  if (f.sample_1_of_n_eval_examples < 0) throw Error("--sample_1_of_n_eval_examples must not be negative");
  if (f.sample_1_of_n_eval_examples > 0) return f.sample_1_of_n_eval_examples;
  return std::max<int64_t>(1, reader.sample_1_of_n_examples());
}

data::PipelineOptions input_options(const pb::InputReader& reader, const std::string& config_path,
                                    const std::string& field) {
  data::PipelineOptions o;
  std::string pattern;
  for (const auto& file : detect::input_files(reader, config_path, field))
    pattern += (pattern.empty() ? "" : ",") + file;
  o.file_pattern = pattern;
  return o;
}

json config_json(const DetectFlags& f, const tasks::DetectionConfig& c, const MetaArchitecture& model) {
  return {{"task", "detect"},
          {"model", model.name()},
          {"num_classes", c.num_classes},
          {"data_format", f.data_format},
          {"pipeline_config", "pipeline.config"}};
}

// model_lib.continuous_eval: evaluate the latest checkpoint of checkpoint_dir, then every new
// one, until the one of the final training step (or --run_once, or --eval_timeout without a
// new checkpoint). A checkpoint deleted by keep-N before it is read is skipped; a failed
// evaluation is retried --max_eval_retries times (negative: always).
void run_continuous_eval(DetectFlags f) {
  const std::string model_dir = f.model_dir.empty() ? f.watch.checkpoint_dir : f.model_dir;
  std::string config_path = f.pipeline_config_path;
  if (config_path.empty()) config_path = join_path(f.watch.checkpoint_dir, "pipeline.config");
  auto l = load(f, config_path);
  train::configure_threads(f.num_threads);
  check_dir_can_be_written(model_dir);  // eval/ is made with the first summary, not before
  tasks::DetectionTask task(l.config);
  const int64_t total = f.num_train_steps > 0 ? f.num_train_steps : l.pipeline.train_config().num_steps();

  data::PipelineOptions input;
  if (f.eval_training_data) {
    input = input_options(l.pipeline.train_input_reader(), config_path, "train_input_reader");
    input.sample_1_of_n = f.sample_1_of_n_eval_on_train_examples;
  } else {
    if (l.pipeline.eval_input_reader_size() == 0) throw Error(config_path + ": no eval_input_reader");
    input = input_options(l.pipeline.eval_input_reader(0), config_path, "eval_input_reader");
    input.sample_1_of_n = eval_sampling(f, l.pipeline.eval_input_reader(0));
  }
  input.training = false;
  input.num_epochs = 1;
  input.batch_size = eval_batch_size(l.config, f.eval_batch_size, "--eval_batch_size");
  input.num_threads = f.num_preprocess_threads;
  const int64_t num_examples = l.pipeline.eval_config().num_examples();

  spdlog::info("eval-only: watching {} (final step {}), events into {}/eval", f.watch.checkpoint_dir,
               total > 0 ? std::to_string(total) : std::string("none"), model_dir);
  engine::CheckpointWatch watch = f.watch;
  watch.final_step = total;
  const auto [last_step, metrics] =
      evaluate_new_checkpoints(task, watch, model_dir, input, num_examples, /*summaries=*/true);
  if (!f.stats_file.empty()) {
    json j = metrics;
    j["global_step"] = last_step;
    atomic_write_file(f.stats_file, j.dump(2) + "\n");
  }
  if (!metrics.empty()) std::cout << json(metrics).dump() << std::endl;
}

// The inference model (TF's Servo export): weights only, with the config and label map, in
// model_dir/export/<step>/; `orchard detect predict --model_dir` accepts that directory.
void export_model(tasks::DetectionTask& task, const std::string& model_dir, const std::string& out_dir, int64_t step,
                  const Loaded& l) {
  ensure_writable_dir(out_dir);
  train::CheckpointManager manager(out_dir, 1);
  auto meta = task.signature();
  manager.save(step, *task.module(), nullptr, meta);
  atomic_write_file(join_path(out_dir, "pipeline.config"), detect::pipeline_config_to_text(l.pipeline));
  atomic_write_file(join_path(out_dir, "label_map.pbtxt"), detect::label_map_to_text(l.label_map));
  const std::string cfg = join_path(model_dir, "config.json");
  if (file_exists(cfg)) atomic_write_file(join_path(out_dir, "config.json"), read_file(cfg));
  // export_inference_graph.py's TensorFlow files: model.ckpt (the OD API's variable names) and,
  // where the architecture has a graph, frozen_inference_graph.pb and saved_model/.
  try {
    export_tf_checkpoint(*task.module(), task.meta_architecture().tf_name_map("detection"),
                         task.meta_architecture().name(), step, join_path(out_dir, "model.ckpt"));
  } catch (const Error& e) {
    spdlog::info("no model.ckpt: {}", e.what());
  }
  try {
    task.meta_architecture().export_graph("inference_graph", out_dir, {});
  } catch (const Error& e) {
    spdlog::info("no frozen_inference_graph.pb / saved_model: {}", e.what());
  }
  spdlog::info("exported the inference model to {}", out_dir);
}

// `detect train`: the shared recipe (tasks/train_driver.h) with model_main's parts: the
// pipeline.config gives the model, input, optimizer and fine-tuning.
class DetectTrainer : public TrainDriver {
 public:
  explicit DetectTrainer(DetectFlags f) : f_(std::move(f)) {}

 private:
  Setup setup() override {
    if (f_.model_dir.empty()) throw Error("--model_dir is required");
    pretrained_ = load_pretrained(f_.hparams_overrides);
    l_ = load(f_, f_.pipeline_config_path);
    const auto& tc = l_.pipeline.train_config();
    // The OD API keeps a moving average of the weights with use_moving_average (the proto default
    // is true) and evaluates and exports it only with eval_config.use_moving_averages (default
    // false): so does Orchard, keeping it only where something uses it.
    if (tc.optimizer().has_use_moving_average() && tc.optimizer().use_moving_average() &&
        !l_.pipeline.eval_config().use_moving_averages())
      spdlog::info(
          "{}: train_config.optimizer.use_moving_average is true, eval_config.use_moving_averages false: "
          "evaluation and export use the trained weights (as the OD API's), so no average is kept",
          f_.pipeline_config_path);
    batch_size_ = tc.batch_size();
    if (f_.num_train_steps < 0)
      throw Error("--num_train_steps must not be negative, not " + std::to_string(f_.num_train_steps) +
                  " (0 or absent: train_config.num_steps)");
    total_ = f_.num_train_steps > 0 ? f_.num_train_steps : tc.num_steps();
    if (total_ < 1) throw Error("train_config.num_steps is 0 (train forever): give --num_train_steps");
    if (f_.run.log_steps < 1) throw Error("--log_steps must be positive");
    if (f_.run.checkpoint_every < 1) throw Error("--save_checkpoints_steps must be positive");
    return {&f_, f_.model_dir, batch_size_, f_.clean, f_.seed, f_.run, f_.stats_file};
  }

  // The data is checked before a model is built; the inputs are made here.
  void prepare() override {
    const std::string train_files =
        input_options(l_.pipeline.train_input_reader(), f_.pipeline_config_path, "train_input_reader").file_pattern;
    num_examples_ = count_examples(train_files, f_.skip_corrupt_records, "--skip_corrupt_records");
    in_.train = training_input(train_files, batch_size_, f_.seed, f_.num_preprocess_threads, f_.skip_corrupt_records,
                               runtime());
    in_.train.shuffle_buffer = l_.pipeline.train_input_reader().shuffle() ? 2048 : 1;
    // The OD API's input repeats the data set (num_epochs 0: forever) before batching, so a batch
    // may hold it more than once: each epoch of the pipeline reads it as often as one batch needs.
    in_.train.passes_per_epoch = (batch_size_ + num_examples_ - 1) / num_examples_;
    if (in_.train.passes_per_epoch > 1)
      spdlog::warn(
          "train_config.batch_size {} is larger than the {} training examples: the data set is repeated, "
          "each batch holds it {:.1f} times over (as the OD API's repeating input does)",
          batch_size_, num_examples_, static_cast<double>(batch_size_) / static_cast<double>(num_examples_));

    in_.skip_eval = !(l_.pipeline.eval_input_reader_size() > 0 && !f_.skip_eval);
    if (!in_.skip_eval) {
      const auto eval_files =
          input_options(l_.pipeline.eval_input_reader(0), f_.pipeline_config_path, "eval_input_reader");
      in_.eval = eval_input_options(in_.train, eval_files.file_pattern);
      in_.eval.sample_1_of_n = eval_sampling(f_, l_.pipeline.eval_input_reader(0));
      in_.eval.batch_size = eval_batch_size(l_.config, f_.eval_batch_size, "--eval_batch_size");
      check_evaluation_data(eval_files.file_pattern, "--skip_eval", f_.skip_corrupt_records);
    }
    // eval_config.num_examples caps each evaluation (split over the workers).
    const int64_t workers = runtime().dist ? runtime().dist->world_size() : 1;
    in_.eval_limit = (l_.pipeline.eval_config().num_examples() + workers - 1) / workers;
  }

  Task& build_task() override {
    task_ = std::make_unique<DetectionTask>(l_.config);
    return *task_;
  }

  void configure(engine::TrainerOptions& o) override {
    o.steps_per_epoch = std::max<int64_t>(1, num_examples_ * in_.train.passes_per_epoch / batch_size_);
    o.total_steps = total_;
    if (f_.iterations_per_loop < 0) throw Error("--iterations_per_loop must be positive");
    o.steps_per_loop = f_.iterations_per_loop > 0 ? f_.iterations_per_loop
                                                  : engine::steps_per_loop_for({o.log_steps, o.checkpoint_every});
    o.skip_eval = in_.skip_eval;
    const auto& tc = l_.pipeline.train_config();
    o.clip_gradient_norm = tc.gradient_clipping_by_norm();
    // MovingAverageOptimizer(average_decay) without num_updates: a plain exponential average.
    if (tc.optimizer().use_moving_average() && l_.pipeline.eval_config().use_moving_averages())
      o.moving_average_decay = tc.optimizer().moving_average_decay();
  }

  Optimization build_optimizer() override {
    std::vector<torch::Tensor> params;
    for (auto& p : task_->module()->parameters())
      if (p.requires_grad()) params.push_back(p);
    auto [optimizer, lr] = train::make_od_api_optimizer(l_.pipeline.train_config().optimizer(), params);
    return {std::move(optimizer), std::move(lr)};
  }

  TrainInputs build_inputs(const engine::TrainerOptions&) override { return in_; }

  void fine_tune() override {
    const auto& tc = l_.pipeline.train_config();
    if (tc.fine_tune_checkpoint().empty()) return;
    const std::string type = fine_tune_checkpoint_type(tc);
    if (pretrained_)
      tasks::fine_tune(*task_, tc.fine_tune_checkpoint(), type, tc.load_all_detection_checkpoint_vars(), l_.pipeline,
                       f_.strict_fine_tune);
    else
      spdlog::info("--hparams_overrides load_pretrained=false: train_config.fine_tune_checkpoint {} is not restored",
                   tc.fine_tune_checkpoint());
  }

  void write_run_files() override {
    atomic_write_file(join_path(f_.model_dir, "config.json"),
                      config_json(f_, l_.config, task_->meta_architecture()).dump(2) + "\n");
    atomic_write_file(join_path(f_.model_dir, "pipeline.config"), detect::pipeline_config_to_text(l_.pipeline));
    atomic_write_file(join_path(f_.model_dir, "label_map.pbtxt"), detect::label_map_to_text(l_.label_map));
  }

  void log_start(const engine::TrainerOptions&) override {
    const auto& keep = l_.config.input.keep_aspect_ratio;
    const std::string size = !keep
                                 ? fmt::format("{}x{}", l_.config.input.height, l_.config.input.width)
                                 : fmt::format("shorter side {} (longer at most {}{})", keep->min_dimension,
                                               keep->max_dimension, keep->pad_to_max_dimension ? ", padded to it" : "");
    spdlog::info("detect: {} at {}, batch {}, {} training examples, {} steps, {} threads",
                 task_->meta_architecture().describe(), size, batch_size_, num_examples_, total_, runtime().threads);
  }

  void finish(const train::RunStats& stats) override {
    if (runtime().chief) {
      export_model(*task_, f_.model_dir,
                   join_path(join_path(f_.model_dir, "export"), std::to_string(stats.global_step)), stats.global_step,
                   l_);
      // model_main's FinalExporter("Servo"): a serving SavedModel in export/Servo/<timestamp>.
      const auto seconds =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      try {
        task_->meta_architecture().export_graph(
            "saved_model", join_path(join_path(f_.model_dir, "export/Servo"), std::to_string(seconds)), {});
      } catch (const Error& e) {
        spdlog::info("no export/Servo SavedModel: {}", e.what());
      }
    }
    if (stats.eval.count("DetectionBoxes_Precision/mAP"))
      spdlog::info("final: mAP {:.4f}, mAP@.50IOU {:.4f}, AR@100 {:.4f} at step {}",
                   stats.eval.at("DetectionBoxes_Precision/mAP"), stats.eval.at("DetectionBoxes_Precision/mAP@.50IOU"),
                   stats.eval.at("DetectionBoxes_Recall/AR@100"), stats.global_step);
    spdlog::info("model_dir: {}", f_.model_dir);
  }

  DetectFlags f_;
  Loaded l_;
  bool pretrained_ = true;
  int64_t batch_size_ = 0;
  int64_t total_ = 0;
  int64_t num_examples_ = 0;
  TrainInputs in_;
  std::unique_ptr<DetectionTask> task_;
};

void run_train(DetectFlags f) {
  // model_tpu_main's --mode (and the Model Garden's continuous_eval); model_main's own switch to
  // evaluation is --checkpoint_dir.
  if (f.mode == "eval" || f.mode == "continuous_eval") {
    if (f.watch.checkpoint_dir.empty()) {
      if (f.model_dir.empty()) throw Error("--mode " + f.mode + " needs --model_dir (or --checkpoint_dir)");
      f.watch.checkpoint_dir = f.model_dir;
    }
    spdlog::info("--mode {}: evaluating the checkpoints of {} as they appear (no training)", f.mode,
                 f.watch.checkpoint_dir);
    return run_continuous_eval(f);
  }
  if (!f.mode.empty() && f.mode != "train" && f.mode != "train_and_eval")
    throw Error("--mode must be train, eval or train_and_eval, not '" + f.mode + "'");
  if (!f.watch.checkpoint_dir.empty()) {
    if (!f.mode.empty()) throw Error("--checkpoint_dir makes this an evaluation job; it contradicts --mode " + f.mode);
    return run_continuous_eval(f);
  }
  if (f.mode == "train") f.skip_eval = true;  // model_tpu_main: estimator.train only
  DetectTrainer(std::move(f)).run();
}

// A model_dir written by `detect train`, or an export directory inside it.
Loaded load_for_inference(DetectFlags& f) {
  if (!f.pipeline_config_path.empty()) return load(f, f.pipeline_config_path);
  const std::string cfg = join_path(f.model_dir, "pipeline.config");
  if (!file_exists(cfg))
    throw Error(f.model_dir + ": no pipeline.config (is it a model_dir written by `orchard detect train`?)");
  return load(f, cfg);
}

// Blends `rgb` at half strength into the pixels where `mask` [H, W] (bool) is set.
void tint(data::Image* image, const at::Tensor& mask, const std::array<uint8_t, 3>& rgb) {
  const auto m = mask.to(torch::kUInt8).contiguous();
  const uint8_t* on = m.data_ptr<uint8_t>();
  const size_t n = static_cast<size_t>(image->height) * static_cast<size_t>(image->width);
  if (static_cast<size_t>(m.numel()) != n) return;
  for (size_t p = 0; p < n; ++p)
    if (on[p])
      for (size_t c = 0; c < 3; ++c) {
        uint8_t& v = image->pixels[3 * p + c];
        v = static_cast<uint8_t>((v + rgb[c] + 1) / 2);
      }
}

void run_predict(DetectFlags f, const std::vector<std::string>& inputs, const std::string& checkpoint,
                 const std::string& output_dir, double min_score, bool json_out, int64_t batch_size) {
  train::configure_threads(f.num_threads);
  // The saved config names the label map the model was trained with; the copy beside it wins.
  auto l = load_for_inference(f);
  const std::string saved_map = join_path(f.model_dir, "label_map.pbtxt");
  if (file_exists(saved_map)) use_label_map(&l, detect::load_label_map(saved_map));
  tasks::DetectionTask task(l.config);
  engine::restore_for_inference(task, f.model_dir, checkpoint);
  if (!output_dir.empty()) ensure_writable_dir(output_dir);
  const auto& input = task.config().input;
  batch_size = eval_batch_size(task.config(), batch_size, "--batch_size");
  // Each file's resized size: keep_aspect_ratio_resizer's images lie top-left in their buffers.
  std::map<std::string, std::pair<int64_t, int64_t>> resized;
  auto prepare = [&](const std::string& encoded, const std::string& file, float* out) {
    data::DetectionExample ex;
    ex.encoded = encoded;
    std::mt19937_64 rng(0);
    const auto size = data::image_size(encoded, file, f.max_image_pixels);
    resized[file] = data::resized_image_size(size.height, size.width, input);
    data::preprocess_detection(ex, input, false, rng, out, /*targets=*/nullptr, file);
  };
  auto shape_of = [&](const std::vector<std::string>& files) {
    std::vector<std::pair<int64_t, int64_t>> sizes;
    for (const auto& file : files) sizes.push_back(resized.at(file));
    return task.input_shape(sizes);
  };
  auto forward = [&](const at::Tensor& images, const std::vector<std::string>& files) {
    const auto shape = shape_of(files);
    const int64_t h_dim = input.channels_last ? 1 : 2;
    return task.forward(images.narrow(h_dim, 0, shape.height).narrow(h_dim + 1, 0, shape.width).contiguous(), shape);
  };
  // Drawn images are named after their input; an input whose name another already took (the
  // same name in another folder) gets "-2", "-3", ... instead of overwriting its result.
  std::set<std::string> drawn_names;
  auto drawn_path = [&](const std::string& file) {
    std::string stem = base_name(file);
    if (stem.find('.', 1) != std::string::npos) stem = stem.substr(0, stem.rfind('.'));
    std::string name = stem + ".png";
    for (int n = 2; !drawn_names.insert(name).second; ++n) name = stem + "-" + std::to_string(n) + ".png";
    if (name != stem + ".png") spdlog::info("{}: another input is also named {}; drawn as {}", file, stem, name);
    return join_path(output_dir, name);
  };
  // Text: boxes as [xmin,ymin,xmax,ymax] in the original image's pixels, said on each line;
  // JSON: "box" normalised [ymin, xmin, ymax, xmax] (the OD API's detection_boxes), said in
  // "box_format".
  for_each_image_batch(
      task, prepare, inputs, batch_size, [&](const at::Tensor& images, const std::vector<std::string>& files) {
        const auto detections = task.postprocess(*forward(images, files), shape_of(files));
        for (size_t i = 0; i < files.size(); ++i) {
          const std::string encoded = read_file(files[i]);
          const auto size = data::image_size(encoded, files[i], f.max_image_pixels);
          const auto& d = detections[i];
          json boxes = json::array();
          std::vector<data::Box> drawn;
          std::vector<std::string> labels;
          std::vector<at::Tensor> masks;  // Mask R-CNN: [H, W] bool in the image's pixels
          std::string line = files[i] + ": [xmin,ymin,xmax,ymax px]";
          for (int64_t k = 0; k < d.scores.size(0); ++k) {
            const double score = d.scores[k].item<double>();
            if (score < min_score) continue;
            const int64_t cls = d.classes[k].item<int64_t>();
            const auto b = d.boxes[k];
            const data::Box box{b[0].item<float>(), b[1].item<float>(), b[2].item<float>(), b[3].item<float>()};
            const std::string name = l.label_map.display(static_cast<int>(cls));
            json entry = {{"class_id", cls},
                          {"label", name},
                          {"score", score},
                          {"box", {box.ymin, box.xmin, box.ymax, box.xmax}}};
            line += fmt::format(" {} {:.2f} [{:.0f},{:.0f},{:.0f},{:.0f}]", name, score, box.xmin * size.width,
                                box.ymin * size.height, box.xmax * size.width, box.ymax * size.height);
            if (d.masks.defined()) {
              // The box's mask pasted into the image and thresholded at 0.5 (the OD API's
              // detection_masks reframed), as a COCO RLE.
              const auto mask = detect::paste_box_masks(d.masks.narrow(0, k, 1), d.boxes.narrow(0, k, 1), size.height,
                                                        size.width)[0] > 0.5f;
              const auto bytes = mask.to(torch::kUInt8).contiguous();
              const auto rle = detect::rle_encode(bytes.data_ptr<uint8_t>(), size.height, size.width);
              entry["mask"] = {{"size", {size.height, size.width}}, {"counts", detect::rle_to_string(rle)}};
              line += fmt::format(" mask {} px", detect::rle_area(rle));
              masks.push_back(mask);
            }
            boxes.push_back(entry);
            drawn.push_back(box);
            labels.push_back(fmt::format("{} {:.2f}", name, score));
          }
          if (drawn.empty()) line += fmt::format(" (nothing above {})", min_score);
          if (json_out)
            std::cout << json{{"file", files[i]},
                              {"image_size", {size.height, size.width}},
                              {"box_format", "normalized [ymin, xmin, ymax, xmax]"},
                              {"detections", boxes}}
                             .dump()
                      << "\n";
          else std::cout << line << "\n";
          if (!output_dir.empty()) {
            auto image = data::decode_image(encoded, files[i], f.max_image_pixels);
            for (const auto& mask : masks) tint(&image, mask, {255, 32, 32});
            data::draw_boxes(&image, drawn, labels, {255, 32, 32});
            atomic_write_file(drawn_path(files[i]), data::encode_png(image));
          }
        }
      });
  std::cout.flush();
}

}  // namespace

TaskCommands detect_commands() {
  TaskCommands task{"detect",
                    "Object detection: the TF Object Detection API's model_main (SSD, Faster R-CNN, R-FCN, Mask R-CNN)",
                    {}};
  task.verbs.push_back(make_verb<DetectFlags>("train", "Train with evaluation at each checkpoint (model_main.py)",
                                              add_train_flags, run_train));
  task.verbs.push_back(
      {"eval", "Evaluate the checkpoints of a directory (model_main.py --checkpoint_dir)", [](FlagSet* c) {
         auto f = std::make_shared<DetectFlags>();
         c->add_option("--model_dir", f->model_dir, "Where eval/ events go (default: the checkpoint_dir)");
         add_common_flags(c, *f);
         add_eval_flags(c, *f);
         return [f] {
           if (f->watch.checkpoint_dir.empty()) {
             if (f->model_dir.empty()) throw Error("--checkpoint_dir (or --model_dir) is required");
             f->watch.checkpoint_dir = f->model_dir;
           }
           run_continuous_eval(*f);
         };
       }});
  task.verbs.push_back(
      {"export",
       "Write the inference model (export_inference_graph.py): a directory (weights, "
       "pipeline.config, label map), ONNX (opset 10) or a TensorFlow checkpoint",
       [](FlagSet* c) {
         auto f = std::make_shared<DetectFlags>();
         struct DetectExportFlags {
           std::string out_dir, checkpoint, format = "dir", out, input_type = "image_tensor";
           tasks::GraphExportOptions graph;
         };
         auto e = std::make_shared<DetectExportFlags>();
         c->add_option("--model_dir", f->model_dir,
                       "Model directory (default: the directory of --trained_checkpoint_prefix)");
         c->add_option("--checkpoint,--trained_checkpoint_prefix", e->checkpoint,
                       "A checkpoint (default: model_dir's latest): ckpt-N.pt, or the OD API's prefix form "
                       "model_dir/model.ckpt-N for the checkpoint of step N");
         c->add_option("--pipeline_config_path", f->pipeline_config_path,
                       "The pipeline.config (default: the one model_dir was trained with)");
         c->add_option(
             "--config_override", f->config_override,
             "A TrainEvalPipelineConfig text proto merged over the pipeline.config, as export_inference_graph.py");
         c->add_option("--input_type", e->input_type,
                       "export_inference_graph.py's input: image_tensor (decoded images; the only one a non-TensorFlow "
                       "export takes)")
             ->capture_default_str();
         c->add_option("--format", e->format,
                       "dir: the inference model directory (--output_directory); onnx: one ONNX file (--out) with the "
                       "box decoding and score conversion, without NMS; frozen_graph: a TensorFlow GraphDef (--out) "
                       "laid out as export_inference_graph.py's, up to NMS; tf: a TensorFlow checkpoint under the OD "
                       "API's names (--out is its prefix, e.g. out/model.ckpt); tflite: a TFLite file (--out) as "
                       "export_tflite_ssd_graph.py + the TFLite converter write it")
             ->capture_default_str();
         c->add_option("--output_directory,--out_dir", e->out_dir, "Output directory (--format dir)");
         c->add_option("--out", e->out, "Output file (--format onnx), checkpoint prefix (--format tf)");
         c->add_flag("--include_preprocessing", e->graph.include_preprocessing,
                     "--format onnx: the graph takes RGB values in [0, 255] and scales them to [-1, 1] itself");
         // export_tflite_ssd_graph.py's flags.
         c->add_option("--add_postprocessing_op", e->graph.add_postprocessing_op,
                       "--format tflite: end in the TFLite_Detection_PostProcess op (false: the raw box encodings and "
                       "class scores)")
             ->capture_default_str();
         c->add_option("--max_detections", e->graph.max_detections, "--format tflite: detections per image")
             ->capture_default_str();
         c->add_option("--max_classes_per_detection", e->graph.max_classes_per_detection,
                       "--format tflite: classes per detection (fast NMS)")
             ->capture_default_str();
         c->add_option("--detections_per_class", e->graph.detections_per_class,
                       "--format tflite: detections per class (regular NMS)")
             ->capture_default_str();
         c->add_option("--inference_type", e->graph.inference_type,
                       "--format tflite: FLOAT or QUANTIZED_UINT8 (tflite_convert's; default: QUANTIZED_UINT8 for a "
                       "model trained with graph_rewriter quantization, FLOAT otherwise)");
         c->add_option("--use_regular_nms", e->graph.use_regular_nms,
                       "--format tflite: per-class NMS (slower) instead of the fast class-agnostic one")
             ->capture_default_str();
         return [f, e] {
           if (e->format != "dir" && e->format != "onnx" && e->format != "frozen_graph" && e->format != "tf" &&
               e->format != "tflite")
             throw Error("--format must be dir, onnx, frozen_graph, tflite or tf, not '" + e->format + "'");
           if (e->input_type == "encoded_image_string_tensor" || e->input_type == "tf_example")
             throw Error("--input_type " + e->input_type +
                         " is a TensorFlow graph input; Orchard's exports take decoded images (image_tensor), and "
                         "`orchard detect predict` decodes image files itself");
           if (e->input_type != "image_tensor")
             throw Error("--input_type must be image_tensor, encoded_image_string_tensor or tf_example, not '" +
                         e->input_type + "'");
           if (e->format == "dir" && e->out_dir.empty()) throw Error("--format dir needs --output_directory");
           if (e->format != "dir" && e->out.empty()) throw Error("--format " + e->format + " needs --out");
           if (!e->checkpoint.empty()) e->checkpoint = train::resolve_checkpoint_prefix(e->checkpoint);
           if (f->model_dir.empty()) {
             if (e->checkpoint.empty()) throw Error("--model_dir or --trained_checkpoint_prefix is required");
             f->model_dir = parent_path(e->checkpoint);
             if (f->model_dir.empty()) f->model_dir = ".";
           }
           auto l = load_for_inference(*f);
           tasks::DetectionTask task(l.config);
           const int64_t step = engine::restore_for_inference(task, f->model_dir, e->checkpoint);
           if (e->format == "tf")
             return export_tf_checkpoint(*task.module(), task.meta_architecture().tf_name_map("detection"),
                                         task.meta_architecture().name(), step, e->out);
           if (e->format == "dir") {
             const std::string path =
                 e->checkpoint.empty() ? train::CheckpointManager(f->model_dir).latest() : e->checkpoint;
             export_model(task, f->model_dir, e->out_dir, train::checkpoint_step(path), l);
             return;
           }
           task.meta_architecture().export_graph(e->format, e->out, e->graph);
         };
       }});
  task.verbs.push_back(
      {"predict", "Boxes, classes and scores for images (files, globs or directories)", [](FlagSet* c) {
         struct PredictFlags {
           DetectFlags f;
           std::vector<std::string> inputs;
           std::string checkpoint, output_dir;
           double min_score = 0.3;
           bool json_out = false;
           int64_t batch_size = 8;
         };
         auto p = std::make_shared<PredictFlags>();
         c->add_option("--model_dir", p->f.model_dir, "Model directory (or an export directory)")->required();
         c->add_option("inputs", p->inputs, "Images, globs or directories")->required();
         c->add_option("--checkpoint", p->checkpoint, "A checkpoint file (default: the latest)");
         c->add_option("--output_dir", p->output_dir, "Write an annotated PNG per input here");
         c->add_option("--min_score", p->min_score, "Report detections scoring at least this")->capture_default_str();
         c->add_flag("--json", p->json_out, "One JSON line per image");
         c->add_option("--batch_size", p->batch_size, "Images per forward pass")->capture_default_str();
         add_host_flags(c, p->f);
         return [p] {
           run_predict(p->f, p->inputs, p->checkpoint, p->output_dir, p->min_score, p->json_out, p->batch_size);
         };
       }});
  return task;
}

}  // namespace orchard::tasks
