// orchard classify train|eval|predict: the ResNet CTL seed's flags, mapped onto typed
// configuration (tasks::ClassificationConfig, engine::TrainerOptions) in one place.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/preprocess.h"
#include "orchard/data/tools.h"
#include "orchard/engine/evaluator.h"
#include "orchard/engine/trainer.h"
#include "orchard/export/tf_graph_export.h"
#include "orchard/models/registry.h"
#include "orchard/tasks/classify/classification.h"
#include "orchard/tasks/command_support.h"
#include "orchard/tasks/image_commands.h"
#include "orchard/tasks/registry.h"
#include "orchard/tasks/train_driver.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/loss_scale.h"
#include "orchard/train/runtime.h"
#include "orchard/train/schedule.h"

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace orchard::tasks {
namespace {

// Every flag of `orchard classify`, with the seed's names and defaults.
struct ClassifyFlags : RuntimeFlags {
  // resnet_ctl_imagenet_main / common.py
  std::string data_dir = "/tmp";
  std::string model_dir = "/tmp";
  bool clean = false;
  int64_t batch_size = 32;
  int64_t train_epochs = 1;
  int64_t epochs_between_evals = 1;
  int64_t train_steps = 0;  // 0: no cap
  bool use_synthetic_data = false;
  bool skip_eval = false;
  std::string loss_scale;
  int64_t steps_per_loop = 0;  // 0: steps per epoch
  // --enable_checkpoint_and_export, --enable_tensorboard (both off, as the seed), --log_steps,
  // --max_to_keep; with a moving average the trained weights are evaluated too.
  engine::TrainerOptions run = [] {
    engine::TrainerOptions o;
    o.enable_checkpoints = false;
    o.enable_tensorboard = false;
    o.eval_training_weights = true;
    return o;
  }();
  bool single_l2_loss_op = false;
  std::string data_format;  // "" -> channels_first on GPU, channels_last on CPU (as the seed)
  bool training_dataset_cache = false;
  std::string pretrained_filepath;  // Model Garden's Keras flag: start from a checkpoint's backbone
  int datasets_num_private_threads = 0;
  std::string profile_steps;
  // Orchard additions
  std::string model = "resnet50";
  int64_t num_classes = 0;  // 0: lines of data_dir/labels.txt, else 1000
  int64_t width = 0;
  int image_size = 224;
  std::string stats_file;
  uint64_t seed = 0;
  double base_learning_rate = 0.1;
  double warmup_epochs = 5;
  std::string lr_schedule = "piecewise";
  std::string lr_boundaries = "30,60,80";
  std::string lr_multipliers = "1.0,0.1,0.01,0.001";
  double momentum = 0.9;
  double weight_decay = 1e-4;
  double label_smoothing = 0;
  double moving_average_decay = 0;
  bool zero_init_residual = false;
  std::string augmentation = "resnet";
  double min_crop_area = 0.05;
  int pad = 4;
  double random_erasing = 0;
  int64_t num_train_examples = 0;  // 0: count the train shards
  bool skip_corrupt_records = false;
  int shuffle_buffer = 10000;
  int top_k = 5;     // predict
  std::string mode;  // the Model Garden's: train | eval | train_and_eval ("": train_and_eval)
};

void add_model_flags(FlagSet* c, ClassifyFlags& f) {
  c->add_option("--model", f.model,
                "Registered model name (resnet18..152, *_small, resnet_tiny, mobilenet_v2, inception_v3; TensorFlow's: "
                "resnet_v1_50/101/152, resnet50_garden, inception_v3_slim, mobilenet_v2_slim)")
      ->capture_default_str();
  c->add_option("--num_classes", f.num_classes, "Classes (0: lines of data_dir/labels.txt, else 1000)");
  c->add_option("--width", f.width, "Base width override (0: the model's own)");
  c->add_option("--image_size", f.image_size, "Input size in pixels")->capture_default_str();
  c->add_option("--data_format", f.data_format, "channels_first | channels_last (default: channels_last on CPU)");
  add_host_flags(c, f);
}

void add_train_flags(FlagSet* c, ClassifyFlags& f) {
  c->add_option("--data_dir,--dd", f.data_dir, "Directory with train-* and validation-* TFRecord shards")
      ->capture_default_str();
  c->add_option("--model_dir,--md", f.model_dir, "Checkpoints, summaries and config")->capture_default_str();
  c->add_flag("--clean", f.clean, "Remove Orchard's files from model_dir first");
  c->add_option("--batch_size,--bs", f.batch_size, "Global batch size")->capture_default_str();
  c->add_option("--train_epochs,--te", f.train_epochs, "Epochs to train")->capture_default_str();
  c->add_option("--epochs_between_evals,--ebe", f.epochs_between_evals, "Evaluate every N epochs")
      ->capture_default_str();
  c->add_option("--train_steps", f.train_steps, "Cap on the total number of steps (0: none)");
  c->add_flag("--use_synthetic_data", f.use_synthetic_data, "Random images instead of the data (throughput)");
  c->add_flag("--skip_eval", f.skip_eval, "Train only");
  c->add_option("--mode", f.mode,
                "The Model Garden's: train (no evaluation, as --skip_eval), eval (evaluate model_dir's checkpoints as "
                "a training job writes them, until its last step), train_and_eval (the default)");
  c->add_option("--pretrained_filepath", f.pretrained_filepath,
                "Start from a checkpoint's backbone (classifier re-initialised; only when model_dir has no "
                "checkpoint yet): an Orchard checkpoint or model_dir, or a TensorFlow checkpoint for the models with "
                "TensorFlow names (resnet_v1_50/101/152, resnet50_garden, inception_v3_slim, mobilenet_v2_slim, ...)");
  add_runtime_flags(c, f);
  c->add_option("--loss_scale", f.loss_scale, "fp16 loss scale (number or 'dynamic')");
  c->add_option("--steps_per_loop", f.steps_per_loop, "Steps per host loop (0: one epoch)");
  c->add_flag("--enable_checkpoint_and_export", f.run.enable_checkpoints, "Checkpoint every 5 loops and at the end");
  c->add_flag("--enable_tensorboard", f.run.enable_tensorboard, "Write TensorBoard event files");
  c->add_option("--log_steps", f.run.log_steps, "Log throughput every N steps")->capture_default_str();
  c->add_flag("--single_l2_loss_op", f.single_l2_loss_op, "One L2 op over all weights");
  c->add_flag("--training_dataset_cache", f.training_dataset_cache, "Cache raw training records in memory");
  c->add_option("--datasets_num_private_threads", f.datasets_num_private_threads,
                "Input pipeline threads (0: all cores)");
  c->add_option("--profile_steps", f.profile_steps, "'first,last' steps to profile into a Chrome trace");
  add_model_flags(c, f);
  c->add_option("--stats_file", f.stats_file, "Write the run's stats JSON here");
  c->add_option("--seed", f.seed, "Random seed (data order, augmentation, init)")->capture_default_str();
  c->add_option("--base_learning_rate", f.base_learning_rate, "LR for batch 256 (scaled linearly)")
      ->capture_default_str();
  c->add_option("--warmup_epochs", f.warmup_epochs, "Linear warm-up epochs")->capture_default_str();
  c->add_option("--lr_schedule", f.lr_schedule,
                "After warm-up: piecewise (constant between --lr_boundaries, the seed's) | cosine (to 0 at "
                "--train_epochs)")
      ->check_member({"piecewise", "cosine"})
      ->capture_default_str();
  c->add_option("--lr_boundaries", f.lr_boundaries, "Epochs where the LR drops")->capture_default_str();
  c->add_option("--lr_multipliers", f.lr_multipliers, "LR multipliers (one more than boundaries)")
      ->capture_default_str();
  c->add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  c->add_option("--weight_decay", f.weight_decay, "L2 coefficient on non-BN weights")->capture_default_str();
  c->add_option("--label_smoothing", f.label_smoothing, "Label smoothing")->capture_default_str();
  c->add_option("--moving_average_decay", f.moving_average_decay,
                "Keep an exponential moving average of the weights with this decay (e.g. 0.9999; 0: none); "
                "evaluation, checkpoints' model, predict and export use it")
      ->capture_default_str();
  c->add_flag("--zero_init_residual", f.zero_init_residual, "Zero-init each block's last BN gamma");
  c->add_option("--augmentation", f.augmentation,
                "resnet (distorted crop, ImageNet recipe) | pad_crop (pad, random crop, flip: CIFAR recipe)")
      ->capture_default_str();
  c->add_option("--min_crop_area", f.min_crop_area, "resnet augmentation: lower end of the crop's area range")
      ->capture_default_str();
  c->add_option("--pad", f.pad, "pad_crop augmentation: pixels padded on each side")->capture_default_str();
  c->add_option("--random_erasing", f.random_erasing,
                "Probability of erasing one random rectangle of each training image (torchvision RandomErasing)")
      ->capture_default_str();
  c->add_option("--num_train_examples", f.num_train_examples, "Examples per epoch (0: count the shards)");
  c->add_option("--max_to_keep", f.run.max_to_keep, "Checkpoints to keep")->capture_default_str();
  c->add_flag("--skip_corrupt_records", f.skip_corrupt_records,
              "Skip records with bad CRCs and the rest of a truncated shard (counted in stats)");
  c->add_option("--shuffle_buffer", f.shuffle_buffer, "Example shuffle buffer")->capture_default_str();
}

bool channels_last(const ClassifyFlags& f, bool cuda) {
  if (f.data_format.empty()) return !cuda;
  if (f.data_format == "channels_last") return true;
  if (f.data_format == "channels_first") return false;
  throw Error("--data_format must be channels_first or channels_last, not '" + f.data_format + "'");
}

int64_t resolve_num_classes(const ClassifyFlags& f) {
  if (f.num_classes > 0) return f.num_classes;
  auto labels = data::read_labels(join_path(f.data_dir, "labels.txt"));
  return labels.empty() ? 1000 : static_cast<int64_t>(labels.size());
}

tasks::ClassificationConfig task_config(const ClassifyFlags& f, bool cuda) {
  tasks::ClassificationConfig c;
  c.model.arch = f.model;
  c.model.num_classes = resolve_num_classes(f);
  c.model.width = f.width;
  c.model.zero_init_residual = f.zero_init_residual;
  c.image_size = f.image_size;
  c.max_image_pixels = f.max_image_pixels;
  c.channels_last = channels_last(f, cuda);
  c.weight_decay = f.weight_decay;
  c.single_l2_loss_op = f.single_l2_loss_op;
  c.label_smoothing = f.label_smoothing;
  c.augmentation = data::parse_augmentation(f.augmentation);
  c.crop.min_area = static_cast<float>(f.min_crop_area);
  c.pad = f.pad;
  c.random_erasing = static_cast<float>(f.random_erasing);
  if (f.image_size < 8) throw Error("--image_size must be at least 8");
  if (f.min_crop_area <= 0 || f.min_crop_area > 1) throw Error("--min_crop_area must be in (0, 1]");
  if (f.pad < 0 || f.pad > f.image_size) throw Error("--pad must be in [0, --image_size]");
  if (f.random_erasing < 0 || f.random_erasing > 1) throw Error("--random_erasing must be in [0, 1]");
  if (f.moving_average_decay < 0 || f.moving_average_decay >= 1)
    throw Error("--moving_average_decay must be in [0, 1) (0: no moving average), not " +
                std::to_string(f.moving_average_decay));
  return c;
}

json config_json(const ClassifyFlags& f, const tasks::ClassificationConfig& c) {
  return {{"task", "classify"},
          {"model", c.model.arch},
          {"num_classes", c.model.num_classes},
          {"width", c.model.width},
          {"zero_init_residual", c.model.zero_init_residual},
          {"image_size", c.image_size},
          {"data_format", c.channels_last ? "channels_last" : "channels_first"},
          {"weight_decay", c.weight_decay},
          {"single_l2_loss_op", c.single_l2_loss_op},
          {"label_smoothing", c.label_smoothing},
          {"moving_average_decay", f.moving_average_decay},
          {"augmentation", f.augmentation},
          {"min_crop_area", f.min_crop_area},
          {"pad", f.pad},
          {"random_erasing", f.random_erasing},
          {"data_dir", f.data_dir},
          {"batch_size", f.batch_size},
          {"train_epochs", f.train_epochs},
          {"train_steps", f.train_steps},
          {"epochs_between_evals", f.epochs_between_evals},
          {"base_learning_rate", f.base_learning_rate},
          {"warmup_epochs", f.warmup_epochs},
          {"lr_schedule", f.lr_schedule},
          {"lr_boundaries", f.lr_boundaries},
          {"lr_multipliers", f.lr_multipliers},
          {"momentum", f.momentum},
          {"seed", f.seed},
          {"dtype", f.dtype},
          {"use_synthetic_data", f.use_synthetic_data}};
}

// Reads model_dir/config.json back into the flags that define the model.
void load_model_config(const std::string& model_dir, ClassifyFlags* f, const FlagGiven& given) {
  const json j = read_model_config(model_dir, "classify");
  f->model = j.at("model").get<std::string>();
  f->num_classes = j.at("num_classes").get<int64_t>();
  f->width = j.value("width", int64_t{0});
  f->image_size = j.at("image_size").get<int>();
  f->data_format = j.value("data_format", std::string("channels_first"));
  f->zero_init_residual = j.value("zero_init_residual", false);
  f->augmentation = j.value("augmentation", std::string("resnet"));  // eval/predict preprocessing follows it
  f->pad = j.value("pad", 4);
  if (!given("--data_dir")) f->data_dir = j.value("data_dir", f->data_dir);
}

// The seed's synthetic input: one batch of truncated-normal images (mean 127, stddev 60,
// inside [0, 255]) and random labels, repeated; no decoding at all. The batch stays on the
// training device (as TF's distributed synthetic input does), so GPU throughput counts no copies.
engine::BatchSource synthetic_source(const data::SampleSpec& spec, int64_t batch_size, int64_t num_classes,
                                     uint64_t seed, int64_t steps_per_epoch, int64_t start_epoch, int64_t start_batch,
                                     const std::string& device) {
  torch::manual_seed(seed);
  std::vector<int64_t> shape = {batch_size};
  shape.insert(shape.end(), spec.image_shape.begin(), spec.image_shape.end());
  auto images = torch::empty(shape).normal_(127, 60);
  for (int i = 0; i < 20; ++i) {
    auto bad = (images - 127).abs() > 120;  // truncated at 2 stddev: stays inside [7, 247]
    if (!bad.any().item<bool>()) break;
    images = torch::where(bad, torch::empty(shape).normal_(127, 60), images);
  }
  auto labels = torch::randint(num_classes, {batch_size}, torch::kLong).to(device);
  images = images.to(device);
  auto pos = std::make_shared<int64_t>(start_epoch * steps_per_epoch + start_batch);
  return [=](data::Batch* b) {
    b->images = images;
    b->fields["label"] = labels;
    b->size = batch_size;
    b->epoch = *pos / steps_per_epoch;
    b->index_in_epoch = *pos % steps_per_epoch;
    ++*pos;
    return true;
  };
}

// The steps a training run with these flags takes: one epoch is the shards' records / batch.
int64_t total_train_steps(const ClassifyFlags& f, int64_t num_examples) {
  const int64_t steps_per_epoch = num_examples / f.batch_size;
  if (steps_per_epoch < 1)
    throw Error("--batch_size " + std::to_string(f.batch_size) + " is larger than the " + std::to_string(num_examples) +
                " training examples");
  int64_t total = steps_per_epoch * f.train_epochs;
  if (f.train_steps > 0) total = std::min(total, f.train_steps);
  return total;
}

// --mode eval: the evaluation job beside a training job with the same flags (official/core's
// continuous_eval): each new checkpoint of model_dir evaluated on the validation shards, with
// eval summaries (--enable_tensorboard), until the checkpoint of the run's last step.
void run_continuous_eval(ClassifyFlags f) {
  if (f.batch_size < 1) throw Error("--batch_size must be positive");
  if (f.use_synthetic_data)
    throw Error("--mode " + f.mode + " evaluates the validation shards; not with --use_synthetic_data");
  if (!dir_exists(f.data_dir)) throw Error("--data_dir " + f.data_dir + ": no such directory");
  train::configure_threads(f.num_threads);
  check_dir_can_be_written(f.model_dir);  // eval/ is made with the first summary
  const int64_t num_examples = f.num_train_examples > 0
                                   ? f.num_train_examples
                                   : count_examples(join_path(f.data_dir, "train-*"), f.skip_corrupt_records);
  const int64_t total = total_train_steps(f, num_examples);
  const std::string validation = join_path(f.data_dir, "validation-*");
  count_examples(validation, f.skip_corrupt_records);  // a clear error before the wait for checkpoints
  auto tcfg = task_config(f, /*cuda=*/false);
  tcfg.model.initialize = false;  // every evaluation restores a checkpoint
  tasks::ClassificationTask task(tcfg);

  data::PipelineOptions input;
  input.file_pattern = validation;
  input.training = false;
  input.num_epochs = 1;
  input.batch_size = f.batch_size;
  input.num_threads = f.datasets_num_private_threads;
  input.reader.skip_corrupt_records = f.skip_corrupt_records;
  engine::CheckpointWatch watch;
  watch.checkpoint_dir = f.model_dir;
  watch.final_step = total;
  spdlog::info("--mode {}: evaluating the checkpoints of {} as they appear, until step {} (no training)", f.mode,
               f.model_dir, total);
  const auto [step, metrics] =
      evaluate_new_checkpoints(task, watch, f.model_dir, input, /*limit=*/0, f.run.enable_tensorboard);
  if (metrics.empty()) return;
  json j = {{"accuracy_top_1", metrics.at("accuracy")},
            {"top_5_accuracy", metrics.at("top_5_accuracy")},
            {"eval_loss", metrics.at("loss")},
            {"global_step", step}};
  std::cout << j.dump() << std::endl;
  if (!f.stats_file.empty()) atomic_write_file(f.stats_file, j.dump(2) + "\n");
}

// `classify train`: the shared recipe (tasks/train_driver.h) with the ResNet CTL seed's parts.
class ClassifyTrainer : public TrainDriver {
 public:
  explicit ClassifyTrainer(ClassifyFlags f) : f_(std::move(f)) {}

 private:
  Setup setup() override {
    if (f_.batch_size < 1) throw Error("--batch_size must be positive");
    if (f_.run.log_steps < 1) throw Error("--log_steps must be positive");
    return {&f_, f_.model_dir, f_.batch_size, f_.clean, f_.seed, f_.run, f_.stats_file};
  }

  void prepare() override {
    tcfg_ = task_config(f_, runtime().cuda);
    // The data is checked before a model is built: a missing validation split was found only
    // after training had run.
    num_examples_ = f_.num_train_examples;
    if (!f_.use_synthetic_data) {
      if (!dir_exists(f_.data_dir)) throw Error("--data_dir " + f_.data_dir + ": no such directory");
      train_files_ = join_path(f_.data_dir, "train-*");
      const int64_t counted = count_examples(train_files_, f_.skip_corrupt_records);
      if (num_examples_ <= 0) num_examples_ = counted;
      if (!f_.skip_eval)
        check_evaluation_data(join_path(f_.data_dir, "validation-*"), "--skip_eval", f_.skip_corrupt_records);
    } else if (num_examples_ <= 0) {
      num_examples_ = 1281167;  // ImageNet, as the seed's synthetic input assumes
    }
  }

  Task& build_task() override {
    task_ = std::make_unique<ClassificationTask>(tcfg_);
    return *task_;
  }

  void configure(engine::TrainerOptions& o) override {
    steps_per_epoch_ = num_examples_ / f_.batch_size;
    const int64_t total_steps = total_train_steps(f_, num_examples_);
    int64_t steps_per_loop = f_.steps_per_loop > 0 ? f_.steps_per_loop : steps_per_epoch_;
    if (steps_per_loop > steps_per_epoch_) {
      spdlog::warn("--steps_per_loop {} is larger than an epoch; using {}", steps_per_loop, steps_per_epoch_);
      steps_per_loop = steps_per_epoch_;
    }
    o.steps_per_epoch = steps_per_epoch_;
    o.total_steps = total_steps;
    o.steps_per_loop = steps_per_loop;
    o.checkpoint_every = steps_per_loop * 5;  // the seed: every 5 loops
    o.eval_every = f_.epochs_between_evals * steps_per_epoch_;
    o.skip_eval = f_.skip_eval || f_.use_synthetic_data;
    o.moving_average_decay = f_.moving_average_decay;
    std::tie(o.profile_start, o.profile_end) = parse_profile_steps(f_.profile_steps);
    o.loss_scale = f_.loss_scale.empty() ? "dynamic" : f_.loss_scale;
    train::LossScaler check_loss_scale(o.loss_scale);  // a bad --loss_scale fails before any work
  }

  Optimization build_optimizer() override {
    train::Schedule schedule;
    if (f_.lr_schedule == "cosine") {
      // The same linear warm-up to the rescaled rate, then TF OD API's cosine_decay_with_warmup
      // (torchvision's references: warm-up + CosineAnnealingLR): to 0 at the end of --train_epochs
      // (a --train_steps cap does not shorten it, as it does not move the piecewise boundaries).
      if (f_.warmup_epochs >= static_cast<double>(f_.train_epochs))
        throw Error("--lr_schedule cosine: --warmup_epochs " + std::to_string(f_.warmup_epochs) +
                    " must be shorter than --train_epochs " + std::to_string(f_.train_epochs));
      train::CosineDecay cosine;
      cosine.learning_rate_base = f_.base_learning_rate * static_cast<double>(f_.batch_size) / 256.0;
      cosine.warmup_learning_rate = 0.0;
      cosine.warmup_steps = std::llround(f_.warmup_epochs * static_cast<double>(steps_per_epoch_));
      cosine.total_steps = steps_per_epoch_ * f_.train_epochs;
      schedule = train::cosine_decay(cosine);
    } else {
      train::PiecewiseWarmupConfig lr;
      lr.base_lr = f_.base_learning_rate;
      lr.batch_size = f_.batch_size;
      lr.steps_per_epoch = steps_per_epoch_;
      lr.warmup_epochs = f_.warmup_epochs;
      lr.boundary_epochs = train::parse_double_list(f_.lr_boundaries, "--lr_boundaries");
      lr.multipliers = train::parse_double_list(f_.lr_multipliers, "--lr_multipliers");
      schedule = train::piecewise_constant_with_warmup(lr);
    }
    return {std::make_unique<torch::optim::SGD>(task_->module()->parameters(),
                                                torch::optim::SGDOptions(0.0).momentum(f_.momentum)),
            schedule};
  }

  TrainInputs build_inputs(const engine::TrainerOptions& o) override {
    TrainInputs in;
    in.train = training_input(train_files_, f_.batch_size, f_.seed, f_.datasets_num_private_threads,
                              f_.skip_corrupt_records, runtime());
    in.train.cache = f_.training_dataset_cache;
    in.train.shuffle_buffer = f_.shuffle_buffer;
    in.eval = eval_input_options(in.train, join_path(f_.data_dir, "validation-*"));
    in.skip_eval = o.skip_eval;
    if (f_.use_synthetic_data)
      in.synthetic = [spec = task_->sample_spec(), batch = in.train.batch_size, classes = tcfg_.model.num_classes,
                      seed = f_.seed + in.train.worker_index, steps = steps_per_epoch_,
                      device = o.device](int64_t epoch, int64_t b) {
        return synthetic_source(spec, batch, classes, seed, steps, epoch, b, device);
      };
    return in;
  }

  void fine_tune() override {
    if (f_.pretrained_filepath.empty()) return;
    const auto r = train::restore_part(
        f_.pretrained_filepath, "--pretrained_filepath", *task_->module(),
        [](const std::string& name) { return name.rfind("fc.", 0) == 0 || name.rfind("classifier.", 0) == 0; }, {},
        models::tf_name_map(tcfg_.model.arch));
    spdlog::info("fine-tuning from the backbone of {} ({} variables; classifier re-initialised)", r.path,
                 r.restored.size());
  }

  void write_run_files() override {
    atomic_write_file(join_path(f_.model_dir, "config.json"), config_json(f_, tcfg_).dump(2) + "\n");
    const std::string labels = join_path(f_.data_dir, "labels.txt");
    if (!f_.use_synthetic_data && file_exists(labels))
      atomic_write_file(join_path(f_.model_dir, "labels.txt"), read_file(labels));
  }

  void log_start(const engine::TrainerOptions& o) override {
    spdlog::info("classify: {} ({} classes) at {}px, {}, {} examples/epoch, {} steps/epoch, {} steps, {} threads",
                 tcfg_.model.arch, tcfg_.model.num_classes, tcfg_.image_size,
                 tcfg_.channels_last ? "channels_last" : "channels_first", num_examples_, steps_per_epoch_,
                 o.total_steps, runtime().threads);
  }

  void finish(const train::RunStats& stats) override {
    if (stats.eval.count("accuracy"))
      spdlog::info("final: top-1 accuracy {:.4f}, top-5 accuracy {:.4f}, eval loss {:.4f} at step {}",
                   stats.eval.at("accuracy"), stats.eval.at("top_5_accuracy"), stats.eval.at("loss"),
                   stats.global_step);
    if (!f_.run.enable_checkpoints)
      spdlog::warn(
          "no weights were written: checkpoints are off, as in the seed (--enable_checkpoint_and_export "
          "writes them, then eval, predict and export can use the model)");
    else if (runtime().chief) export_saved_model();
  }

  // --enable_checkpoint_and_export ends as the Model Garden's trainer does: the trained model as a
  // SavedModel in model_dir/saved_model (its model.save), replaced by each run that finishes.
  void export_saved_model() {
    const std::string dir = join_path(f_.model_dir, "saved_model");
    auto* model = dynamic_cast<models::ImageModelImpl*>(task_->module().get());
    if (!model) return;
    exporting::TfGraphExportOptions o;
    o.image_size = tcfg_.image_size;
    o.probabilities = "softmax";
    try {
      exporting::export_saved_model(*model, o, dir, /*replace=*/true);
      spdlog::info(
          "wrote {}/saved_model.pb (TensorFlow SavedModel: input 'inputs' [batch, {}, {}, 3] preprocessed, "
          "outputs 'logits' and 'probs'; docs/deploy.md)",
          dir, o.image_size, o.image_size);
    } catch (const Error& e) {  // the checkpoints are written; the run has succeeded
      spdlog::warn("no SavedModel was written: {}", e.what());
    }
  }

  ClassifyFlags f_;
  ClassificationConfig tcfg_;
  std::unique_ptr<ClassificationTask> task_;
  std::string train_files_;
  int64_t num_examples_ = 0;
  int64_t steps_per_epoch_ = 0;
};

void run_train(ClassifyFlags f) {
  if (f.mode == "eval" || f.mode == "continuous_eval") return run_continuous_eval(f);
  if (!f.mode.empty() && f.mode != "train" && f.mode != "train_and_eval")
    throw Error("--mode must be train, eval or train_and_eval, not '" + f.mode + "'");
  if (f.mode == "train") f.skip_eval = true;
  ClassifyTrainer(std::move(f)).run();
}

// What eval, export and predict need of this task (tasks/image_commands.h).
struct ClassifyVerbs {
  using Flags = ClassifyFlags;
  using Task = ClassificationTask;
  static constexpr const char* kProbabilities = "softmax";  // the exported graphs' "probs"
  static void inference_defaults(Flags&, bool) {}
  static void load(const std::string& model_dir, Flags* f, const FlagGiven& given) {
    load_model_config(model_dir, f, given);
  }
  static ClassificationConfig config(const Flags& f) { return task_config(f, false); }
  static std::string validation_files(const Flags& f) { return join_path(f.data_dir, "validation-*"); }
  static void add_inference_flags(FlagSet* c, Flags& f, bool predict) {
    if (predict) c->add_option("--top_k", f.top_k, "Classes to print per image")->capture_default_str();
  }
  static json eval_report(const std::map<std::string, double>& m) {  // the seed's names
    return {
        {"accuracy_top_1", m.at("accuracy")}, {"top_5_accuracy", m.at("top_5_accuracy")}, {"eval_loss", m.at("loss")}};
  }
  static void print_predictions(const Task& task, const std::vector<std::string>& files, const torch::Tensor& logits,
                                const std::vector<std::string>& labels, const Flags& f, bool json_out) {
    const auto predictions = task.predict(logits, f.top_k);
    for (size_t i = 0; i < files.size(); ++i) {
      json preds = json::array();
      std::string line = files[i] + ":";
      const auto& top = predictions[i];
      for (size_t j = 0; j < top.size(); ++j) {
        const std::string name = label_name(labels, top[j].class_id);
        preds.push_back({{"label", name}, {"class_id", top[j].class_id}, {"probability", top[j].probability}});
        line += fmt::format(" {} ({:.3f}){}", name, top[j].probability, j + 1 < top.size() ? "," : "");
      }
      if (json_out) std::cout << json{{"file", files[i]}, {"predictions", preds}}.dump() << "\n";
      else std::cout << line << "\n";
    }
  }
};

}  // namespace

TaskCommands classify_commands() {
  TaskCommands task{"classify", "Image classification: the ResNet custom training loop", {}};
  task.verbs.push_back(
      make_verb<ClassifyFlags>("train", "Train (and evaluate) a ResNet classifier", add_train_flags, run_train));
  add_image_inference_verbs<ClassifyVerbs>(&task,
                                           "Write the model for serving: ONNX (opset 10), logits or feature vector",
                                           "Top-k classes of images (files, globs or directories)");
  return task;
}

}  // namespace orchard::tasks
