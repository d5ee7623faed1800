// What every task's commands share: the runtime flags, model_dir housekeeping, joining the
// cluster, input sources over the pipeline, training over pipelines, evaluating once, batched
// inference on image files and ONNX export of image models.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchard/core/flags.h"
#include "orchard/data/pipeline.h"
#include "orchard/data/preprocess.h"
#include "orchard/engine/evaluator.h"
#include "orchard/engine/trainer.h"
#include "orchard/models/tf_names.h"
#include "orchard/train/stats.h"

namespace torch::nn {
class Module;
}

namespace orchard::tasks {

class Task;

// Flags every task's `train` shares, with the seeds' names and defaults: the runtime and the
// distribution (a task's flag struct derives from it).
struct RuntimeFlags {
  int num_threads = 0;                     // intra-op threads; 0: all cores
  int64_t max_image_pixels = 100'000'000;  // data::kDefaultMaxImagePixels
  std::string dtype = "fp32";
  std::string distribution_strategy = "mirrored";
  int num_gpus = -2;              // -2: not given (1 if a GPU is present, else 0); -1: all
  int collective_timeout = 1800;  // seconds
  bool sync_bn = false;
};
// --num_threads and --max_image_pixels (every verb that runs a model on images).
void add_host_flags(FlagSet* c, RuntimeFlags& f);
// --dtype, --distribution_strategy (--ds), --num_gpus, --collective_timeout, --sync_bn.
void add_runtime_flags(FlagSet* c, RuntimeFlags& f);

// What a training run starts from: the device, the cluster (null for one process; `chief` is
// rank 0) and the intra-op threads.
struct TrainRuntime {
  bool cuda = false;
  std::shared_ptr<train::Distributed> dist;
  bool chief = true;
  int threads = 0;
  bool threads_adaptive = false;  // Orchard chose the count: it follows the CPU the run gets
  // Removes model_dir when the last copy of this runtime goes, if start_training created it
  // and it is still empty: a run that fails before writing anything leaves no empty folder.
  std::shared_ptr<const void> created_model_dir;
};
// The start every task's `train` shares: checks --distribution_strategy, --num_gpus and --dtype,
// joins the cluster (the global batch must divide by its replicas), turns on --sync_bn, sets the
// threads, cleans model_dir with --clean (the chief, before anyone restores from it) and makes
// sure model_dir is writable.
TrainRuntime start_training(const RuntimeFlags& f, int64_t global_batch_size, const std::string& model_dir, bool clean);

// Throws unless `pattern` names shards holding records, saying that this was checked before
// training and that `skip_flag` trains without evaluating.
// With skip_corrupt_records, a corrupt shard counts the records before the damage.
void check_evaluation_data(const std::string& pattern, const std::string& skip_flag, bool skip_corrupt_records = false);

// `o` (the options a task's flags are bound to: its cadence, checkpoints, summaries) completed
// with what every task's `train` sets alike: model_dir, the global batch, --dtype, the device
// and the cluster.
engine::TrainerOptions trainer_options(engine::TrainerOptions o, const RuntimeFlags& f, const TrainRuntime& rt,
                                       const std::string& model_dir, int64_t global_batch_size);

// The training input every task's `train` reads: `file_pattern` shuffled with `seed`, this
// replica's share of the global batch (shard_input), `num_threads` parse threads, corrupt
// records skipped or not, pinned for a GPU (the task adds its shuffle buffers and cache).
data::PipelineOptions training_input(const std::string& file_pattern, int64_t global_batch_size, uint64_t seed,
                                     int num_threads, bool skip_corrupt_records, const TrainRuntime& rt);

// Removes only what Orchard writes (checkpoints, index, config, labels, summaries).
void clean_model_dir(const std::string& dir);

// --distribution_strategy / --num_gpus as the seeds define them; unsupported strategies
// get a "use ... instead" error.
void check_distribution(const std::string& strategy, int num_gpus, bool cuda);

// Joins the process group the environment describes (orchard launch / torchrun variables or
// TF_CONFIG); null for a single process. Checks the strategy and that the global batch
// divides by the number of replicas; ranks other than 0 log warnings and errors only.
std::shared_ptr<train::Distributed> join_cluster(const std::string& strategy, int64_t global_batch_size,
                                                 int timeout_seconds, bool cuda);

// The training device: "cpu", "cuda", or with several processes on GPUs the one NCCL uses
// ("cuda:LOCAL_RANK").
std::string train_device(bool cuda, const train::Distributed* distributed);

// This replica's share of an input: batch = global / replicas, worker index = rank.
void shard_input(data::PipelineOptions& options, const train::Distributed* distributed);

// The evaluation input of a training run: its options (sharding included) for one
// unshuffled, uncached pass over `file_pattern`.
data::PipelineOptions eval_input_options(const data::PipelineOptions& train_input, const std::string& file_pattern);

// "first,last" -> {first, last}; "" -> {-1, -1}.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text);

// Records in the files matching `pattern`; an error naming the pattern when there are none.
// A truncated or corrupt shard is an error that names `skip_flag` (the task's
// --skip_corrupt_records), unless skip_corrupt_records: then the records before the damage
// count (what the input pipeline will read), with a warning.
int64_t count_examples(const std::string& pattern, bool skip_corrupt_records = false,
                       const std::string& skip_flag = "--skip_corrupt_records");

// A Pipeline wrapped as a BatchSource. `keep` (optional) also holds the pipeline so the
// caller can read its counters (skipped records) after the run.
engine::BatchSource pipeline_source(data::PipelineOptions options, const tasks::Task& task, bool training,
                                    std::vector<std::shared_ptr<data::Pipeline>>* keep = nullptr);

// Trains over pipelines of `train_input` (positioned at the resume point) and evaluates over
// `eval_input` unless `skip_eval`, then finish_run. A `synthetic` factory, when given,
// replaces the training pipeline; eval_limit > 0 caps each evaluation at that many examples
// per worker.
train::RunStats train_on_pipelines(engine::Trainer& trainer, const tasks::Task& task,
                                   const data::PipelineOptions& train_input, const data::PipelineOptions& eval_input,
                                   bool skip_eval, const std::string& stats_file,
                                   const engine::TrainInputFactory& synthetic = {}, int64_t eval_limit = 0);

// Stops `source` after `limit` examples (0: no limit), cutting the last batch to fit.
engine::BatchSource limit_examples(engine::BatchSource source, int64_t limit);

// Adds the pipelines' skipped-record counts to the stats, logs them and writes the stats JSON.
void finish_run(train::RunStats& stats, std::vector<std::shared_ptr<data::Pipeline>>& pipelines,
                const std::string& stats_file);

// Evaluates the task's model as it is over one pass of `input` (no summaries); `step` is the
// restored checkpoint's, for the log line.
std::map<std::string, double> evaluate_once(tasks::Task& task, const std::string& model_dir,
                                            const data::PipelineOptions& input, int64_t step);

// The continuous evaluation of every task's eval-only mode (the OD API's model_lib.continuous_eval):
// each new checkpoint of watch.checkpoint_dir restored and evaluated over one pass of `input`
// (at most `limit` examples per worker; 0: all), with eval summaries into model_dir/eval when
// `summaries`, until watch.final_step (engine::evaluate_checkpoints).
engine::CheckpointsEvaluated evaluate_new_checkpoints(tasks::Task& task, const engine::CheckpointWatch& watch,
                                                      const std::string& model_dir, const data::PipelineOptions& input,
                                                      int64_t limit, bool summaries);

// Whether a flag was given on the command line (its default is never taken for "not given":
// an explicit value equal to the default still wins over a saved configuration).
using FlagGiven = std::function<bool(const std::string& flag)>;
FlagGiven flags_given_to(const FlagSet* command);  // `command`'s own options, by long name
inline bool no_flag_given(const std::string&) { return false; }

// model_dir/config.json, checked to belong to `task`.
nlohmann::json read_model_config(const std::string& model_dir, const std::string& task);

// Runs the model over image files (files, globs or directories) in batches with the eval
// preprocessing; calls `emit(files, outputs)` for each batch, outputs in float32 on the CPU.
void predict_images(tasks::Task& task, const data::PreprocessOptions& preprocess,
                    const std::vector<std::string>& inputs, int64_t batch_size,
                    const std::function<void(const std::vector<std::string>& files, const at::Tensor& outputs)>& emit);

// The same with the task's own preparation: prepare(encoded bytes, file, out) writes one
// input of the task's sample_spec() image shape. The outputs are task.inference(images).
using PrepareImage = std::function<void(const std::string& encoded, const std::string& file, float* out)>;
void predict_images(tasks::Task& task, const PrepareImage& prepare, const std::vector<std::string>& inputs,
                    int64_t batch_size,
                    const std::function<void(const std::vector<std::string>& files, const at::Tensor& outputs)>& emit);
// What predict_images does before the model, for a task whose predictions are more than one
// tensor (detection): `run(images, files)` for each batch of the files that could be read, images
// float32 on the CPU (the model in eval mode, no gradient).
void for_each_image_batch(
    tasks::Task& task, const PrepareImage& prepare, const std::vector<std::string>& inputs, int64_t batch_size,
    const std::function<void(const at::Tensor& images, const std::vector<std::string>& files)>& run);

// `classify|multilabel export`: the flags, and the writer of a restored image model (a ResNet
// or Inception-v3) as ONNX (orchard/export/onnx_export.h); `preprocess` gives the input size and
// the scaling --include_preprocessing puts into the graph.
struct ExportFlags {
  std::string model_dir, checkpoint, format = "onnx", out;
  bool feature_vector = false;
  bool include_preprocessing = false;
};
void add_export_flags(FlagSet* c, ExportFlags& f);
// --format onnx: an ONNX file; frozen_graph: a TensorFlow GraphDef file; saved_model: a
// SavedModel folder (docs/deploy.md); tf: a TensorFlow V2 checkpoint under TF-Slim's names (--out
// is its prefix, e.g. out/model.ckpt-STEP). `probabilities` (softmax | sigmoid): the TensorFlow
// graphs' "probs" output beside the logits.
void export_image_model(torch::nn::Module& model, const std::string& arch, const data::PreprocessOptions& preprocess,
                        const ExportFlags& f, int64_t step, const std::string& probabilities);
// The model's variables as a TensorFlow V2 checkpoint `prefix` (.index, .data-00000-of-00001)
// under `map`'s names, with global_step; `what` names the model in messages.
void export_tf_checkpoint(torch::nn::Module& model, const models::TfNameMap& map, const std::string& what, int64_t step,
                          const std::string& prefix);

// The value of an `--init default|torchvision` flag (Inception-v3's initialisation): true for
// torchvision; a clear error for anything else.
bool torchvision_init_flag(const std::string& init);

}  // namespace orchard::tasks
