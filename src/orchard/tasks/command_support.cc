#include "orchard/tasks/command_support.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/core/tfrecord.h"
#include "orchard/engine/interrupted.h"
#include "orchard/engine/task.h"
#include "orchard/export/onnx_export.h"
#include "orchard/export/tf_graph_export.h"
#include "orchard/export/tflite_export.h"
#include "orchard/models/image_model.h"
#include "orchard/models/registry.h"
#include "orchard/models/tf_weights.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/runtime.h"

namespace stdfs = std::filesystem;

namespace orchard::tasks {

TrainRuntime start_training(const RuntimeFlags& f, int64_t global_batch_size, const std::string& model_dir,
                            bool clean) {
  TrainRuntime rt;
  if (f.max_image_pixels < 1) throw Error("--max_image_pixels must be positive");
  rt.cuda = torch::cuda::is_available() && f.num_gpus != 0;
  check_distribution(f.distribution_strategy, f.num_gpus, rt.cuda);
  train::check_dtype(f.dtype, rt.cuda);
  rt.dist = join_cluster(f.distribution_strategy, global_batch_size, f.collective_timeout, rt.cuda);
  rt.chief = !rt.dist || rt.dist->is_chief();
  if (rt.dist && f.sync_bn) rt.dist->enable_sync_batch_norm();
  const auto threads = train::configure_threads(f.num_threads);
  rt.threads = threads.count;
  rt.threads_adaptive = !threads.user_set;
  if (clean && rt.chief) clean_model_dir(model_dir);
  if (rt.dist) rt.dist->barrier();  // nobody restores from a model_dir being cleaned
  const bool existed = !is_local_path(model_dir) || dir_exists(model_dir);
  ensure_writable_dir(model_dir);
  if (!existed) {
    struct RemoveIfEmpty {
      explicit RemoveIfEmpty(std::string d) : dir(std::move(d)) {}
      RemoveIfEmpty(const RemoveIfEmpty&) = delete;
      std::string dir;
      ~RemoveIfEmpty() {
        std::error_code ec;
        if (stdfs::is_empty(dir, ec) && !ec) stdfs::remove(dir, ec);
      }
    };
    rt.created_model_dir = std::make_shared<const RemoveIfEmpty>(model_dir);
  }
  return rt;
}

engine::TrainerOptions trainer_options(engine::TrainerOptions o, const RuntimeFlags& f, const TrainRuntime& rt,
                                       const std::string& model_dir, int64_t global_batch_size) {
  o.model_dir = model_dir;
  o.global_batch_size = global_batch_size;
  o.dtype = f.dtype;
  o.device = train_device(rt.cuda, rt.dist.get());
  o.distributed = rt.dist;
  o.adaptive_threads = rt.threads_adaptive && !rt.cuda ? rt.threads : 0;
  return o;
}

data::PipelineOptions training_input(const std::string& file_pattern, int64_t global_batch_size, uint64_t seed,
                                     int num_threads, bool skip_corrupt_records, const TrainRuntime& rt) {
  data::PipelineOptions o;
  o.file_pattern = file_pattern;
  o.training = true;
  o.batch_size = global_batch_size;
  o.seed = seed;
  o.num_threads = num_threads;
  o.reader.skip_corrupt_records = skip_corrupt_records;
  o.pin_memory = rt.cuda;
  shard_input(o, rt.dist.get());
  return o;
}

void clean_model_dir(const std::string& dir) {
  if (!dir_exists(dir)) return;
  int removed = 0;
  for (const std::string& name : list_dir_names(dir)) {
    const bool ours = train::checkpoint_step(name) >= 0 || name == "checkpoint" || name == "config.json" ||
                      name == "labels.txt" || name == "train" || name == "eval" || name.rfind("ckpt-", 0) == 0;
    if (ours) removed += remove_tree(join_path(dir, name));
  }
  spdlog::info("--clean: removed {} files from {}", removed, dir);
}

void check_distribution(const std::string& strategy, int num_gpus, bool cuda) {
  std::string ds = strategy;
  std::transform(ds.begin(), ds.end(), ds.begin(), ::tolower);
  if (ds == "parameter_server" || ds == "tpu")
    throw Error("--distribution_strategy " + ds +
                " is not supported: use mirrored (one process) or orchard launch with multi_worker_mirrored");
  if (ds != "off" && ds != "one_device" && ds != "mirrored" && ds != "multi_worker_mirrored")
    throw Error("--distribution_strategy must be off, one_device, mirrored or multi_worker_mirrored, not '" + strategy +
                "'");
  if (num_gpus > 0 && !cuda)
    throw Error("--num_gpus " + std::to_string(num_gpus) + " but no CUDA device is available; use --num_gpus 0");
  if (num_gpus > 1)
    throw Error("--num_gpus " + std::to_string(num_gpus) +
                ": one process drives one device; start one process per GPU with orchard launch");
}

std::shared_ptr<train::Distributed> join_cluster(const std::string& strategy, int64_t global_batch_size,
                                                 int timeout_seconds, bool cuda) {
  const train::ClusterSpec spec = train::cluster_from_environment();
  if (spec.world_size <= 1) return nullptr;
  std::string ds = strategy;
  std::transform(ds.begin(), ds.end(), ds.begin(), ::tolower);
  if (ds == "off" || ds == "one_device")
    throw Error("--distribution_strategy " + strategy + " trains in one process, but this is one of " +
                std::to_string(spec.world_size) + " (" + spec.source + "); use mirrored or multi_worker_mirrored");
  if (global_batch_size % spec.world_size != 0)
    throw Error("--batch_size " + std::to_string(global_batch_size) + " is the global batch and must divide by the " +
                std::to_string(spec.world_size) + " replicas");
  if (timeout_seconds < 1) throw Error("--collective_timeout must be at least 1 second");
  if (spec.rank != 0) spdlog::set_level(spdlog::level::warn);
  return std::make_shared<train::Distributed>(spec, std::chrono::seconds(timeout_seconds), cuda);
}

std::string train_device(bool cuda, const train::Distributed* distributed) {
  if (!cuda) return "cpu";
  return distributed ? distributed->device() : "cuda";
}

void shard_input(data::PipelineOptions& options, const train::Distributed* distributed) {
  if (!distributed) return;
  options.batch_size /= distributed->world_size();
  options.worker_index = distributed->rank();
  options.num_workers = distributed->world_size();
}

data::PipelineOptions eval_input_options(const data::PipelineOptions& train_input, const std::string& file_pattern) {
  data::PipelineOptions o = train_input;
  o.training = false;
  o.num_epochs = 1;
  o.cache = false;
  o.passes_per_epoch = 1;
  o.file_pattern = file_pattern;
  return o;
}

std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text) {
  if (text.empty()) return {-1, -1};
  auto v = train::parse_double_list(text, "--profile_steps");
  if (v.size() != 2 || v[0] < 0 || v[1] < v[0]) throw Error("--profile_steps must be 'first,last', e.g. 2,4");
  return {static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1])};
}

int64_t count_examples(const std::string& pattern, bool skip_corrupt_records, const std::string& skip_flag) {
  int64_t n = 0;
  for (const auto& file : expand_file_pattern(pattern)) {
    try {
      n += count_records_fast(file);
    } catch (const DataError& e) {
      if (!skip_corrupt_records)
        throw DataError(std::string(e.what()) + " (" + skip_flag +
                        " skips corrupt records and the rest of a damaged shard)");
      const int64_t before = count_records_fast(file, /*stop_at_damage=*/true);
      spdlog::warn("{} ({}: counting the {} records before it)", e.what(), skip_flag, before);
      n += before;
    }
  }
  if (n == 0) throw Error(pattern + ": the shards hold no records");
  return n;
}

void check_evaluation_data(const std::string& pattern, const std::string& skip_flag, bool skip_corrupt_records) {
  try {
    count_examples(pattern, skip_corrupt_records);
  } catch (const Error& e) {
    throw Error(std::string("evaluation data: ") + e.what() + " (checked before training; " + skip_flag +
                " trains without evaluating)");
  }
}

engine::BatchSource pipeline_source(data::PipelineOptions options, const tasks::Task& task, bool training,
                                    std::vector<std::shared_ptr<data::Pipeline>>* keep) {
  auto pipeline = std::make_shared<data::Pipeline>(std::move(options), task.sample_spec(), task.parser(training));
  if (keep) keep->push_back(pipeline);
  return [pipeline](data::Batch* b) { return pipeline->next(b); };
}

engine::BatchSource limit_examples(engine::BatchSource source, int64_t limit) {
  if (limit <= 0) return source;
  auto seen = std::make_shared<int64_t>(0);
  return [source = std::move(source), limit, seen](data::Batch* b) {
    if (*seen >= limit || !source(b)) return false;
    if (*seen + b->size > limit) {  // the last batch is cut to the limit
      const int64_t keep = limit - *seen;
      b->truncate(keep);
    }
    *seen += b->size;
    return true;
  };
}

void log_run_summary(const train::RunStats& stats, double wall_secs, const std::string& model_dir,
                     const std::string& stats_file) {
  std::string metrics;
  for (const auto& [name, value] : stats.eval)
    metrics += fmt::format("{}{} {:.4g}", metrics.empty() ? "" : ", ", name, value);
  if (metrics.empty())
    for (const auto& [name, value] : stats.train)
      metrics += fmt::format("{}train {} {:.4g}", metrics.empty() ? "" : ", ", name, value);
  spdlog::info("finished: step {} in {:.1f}s wall, {:.1f} images/s; final {}", stats.global_step, wall_secs,
               stats.avg_exp_per_second, metrics.empty() ? "metrics: none" : metrics);
  std::vector<std::string> written;
  const std::string latest = train::CheckpointManager(model_dir).latest();
  if (!latest.empty()) written.push_back("weights " + base_name(latest));
  for (const char* events : {"train", "eval"})
    if (dir_exists(join_path(model_dir, events))) written.push_back(std::string(events) + "/ events");
  if (!stats_file.empty()) written.push_back("stats " + stats_file);
  std::string list;
  for (const auto& w : written) list += (list.empty() ? "" : ", ") + w;
  spdlog::info("written to {}: {}", model_dir, list.empty() ? "config only, no weights" : list);
}

void finish_run(train::RunStats& stats, std::vector<std::shared_ptr<data::Pipeline>>& pipelines,
                const std::string& stats_file) {
  // Each bad record once, however many epochs, evaluations or restarts met it.
  std::set<std::string> skipped;
  for (const auto& p : pipelines)
    for (auto& s : p->skipped()) skipped.insert(std::move(s));
  pipelines.clear();
  stats.skipped_records = static_cast<int64_t>(skipped.size());
  stats.skipped.assign(skipped.begin(), skipped.end());
  if (stats.skipped_records > 0)
    spdlog::warn("skipped {} corrupt record{} (--skip_corrupt_records; each was logged as it was met)",
                 stats.skipped_records, stats.skipped_records == 1 ? "" : "s");
  if (!stats_file.empty()) {
    train::write_stats(stats_file, stats);
    spdlog::info("stats written to {}", stats_file);
  }
}

train::RunStats train_on_pipelines(engine::Trainer& trainer, const tasks::Task& task,
                                   const data::PipelineOptions& train_input, const data::PipelineOptions& eval_input,
                                   bool skip_eval, const std::string& stats_file,
                                   const engine::TrainInputFactory& synthetic, int64_t eval_limit) {
  std::vector<std::shared_ptr<data::Pipeline>> pipelines;
  engine::TrainInputFactory make_train = [&](int64_t epoch, int64_t batch) {
    if (synthetic) return synthetic(epoch, batch);
    auto o = train_input;
    o.start_epoch = epoch;
    o.start_batch = batch;
    return pipeline_source(o, task, true, &pipelines);
  };
  engine::EvalInputFactory make_eval = [&] {
    return limit_examples(pipeline_source(eval_input, task, false, &pipelines), eval_limit);
  };
  train::RunStats stats;
  const auto started = std::chrono::steady_clock::now();
  try {
    stats = trainer.train_and_evaluate(make_train, skip_eval ? engine::EvalInputFactory{} : make_eval);
  } catch (const Error&) {
    throw;
  } catch (const engine::Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    if (train_input.num_workers <= 1) throw;
    // Gloo reports a peer that exited as a closed connection and one that hangs as a timeout
    // (gloo::IoException, or c10::Error when it comes through a Work).
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10 ? c10->what_without_backtrace() : e.what();
    throw Error("worker " + std::to_string(train_input.worker_index) + " of " +
                std::to_string(train_input.num_workers) +
                ": a collective operation failed (another worker exited, or did not answer within "
                "--collective_timeout): " +
                what.substr(0, 300));
  }
  if (train_input.worker_index == 0) {
    finish_run(stats, pipelines, stats_file);
    log_run_summary(stats, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                    trainer.options().model_dir, stats_file);
  }
  return stats;
}

std::map<std::string, double> evaluate_once(tasks::Task& task, const std::string& model_dir,
                                            const data::PipelineOptions& input, int64_t step) {
  engine::EvaluatorOptions o;
  o.model_dir = model_dir;
  o.global_batch_size = input.batch_size;
  engine::Evaluator evaluator(o, task);
  return evaluator.evaluate([&] { return pipeline_source(input, task, false); }, step, false);
}

engine::CheckpointsEvaluated evaluate_new_checkpoints(tasks::Task& task, const engine::CheckpointWatch& watch,
                                                      const std::string& model_dir, const data::PipelineOptions& input,
                                                      int64_t limit, bool summaries) {
  engine::EvaluatorOptions o;
  o.model_dir = model_dir;
  o.global_batch_size = input.batch_size;
  o.enable_tensorboard = summaries;
  engine::Evaluator evaluator(o, task);
  return engine::evaluate_checkpoints(watch, evaluator, task,
                                      [&] { return limit_examples(pipeline_source(input, task, false), limit); });
}

void add_host_flags(FlagSet* c, RuntimeFlags& f) {
  c->add_option("--num_threads", f.num_threads, "Intra-op threads (0: all cores)");
  c->add_option("--max_image_pixels", f.max_image_pixels,
                "Images with more pixels are data errors, found from the header before decoding "
                "(skipped with --skip_corrupt_records where the command has it)")
      ->capture_default_str();
}

void add_runtime_flags(FlagSet* c, RuntimeFlags& f) {
  c->add_option("--dtype", f.dtype, "fp32 | bf16 | fp16")->capture_default_str();
  c->add_option("--distribution_strategy,--ds", f.distribution_strategy,
                "off | one_device | mirrored | multi_worker_mirrored")
      ->capture_default_str();
  c->add_option("--num_gpus", f.num_gpus, "GPUs (0: CPU, -1: all)");
  c->add_option("--collective_timeout", f.collective_timeout,
                "Seconds a worker waits for the others (rendezvous, all-reduce) before failing")
      ->capture_default_str();
  c->add_flag("--sync_bn", f.sync_bn, "Batch norm statistics over the global batch (default: per replica)");
}

nlohmann::json read_model_config(const std::string& model_dir, const std::string& task) {
  const std::string path = join_path(model_dir, "config.json");
  if (!file_exists(path)) throw Error(path + ": not found (is " + model_dir + " an Orchard " + task + " model_dir?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
  if (j.value("task", "") != task) throw Error(path + ": not a " + task + " model_dir");
  return j;
}

void predict_images(tasks::Task& task, const data::PreprocessOptions& preprocess,
                    const std::vector<std::string>& inputs, int64_t batch_size,
                    const std::function<void(const std::vector<std::string>& files, const at::Tensor& outputs)>& emit) {
  predict_images(
      task,
      [&](const std::string& encoded, const std::string& file, float* out) {
        data::preprocess_eval(encoded, preprocess, out, file);
      },
      inputs, batch_size, emit);
}

void predict_images(tasks::Task& task, const PrepareImage& prepare, const std::vector<std::string>& inputs,
                    int64_t batch_size,
                    const std::function<void(const std::vector<std::string>& files, const at::Tensor& outputs)>& emit) {
  for_each_image_batch(task, prepare, inputs, batch_size,
                       [&](const at::Tensor& images, const std::vector<std::string>& files) {
                         emit(files, task.inference(images).to(torch::kFloat).cpu());
                       });
}

void for_each_image_batch(
    tasks::Task& task, const PrepareImage& prepare, const std::vector<std::string>& inputs, int64_t batch_size,
    const std::function<void(const at::Tensor& images, const std::vector<std::string>& files)>& run) {
  if (batch_size < 1) throw Error("--batch_size must be positive");
  std::vector<std::string> files;
  for (const auto& in : inputs)
    for (auto& file : expand_file_pattern(in, /*images_only=*/true)) files.push_back(std::move(file));
  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto spec = task.sample_spec();
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  // A file that cannot be read or decoded gets an error line; every other file still gets its
  // result, and the command fails at the end.
  int64_t failed = 0;
  for (size_t begin = 0; begin < files.size(); begin += static_cast<size_t>(batch_size)) {
    const auto start = Clock::now();
    const size_t end = std::min(files.size(), begin + static_cast<size_t>(batch_size));
    std::vector<int64_t> shape = {static_cast<int64_t>(end - begin)};
    shape.insert(shape.end(), spec.image_shape.begin(), spec.image_shape.end());
    auto batch = torch::empty(shape);
    const int64_t numel = batch[0].numel();
    std::vector<std::string> good;
    for (size_t i = begin; i < end; ++i) {
      try {
        prepare(read_file(files[i]), files[i], batch.data_ptr<float>() + static_cast<int64_t>(good.size()) * numel);
        good.push_back(files[i]);
      } catch (const Error& e) {
        spdlog::error("{}", e.what());
        ++failed;
      }
    }
    if (good.empty()) continue;
    const auto prepared = Clock::now();
    const auto images = batch.narrow(0, 0, static_cast<int64_t>(good.size()));
    run(images, good);
    // (-v) What bench/predict.sh reads: the whole batch, from reading its files to printing.
    spdlog::debug("predict batch: {} images in {:.2f} ms (inputs {:.2f} ms)", good.size(), ms(start, Clock::now()),
                  ms(start, prepared));
  }
  if (failed > 0)
    throw Error(std::to_string(failed) + " of " + std::to_string(files.size()) +
                " images could not be read or decoded (each named above); the results of the others are complete");
}

void add_export_flags(FlagSet* c, ExportFlags& f) {
  c->add_option("--model_dir", f.model_dir, "Model directory")->required();
  c->add_option("--checkpoint", f.checkpoint, "A checkpoint file (default: the latest)");
  c->add_option("--format", f.format,
                "onnx | frozen_graph (a TensorFlow GraphDef) | saved_model (a TensorFlow SavedModel folder) | tfhub "
                "(TF Hub's classification/ and feature_vector/ SavedModels, RGB in [0, 1]) | tflite (TensorFlow Lite, "
                "batch 1) | tf (a TensorFlow checkpoint under TF-Slim's names)")
      ->capture_default_str();
  c->add_option("--out", f.out,
                "Output file (--format saved_model, tfhub: the folder; --format tf: the checkpoint prefix, e.g. "
                "out/model.ckpt)")
      ->required();
  c->add_flag("--feature_vector", f.feature_vector,
              "Output the pooled features instead of the logits (the TF-Hub feature-vector export)");
  c->add_flag("--include_preprocessing", f.include_preprocessing,
              "The graph takes RGB values in [0, 255] and applies the model's input scaling itself");
}

void export_tf_checkpoint(torch::nn::Module& model, const models::TfNameMap& map, const std::string& what, int64_t step,
                          const std::string& prefix) {
  if (!map) throw Error("--format tf: " + what + " has no map to TensorFlow's variable names yet (docs/import.md)");
  if (tf::is_tensorflow_checkpoint(prefix)) throw Error(prefix + ": a TensorFlow checkpoint is already there");
  const auto left_out = models::write_tf_checkpoint(prefix, model, map, step);
  int64_t values = 0;
  for (const auto& p : model.parameters()) values += p.numel();
  spdlog::info(
      "wrote {}.index and {}.data-00000-of-00001 (TensorFlow V2 checkpoint, {}'s variables under "
      "TensorFlow's names, global_step {}){}",
      prefix, prefix, what, step,
      left_out.empty() ? ""
                       : "; " + std::to_string(left_out.size()) +
                             " variables without a TensorFlow "
                             "counterpart left out (e.g. " +
                             left_out[0] + ")");
}

void export_image_model(torch::nn::Module& model, const std::string& arch, const data::PreprocessOptions& preprocess,
                        const ExportFlags& f, int64_t step, const std::string& probabilities) {
  if (f.format == "tf") return export_tf_checkpoint(model, models::tf_name_map(arch), arch, step, f.out);
  if (f.format != "onnx" && f.format != "frozen_graph" && f.format != "saved_model" && f.format != "tfhub" &&
      f.format != "tflite")
    throw Error("--format must be onnx, frozen_graph, saved_model, tfhub, tflite or tf, not '" + f.format + "'");
  auto* image_model = dynamic_cast<models::ImageModelImpl*>(&model);
  if (!image_model) throw Error("export does not support " + arch);
  model.eval();
  const std::string input = f.include_preprocessing ? "RGB in [0, 255]" : "preprocessed as for eval";
  const std::string output = f.feature_vector ? "features" : "logits";
  if (f.format == "onnx") {
    exporting::OnnxExportOptions o;
    o.image_size = preprocess.image_size;
    o.feature_vector = f.feature_vector;
    o.include_preprocessing = f.include_preprocessing;
    o.scale = preprocess.scale;
    o.offset = preprocess.offset;
    exporting::export_onnx(*image_model, o, f.out);
    spdlog::info("wrote {} (ONNX opset {}, input 'images' [batch, 3, {}, {}] {}, output '{}')", f.out,
                 exporting::kOnnxOpset, o.image_size, o.image_size, input, output);
    return;
  }
  exporting::TfGraphExportOptions o;
  o.image_size = preprocess.image_size;
  o.feature_vector = f.feature_vector;
  o.include_preprocessing = f.include_preprocessing;
  o.scale = preprocess.scale;
  o.offset = preprocess.offset;
  o.probabilities = probabilities;
  const std::string outputs = f.feature_vector ? "'features'" : "'logits', 'probs' (" + probabilities + ")";
  if (f.format == "tfhub") {
    // As the Model Garden's tfhub_export.py: the model with its input scaling (rescale_inputs),
    // taking RGB in [0, 1] as TF Hub's image modules do, whole and up to the pooled features.
    o.include_preprocessing = true;
    o.scale = preprocess.scale * 255.0f;
    exporting::export_saved_model(*image_model, o, join_path(f.out, "classification"));
    o.feature_vector = true;
    exporting::export_saved_model(*image_model, o, join_path(f.out, "feature_vector"));
    spdlog::info(
        "wrote {0}/classification and {0}/feature_vector (TF Hub image modules as TensorFlow SavedModels: input "
        "'inputs' [batch, {1}, {1}, 3] RGB in [0, 1], outputs 'logits' and 'probs' / 'features')",
        f.out, o.image_size);
    return;
  }
  if (f.format == "tflite") {
    exporting::export_tflite(*image_model, o, f.out);
    spdlog::info("wrote {} (TensorFlow Lite: input 'images' float [1, {}, {}, 3] {}, outputs {})", f.out, o.image_size,
                 o.image_size, input, outputs);
    return;
  }
  if (f.format == "frozen_graph") {
    exporting::export_frozen_graph(*image_model, o, f.out);
    spdlog::info("wrote {} (TensorFlow frozen graph, NHWC: input 'images' [batch, {}, {}, 3] {}, outputs {})", f.out,
                 o.image_size, o.image_size, input, outputs);
  } else {
    exporting::export_saved_model(*image_model, o, f.out);
    spdlog::info(
        "wrote {}/saved_model.pb (TensorFlow SavedModel, tag 'serve', signature 'serving_default': input 'inputs' "
        "[batch, {}, {}, 3] {}, outputs {})",
        f.out, o.image_size, o.image_size, input, outputs);
  }
}

bool torchvision_init_flag(const std::string& init) {
  if (init != "default" && init != "torchvision")
    throw Error("--init must be default or torchvision, not '" + init + "'");
  return init == "torchvision";
}

}  // namespace orchard::tasks
