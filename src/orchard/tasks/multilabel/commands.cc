// orchard multilabel train|eval|predict: the Tencent ML-Images trainer (train.py / flags.py),
// its flags mapped onto tasks::MultiLabelConfig and the shared Trainer.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <numeric>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/tools.h"
#include "orchard/engine/loop.h"
#include "orchard/models/registry.h"
#include "orchard/tasks/command_support.h"
#include "orchard/tasks/image_commands.h"
#include "orchard/tasks/multilabel/multilabel.h"
#include "orchard/tasks/registry.h"
#include "orchard/tasks/train_driver.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/optimizers.h"
#include "orchard/train/runtime.h"

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace orchard::tasks {
namespace {

struct MultiLabelFlags : RuntimeFlags {
  // flags.py names and defaults
  std::string data_dir = "./data/train/";
  std::string model_dir = "./out/checkpoint/";
  int64_t batch_size = 512;
  int64_t file_shuffle_buffer = 1500;
  int64_t shuffle_buffer = 2048;
  int num_preprocess_threads = 0;  // 0: all cores
  int64_t class_num = 1000;
  int resnet_size = 0;  // 0: use --model
  std::string data_format = "channels_first";
  int image_size = 224;
  double mask_thres = 0.7;
  double neg_select = 0.3;
  std::string pretrain_ckpt;  // --fine_tune_checkpoint
  double opt_momentum = 0.9;
  std::string optimizer = "momentum";
  std::string init = "default";
  double lr = 0.1;
  int64_t lr_decay_step = 0;
  double weight_decay = 1e-4;
  int64_t warmup_step = 0;
  double lr_warmup = 0.1;
  int64_t warmup_decay_step = 0;
  double warmup_decay_factor = 1.414;
  // --max_iter, --test_interval (0: evaluate at the end), --log_interval, --snapshot (0: checkpoint
  // at the end only), --max_to_keep, --skip_eval
  engine::TrainerOptions run = [] {
    engine::TrainerOptions o;
    o.total_steps = 1000000;
    o.enable_checkpoints = true;
    o.checkpoint_every = 1000;
    o.max_to_keep = 200;
    return o;
  }();
  uint64_t random_seed = 1234;
  // Orchard additions
  std::string model = "resnet101";
  int64_t width = 0;
  double depth_multiplier = 1.0;
  double pos_weight = 1;
  std::string balance = "ml_images";
  double threshold = 0.5;
  bool clean = false;
  std::string stats_file;
  std::string profile_steps;
  bool skip_corrupt_records = false;
};

void add_model_flags(FlagSet* c, MultiLabelFlags& f) {
  c->add_option("--model", f.model,
                "Registered model name (resnet18..152, *_small, resnet_tiny, inception_v3; for TensorFlow checkpoints "
                "resnet101_ml_images (ML-Images' own network), resnet_v1_50/101/152, resnet50_garden)")
      ->capture_default_str();
  c->add_option("--resnet_size", f.resnet_size, "18 | 34 | 50 | 101 | 152: the same as --model resnetN");
  c->add_option("--width", f.width, "Base width override (0: the model's own)");
  c->add_option("--depth_multiplier", f.depth_multiplier,
                "inception_v3: channels x this (TF-Slim's depth_multiplier, at least 16 each)")
      ->capture_default_str();
  c->add_option("--class_num", f.class_num, "Classes (length of each label vector)")->capture_default_str();
  c->add_option("--image_size", f.image_size, "Input size in pixels")->capture_default_str();
  c->add_option("--data_format", f.data_format, "channels_first | channels_last")->capture_default_str();
  c->add_option("--threshold", f.threshold, "Probability above which a label is predicted")->capture_default_str();
  add_host_flags(c, f);
}

void add_train_flags(FlagSet* c, MultiLabelFlags& f) {
  c->add_option("--data_dir", f.data_dir, "train/ and val/ directories of shards, or train-* and validation-* shards")
      ->capture_default_str();
  c->add_option("--model_dir", f.model_dir, "Checkpoints, summaries and config")->capture_default_str();
  c->add_flag("--clean", f.clean, "Remove Orchard's files from model_dir first");
  c->add_option("--batch_size", f.batch_size, "Global batch size")->capture_default_str();
  c->add_option("--file_shuffle_buffer", f.file_shuffle_buffer, "Shuffle buffer over the training files")
      ->capture_default_str();
  c->add_option("--shuffle_buffer", f.shuffle_buffer, "Shuffle buffer over the examples")->capture_default_str();
  c->add_option("--num_preprocess_threads", f.num_preprocess_threads, "Input pipeline threads (0: all cores)");
  c->add_option("--mask_thres", f.mask_thres, "A label >= this makes its class positive in a batch")
      ->capture_default_str();
  c->add_option("--neg_select", f.neg_select, "Share of negative-only classes learned per batch")
      ->capture_default_str();
  c->add_option("--fine_tune_checkpoint,--pretrain_ckpt", f.pretrain_ckpt,
                "Start from this checkpoint's backbone (a file or a model_dir; the classifier is re-initialised)");
  add_runtime_flags(c, f);
  c->add_option("--opt_momentum", f.opt_momentum, "SGD momentum")->capture_default_str();
  c->add_option(
       "--optimizer", f.optimizer,
       "momentum (ML-Images': SGD with --opt_momentum) | adam (TF's defaults: beta1 0.9, beta2 0.999, eps 1e-8)")
      ->capture_default_str();
  c->add_option("--init", f.init,
                "Weight initialisation when training from scratch: default (the model's own) | torchvision "
                "(inception_v3: trunc_normal(0.1) convolutions, as torchvision and TF-Slim)")
      ->capture_default_str();
  c->add_option("--lr", f.lr, "Learning rate for a batch of 256 (scaled linearly)")->capture_default_str();
  c->add_option("--lr_decay_step", f.lr_decay_step, "LR x0.1 after 1, 2, 3 and 4 times this many steps (0: never)")
      ->capture_default_str();
  c->add_option("--weight_decay", f.weight_decay, "x sum of l2_loss over all trainable variables")
      ->capture_default_str();
  c->add_option("--warmup_step,--warmup", f.warmup_step, "Steps of exponential warm-up")->capture_default_str();
  c->add_option("--lr_warmup", f.lr_warmup, "Warm-up starting LR for a batch of 256")->capture_default_str();
  c->add_option("--warmup_decay_step,--lr_warmup_decay_step", f.warmup_decay_step,
                "Warm-up LR multiplies by the factor every this many steps")
      ->capture_default_str();
  c->add_option("--warmup_decay_factor,--lr_warmup_decay_factor", f.warmup_decay_factor, "Warm-up growth factor")
      ->capture_default_str();
  c->add_option("--max_iter", f.run.total_steps, "Steps to train")->capture_default_str();
  c->add_option("--test_interval", f.run.eval_every, "Evaluate every N steps (0: at the end)")->capture_default_str();
  c->add_flag("--skip_eval", f.run.skip_eval, "Train only");
  c->add_option("--log_interval", f.run.log_steps, "Log learning_rate and cross_entropy every N steps")
      ->capture_default_str();
  c->add_option("--snapshot", f.run.checkpoint_every, "Checkpoint every N steps (0: at the end only)")
      ->capture_default_str();
  c->add_option("--max_to_keep", f.run.max_to_keep, "Checkpoints to keep")->capture_default_str();
  c->add_option("--random_seed,--seed", f.random_seed, "Random seed (data order, augmentation, init, neg_select)")
      ->capture_default_str();
  c->add_option("--pos_weight", f.pos_weight,
                "Weight of positive labels in the sigmoid cross entropy (ML-Images train.py: 12)")
      ->capture_default_str();
  c->add_option("--loss_balance", f.balance, "ml_images (per-class batch coefficients) | none")->capture_default_str();
  c->add_option("--stats_file", f.stats_file, "Write the run's stats JSON here");
  c->add_option("--profile_steps", f.profile_steps, "'first,last' steps to profile into a Chrome trace");
  c->add_flag("--skip_corrupt_records", f.skip_corrupt_records,
              "Skip records with bad CRCs and the rest of a truncated shard (counted in stats)");
  add_model_flags(c, f);
}

tasks::MultiLabelConfig task_config(const MultiLabelFlags& f) {
  tasks::MultiLabelConfig c;
  c.model.arch = f.resnet_size > 0 ? "resnet" + std::to_string(f.resnet_size) : f.model;
  c.model.num_classes = f.class_num;
  c.model.width = f.width;
  c.model.depth_multiplier = f.depth_multiplier;
  c.max_image_pixels = f.max_image_pixels;
  if (torchvision_init_flag(f.init) && c.model.arch.rfind("inception_v3", 0) != 0)
    throw Error("--init torchvision applies to inception_v3, not " + c.model.arch);
  c.model.init = f.init;
  if (f.optimizer != "momentum" && f.optimizer != "adam")
    throw Error("--optimizer must be momentum or adam, not '" + f.optimizer + "'");
  c.image_size = f.image_size;
  if (f.data_format != "channels_first" && f.data_format != "channels_last")
    throw Error("--data_format must be channels_first or channels_last, not '" + f.data_format + "'");
  c.channels_last = f.data_format == "channels_last";
  c.weight_decay = f.weight_decay;
  c.pos_weight = f.pos_weight;
  c.mask_thres = f.mask_thres;
  c.neg_select = f.neg_select;
  if (f.balance != "ml_images" && f.balance != "none")
    throw Error("--loss_balance must be ml_images or none, not '" + f.balance + "'");
  c.balance = f.balance == "ml_images";
  c.threshold = f.threshold;
  if (f.class_num < 1) throw Error("--class_num must be positive");
  if (f.image_size < 8) throw Error("--image_size must be at least 8");
  if (f.threshold <= 0 || f.threshold >= 1) throw Error("--threshold must be in (0, 1)");
  return c;
}

json config_json(const MultiLabelFlags& f, const tasks::MultiLabelConfig& c) {
  return {{"task", "multilabel"},
          {"model", c.model.arch},
          {"class_num", c.model.num_classes},
          {"width", c.model.width},
          {"image_size", c.image_size},
          {"data_format", f.data_format},
          {"threshold", c.threshold},
          {"weight_decay", c.weight_decay},
          {"pos_weight", c.pos_weight},
          {"loss_balance", f.balance},
          {"mask_thres", c.mask_thres},
          {"neg_select", c.neg_select},
          {"data_dir", f.data_dir},
          {"batch_size", f.batch_size},
          {"lr", f.lr},
          {"lr_decay_step", f.lr_decay_step},
          {"warmup_step", f.warmup_step},
          {"lr_warmup", f.lr_warmup},
          {"warmup_decay_step", f.warmup_decay_step},
          {"warmup_decay_factor", f.warmup_decay_factor},
          {"max_iter", f.run.total_steps},
          {"random_seed", f.random_seed},
          {"dtype", f.dtype},
          {"optimizer", f.optimizer},
          {"init", f.init},
          {"depth_multiplier", c.model.depth_multiplier}};
}

void load_model_config(const std::string& model_dir, MultiLabelFlags* f, const FlagGiven& given) {
  const json j = read_model_config(model_dir, "multilabel");
  f->model = j.at("model").get<std::string>();
  f->resnet_size = 0;
  f->class_num = j.at("class_num").get<int64_t>();
  f->width = j.value("width", int64_t{0});
  f->depth_multiplier = j.value("depth_multiplier", 1.0);
  f->image_size = j.at("image_size").get<int>();
  f->data_format = j.value("data_format", std::string("channels_first"));
  if (!given("--threshold")) f->threshold = j.value("threshold", 0.5);  // an explicit --threshold wins
  if (!given("--data_dir")) f->data_dir = j.value("data_dir", std::string());
}

// ML-Images keeps shards in data_dir/train/ and data_dir/val/; `orchard data` writes
// train-* and validation-* shards. Either layout works.
std::string shard_pattern(const std::string& data_dir, bool training) {
  const std::string dir = join_path(data_dir, training ? "train" : "val");
  if (dir_exists(dir)) return join_path(dir, "*");
  return join_path(data_dir, (training ? "train-*" : "validation-*"));
}

void fine_tune_from(tasks::MultiLabelTask& task, const std::string& checkpoint) {
  const auto r = train::restore_part(
      checkpoint, "--fine_tune_checkpoint", *task.module(),
      [](const std::string& name) {
        return name.rfind("fc.", 0) == 0 || name.rfind("classifier.", 0) == 0 ||
               tasks::MultiLabelTask::is_task_state(name);
      },
      {}, models::tf_name_map(task.config().model.arch));
  spdlog::info("fine-tuning from the backbone of {} (classifier re-initialised)", r.path);
}

// `multilabel train`: the shared recipe (tasks/train_driver.h) with the ML-Images trainer's parts.
class MultiLabelTrainer : public TrainDriver {
 public:
  explicit MultiLabelTrainer(MultiLabelFlags f) : f_(std::move(f)) {}

 private:
  Setup setup() override {
    if (f_.batch_size < 1) throw Error("--batch_size must be positive");
    if (f_.run.log_steps < 1) throw Error("--log_interval must be positive");
    if (f_.run.total_steps < 1) throw Error("--max_iter must be positive");
    if (f_.run.checkpoint_every < 0 || f_.run.eval_every < 0)
      throw Error("--snapshot and --test_interval must not be negative");
    return {&f_, f_.model_dir, f_.batch_size, f_.clean, f_.random_seed, f_.run, f_.stats_file};
  }

  void prepare() override {
    tcfg_ = task_config(f_);
    // The data is checked before a model is built.
    if (!dir_exists(f_.data_dir)) throw Error("--data_dir " + f_.data_dir + ": no such directory");
    train_files_ = shard_pattern(f_.data_dir, true);
    num_examples_ = count_examples(train_files_, f_.skip_corrupt_records);
    if (num_examples_ < f_.batch_size)
      throw Error("--batch_size " + std::to_string(f_.batch_size) + " is larger than the " +
                  std::to_string(num_examples_) + " training examples");
    if (!f_.run.skip_eval)
      check_evaluation_data(shard_pattern(f_.data_dir, false), "--skip_eval", f_.skip_corrupt_records);
  }

  Task& build_task() override {
    task_ = std::make_unique<MultiLabelTask>(tcfg_);
    return *task_;
  }

  // Host loops end where logging, checkpoints and evaluations fall.
  void configure(engine::TrainerOptions& o) override {
    o.steps_per_loop = engine::steps_per_loop_for({o.log_steps, o.checkpoint_every, o.eval_every});
    o.steps_per_epoch = std::max<int64_t>(1, num_examples_ / f_.batch_size);
    std::tie(o.profile_start, o.profile_end) = parse_profile_steps(f_.profile_steps);
  }

  Optimization build_optimizer() override {
    train::MlImagesScheduleConfig lr;
    lr.lr = f_.lr;
    lr.batch_size = f_.batch_size;
    lr.lr_decay_step = f_.lr_decay_step;
    lr.warmup_step = f_.warmup_step;
    lr.lr_warmup = f_.lr_warmup;
    lr.warmup_decay_step = f_.warmup_decay_step;
    lr.warmup_decay_factor = f_.warmup_decay_factor;
    auto optimizer = train::make_tf_optimizer(f_.optimizer, task_->module()->parameters(), f_.opt_momentum);
    return {std::move(optimizer), train::ml_images_schedule(lr)};
  }

  TrainInputs build_inputs(const engine::TrainerOptions& o) override {
    TrainInputs in;
    in.train = training_input(train_files_, f_.batch_size, f_.random_seed, f_.num_preprocess_threads,
                              f_.skip_corrupt_records, runtime());
    in.train.shuffle_buffer = f_.shuffle_buffer;
    in.train.file_shuffle_buffer = f_.file_shuffle_buffer;
    in.eval = eval_input_options(in.train, shard_pattern(f_.data_dir, false));
    in.skip_eval = o.skip_eval;
    return in;
  }

  void fine_tune() override {
    if (!f_.pretrain_ckpt.empty()) fine_tune_from(*task_, f_.pretrain_ckpt);
  }

  void write_run_files() override {
    atomic_write_file(join_path(f_.model_dir, "config.json"), config_json(f_, tcfg_).dump(2) + "\n");
    const std::string labels = join_path(f_.data_dir, "labels.txt");
    if (file_exists(labels)) atomic_write_file(join_path(f_.model_dir, "labels.txt"), read_file(labels));
  }

  void log_start(const engine::TrainerOptions& o) override {
    spdlog::info("multilabel: {} ({} classes) at {}px, {}, {} examples/epoch, {} steps, {} threads", tcfg_.model.arch,
                 tcfg_.model.num_classes, tcfg_.image_size, f_.data_format, num_examples_, o.total_steps,
                 runtime().threads);
  }

  void finish(const train::RunStats& stats) override {
    if (stats.eval.count("mAP"))
      spdlog::info("final: mAP {:.4f}, accuracy {:.4f}, precision {:.4f}, recall {:.4f}, F1 {:.4f} at step {}",
                   stats.eval.at("mAP"), stats.eval.at("accuracy"), stats.eval.at("precision"), stats.eval.at("recall"),
                   stats.eval.at("f1"), stats.global_step);
    spdlog::info("model_dir: {}", f_.model_dir);
  }

  MultiLabelFlags f_;
  MultiLabelConfig tcfg_;
  std::unique_ptr<MultiLabelTask> task_;
  std::string train_files_;
  int64_t num_examples_ = 0;
};

void run_train(MultiLabelFlags f) { MultiLabelTrainer(std::move(f)).run(); }

// What eval, export and predict need of this task (tasks/image_commands.h).
struct MultiLabelVerbs {
  using Flags = MultiLabelFlags;
  using Task = MultiLabelTask;
  static constexpr const char* kProbabilities = "sigmoid";  // the exported graphs' "probs"
  static void inference_defaults(Flags& f, bool predict) {
    f.data_dir.clear();  // the training run's, from config.json
    f.batch_size = predict ? 32 : 64;
  }
  static void load(const std::string& model_dir, Flags* f, const FlagGiven& given) {
    load_model_config(model_dir, f, given);
  }
  static MultiLabelConfig config(const Flags& f) { return task_config(f); }
  static std::string validation_files(const Flags& f) { return shard_pattern(f.data_dir, false); }
  static void add_inference_flags(FlagSet* c, Flags& f, bool predict) {
    c->add_option(
        "--threshold", f.threshold,
        predict ? "Probability threshold (default: the model's)" : "Probability threshold for precision / recall / F1");
  }
  static json eval_report(const std::map<std::string, double>& metrics) { return metrics; }
  static void print_predictions(const Task& task, const std::vector<std::string>& files, const torch::Tensor& logits,
                                const std::vector<std::string>& names, const Flags& f, bool json_out) {
    const auto predictions = task.predict(logits, f.threshold);
    for (size_t i = 0; i < files.size(); ++i) {
      json labels = json::array();
      std::string line = files[i] + ":";
      for (const auto& p : predictions[i]) {
        const std::string name = label_name(names, p.class_id);
        labels.push_back({{"label", name}, {"class_id", p.class_id}, {"probability", p.probability}});
        line += fmt::format(" {} ({:.3f})", name, p.probability);
      }
      if (labels.empty()) line += " (no label above " + fmt::format("{}", f.threshold) + ")";
      if (json_out) std::cout << json{{"file", files[i]}, {"labels", labels}}.dump() << "\n";
      else std::cout << line << "\n";
    }
  }
};

}  // namespace

TaskCommands multilabel_commands() {
  TaskCommands task{"multilabel", "Multi-label tagging: the Tencent ML-Images trainer", {}};
  task.verbs.push_back(
      make_verb<MultiLabelFlags>("train", "Train (and evaluate) a multi-label ResNet", add_train_flags, run_train));
  add_image_inference_verbs<MultiLabelVerbs>(
      &task, "Write the model for serving: ONNX (opset 10), logits (apply a sigmoid) or feature vector",
      "Labels above the threshold for images (files, globs or directories)");
  return task;
}

}  // namespace orchard::tasks
