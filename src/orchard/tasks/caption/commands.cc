// orchard caption train|eval|run: im2txt (Show and Tell). train is im2txt's train.py and the
// TPU trainer of the seed (its flags, ModelConfig and TrainingConfig as flags); eval is
// evaluate.py (perplexity of each new checkpoint) plus BLEU / CIDEr-D of beam-search captions;
// run is run_inference.py.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/engine/loop.h"
#include "orchard/models/inception_v3.h"
#include "orchard/tasks/caption/captioning.h"
#include "orchard/tasks/command_support.h"
#include "orchard/tasks/registry.h"
#include "orchard/tasks/train_driver.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/optimizers.h"
#include "orchard/train/runtime.h"

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace orchard::tasks {
namespace {

struct CaptionFlags : RuntimeFlags {
  // train.py / the seed's TPU trainer
  std::string input_file_pattern;
  std::string train_dir;
  std::string inception_checkpoint_file;
  // The encoder pools as TF-Slim's (its weights come from a TensorFlow checkpoint); in
  // config.json as "inception_pooling": "tf".
  bool inception_tf_avg_pool = false;
  bool train_inception = false;
  int64_t train_batch_size = 1024;  // the seed's default (im2txt's ModelConfig.batch_size: 32)
  int64_t iterations_per_loop = 100;
  // --train_steps (the seed's default; im2txt's --number_of_steps: 1000000), --log_every_n_steps,
  // --clip_gradients, --max_checkpoints_to_keep, --save_checkpoints_steps (0: by time only),
  // --save_checkpoints_secs
  engine::TrainerOptions run = [] {
    engine::TrainerOptions o;
    o.total_steps = 10000;
    o.clip_gradient_norm = 5.0;
    o.enable_checkpoints = true;
    o.checkpoint_every_secs = 600;
    o.max_to_keep = 5;
    return o;
  }();
  std::string vocab_file;  // default: word_counts.txt beside the input files
  // ModelConfig
  int image_size = 299;
  int resize_size = 0;  // 0: 346 scaled by image_size / 299
  int64_t embedding_size = 512;
  int64_t num_lstm_units = 512;
  double lstm_dropout_keep_prob = 0.7;
  double initializer_scale = 0.08;
  double depth_multiplier = 1.0;
  std::string init = "default";
  double batch_norm_decay = 0.9997;
  double inception_weight_decay = 4e-5;
  int64_t max_caption_tokens = 64;
  // TrainingConfig
  int64_t num_examples_per_epoch = 0;  // 0: count the training records (im2txt: 586363, COCO)
  std::string optimizer = "SGD";
  double initial_learning_rate = 2.0;
  double learning_rate_decay_factor = 0.5;
  double num_epochs_per_decay = 8.0;
  double train_inception_learning_rate = 0.0005;
  double momentum = 0.9;  // --optimizer Momentum
  // evaluation during training (im2txt evaluates in a separate job: `orchard caption eval`)
  std::string eval_file_pattern;
  int64_t num_eval_examples = 10132;
  int64_t eval_batch_size = 32;
  int beam_size = 3;
  int max_caption_length = 20;
  double length_normalization_factor = 0.0;
  bool eval_captions = true;
  // Orchard additions
  bool clean = false;
  bool distort = true;
  int num_preprocess_threads = 0;
  uint64_t seed = 0;
  std::string stats_file;
  bool skip_corrupt_records = false;
  int64_t shuffle_buffer = 2300 * 2;  // im2txt: values_per_input_shard * input_queue_capacity_factor
};

void add_model_flags(FlagSet* c, CaptionFlags& f) {
  c->add_option("--image_size", f.image_size, "Encoder input size (Inception-v3: 299; at least 75)")
      ->capture_default_str();
  c->add_option("--resize_size", f.resize_size,
                "Images are resized to this before cropping (0: 346 * image_size / 299)");
  c->add_option("--embedding_size", f.embedding_size, "Image and word embedding size")->capture_default_str();
  c->add_option("--num_lstm_units", f.num_lstm_units, "LSTM units")->capture_default_str();
  c->add_option("--lstm_dropout_keep_prob", f.lstm_dropout_keep_prob, "Keep probability of the LSTM dropout")
      ->capture_default_str();
  c->add_option("--initializer_scale", f.initializer_scale, "Uniform init range of the non-encoder variables")
      ->capture_default_str();
  c->add_option("--batch_norm_decay", f.batch_norm_decay, "Encoder batch norm moving-average decay")
      ->capture_default_str();
  c->add_option("--depth_multiplier", f.depth_multiplier,
                "Encoder channels x this (TF-Slim's inception_v3 depth_multiplier, at least 16 each); ImageNet "
                "weights need 1")
      ->capture_default_str();
  c->add_option("--max_caption_tokens", f.max_caption_tokens,
                "Longest caption read from records, <S> and </S> included (longer ones are cut)")
      ->capture_default_str();
}

void add_beam_flags(FlagSet* c, CaptionFlags& f) {
  c->add_option("--beam_size", f.beam_size, "Beam width")->capture_default_str();
  c->add_option("--max_caption_length", f.max_caption_length, "Longest generated caption (words with <S> and </S>)")
      ->capture_default_str();
  c->add_option("--length_normalization_factor", f.length_normalization_factor,
                "Complete captions score logprob / length^factor (0: plain logprob)")
      ->capture_default_str();
}

void add_common_flags(FlagSet* c, CaptionFlags& f) {
  c->add_option("--vocab_file", f.vocab_file,
                "word_counts.txt (default: beside the input files, or the train_dir's copy)");
  add_host_flags(c, f);
  c->add_option("--num_preprocess_threads", f.num_preprocess_threads, "Input pipeline threads (0: all cores)");
  c->add_option("--stats_file", f.stats_file, "Write the run's stats (or the metrics) as JSON here");
  c->add_option("--num_eval_examples", f.num_eval_examples, "Examples per evaluation (0: all)")->capture_default_str();
  c->add_option("--eval_batch_size", f.eval_batch_size, "Examples per evaluation batch")->capture_default_str();
  c->add_option("--eval_captions", f.eval_captions, "Beam-search captions and BLEU / CIDEr-D in evaluation")
      ->capture_default_str();
  add_beam_flags(c, f);
}

void add_train_flags(FlagSet* c, CaptionFlags& f) {
  c->add_option("--input_file_pattern", f.input_file_pattern, "Training SequenceExample shards (comma list or globs)")
      ->required();
  c->add_option("--train_dir,--model_dir", f.train_dir, "Checkpoints, summaries and config")->required();
  c->add_flag("--clean", f.clean, "Remove Orchard's files from train_dir first");
  c->add_option("--inception_checkpoint_file", f.inception_checkpoint_file,
                "Initialise the encoder from this checkpoint (Inception-v3 variables, torchvision names, with or "
                "without the 'inception.' prefix) when training starts");
  c->add_flag("--train_inception", f.train_inception,
              "Fine-tune the encoder too (learning rate --train_inception_learning_rate, constant)");
  c->add_option("--train_steps,--number_of_steps", f.run.total_steps, "Steps to train")->capture_default_str();
  c->add_option("--train_batch_size,--batch_size", f.train_batch_size, "Global batch size")->capture_default_str();
  c->add_option("--iterations_per_loop", f.iterations_per_loop, "Steps per host loop (summaries)")
      ->capture_default_str();
  c->add_option("--log_every_n_steps", f.run.log_steps, "Log the loss every N steps")->capture_default_str();
  c->add_option("--num_examples_per_epoch", f.num_examples_per_epoch,
                "Examples per epoch for the learning-rate decay (0: count the training records)");
  c->add_option("--optimizer", f.optimizer, "SGD | Momentum | Adam | Adagrad | RMSProp (im2txt's names)")
      ->capture_default_str();
  c->add_option("--initial_learning_rate", f.initial_learning_rate, "Learning rate with the encoder frozen")
      ->capture_default_str();
  c->add_option("--learning_rate_decay_factor", f.learning_rate_decay_factor, "Staircase decay factor (0: none)")
      ->capture_default_str();
  c->add_option("--num_epochs_per_decay", f.num_epochs_per_decay, "Epochs between decays")->capture_default_str();
  c->add_option("--train_inception_learning_rate", f.train_inception_learning_rate,
                "Learning rate with --train_inception")
      ->capture_default_str();
  c->add_option("--clip_gradients", f.run.clip_gradient_norm, "Clip the global gradient norm to this (0: no clipping)")
      ->capture_default_str();
  c->add_option("--momentum", f.momentum, "Momentum of --optimizer Momentum")->capture_default_str();
  c->add_option("--inception_weight_decay", f.inception_weight_decay,
                "L2 weight of the encoder's weights when fine-tuned")
      ->capture_default_str();
  c->add_option("--max_checkpoints_to_keep", f.run.max_to_keep, "Checkpoints to keep")->capture_default_str();
  c->add_option("--save_checkpoints_steps", f.run.checkpoint_every, "Checkpoint every N steps (0: by time only)")
      ->capture_default_str();
  c->add_option("--save_checkpoints_secs", f.run.checkpoint_every_secs, "Checkpoint every this many seconds (0: never)")
      ->capture_default_str();
  c->add_option("--eval_file_pattern", f.eval_file_pattern,
                "Evaluate on these shards after each checkpoint (default: no evaluation during training)");
  c->add_option("--distort", f.distort, "Colour distortion in training")->capture_default_str();
  c->add_option("--shuffle_buffer", f.shuffle_buffer, "Shuffle buffer over the training records")
      ->capture_default_str();
  c->add_option("--seed", f.seed, "Random seed (data order, augmentation, init)")->capture_default_str();
  c->add_option("--init", f.init,
                "Encoder initialisation without --inception_checkpoint_file: default (He) | torchvision "
                "(trunc_normal(0.1) convolutions, as torchvision and TF-Slim; use with --train_inception)")
      ->capture_default_str();
  add_runtime_flags(c, f);
  c->add_flag("--skip_corrupt_records", f.skip_corrupt_records,
              "Skip records with bad CRCs and the rest of a truncated shard (counted in stats)");
  add_model_flags(c, f);
  add_common_flags(c, f);
}

std::string default_vocab_file(const std::string& pattern) {
  const auto files = expand_file_pattern(pattern);
  if (files.empty()) throw Error("no files match '" + pattern + "'");
  return join_path(parent_path(files.front()), "word_counts.txt");
}

tasks::CaptionConfig task_config(const CaptionFlags& f, const data::Vocabulary& vocab) {
  if (f.image_size < 75) throw Error("--image_size must be at least 75 (Inception-v3's smallest input)");
  if (f.embedding_size < 1 || f.num_lstm_units < 1)
    throw Error("--embedding_size and --num_lstm_units must be positive");
  if (f.lstm_dropout_keep_prob <= 0 || f.lstm_dropout_keep_prob > 1)
    throw Error("--lstm_dropout_keep_prob must be in (0, 1]");
  if (f.batch_norm_decay < 0 || f.batch_norm_decay >= 1) throw Error("--batch_norm_decay must be in [0, 1)");
  if (!(f.depth_multiplier > 0 && f.depth_multiplier <= 1)) throw Error("--depth_multiplier must be in (0, 1]");
  if (f.beam_size < 1) throw Error("--beam_size must be at least 1");
  if (f.max_caption_length < 2) throw Error("--max_caption_length must be at least 2");
  tasks::CaptionConfig c;
  c.model.vocab_size = vocab.size();
  c.model.embedding_size = f.embedding_size;
  c.model.num_lstm_units = f.num_lstm_units;
  c.model.lstm_dropout_keep_prob = f.lstm_dropout_keep_prob;
  c.model.initializer_scale = f.initializer_scale;
  c.model.batch_norm_decay = f.batch_norm_decay;
  c.model.inception_depth_multiplier = f.depth_multiplier;
  c.model.inception_torchvision_init = torchvision_init_flag(f.init);
  c.model.inception_tf_avg_pool = f.inception_tf_avg_pool;
  c.image.image_size = f.image_size;
  c.image.resize_size = f.resize_size > 0 ? f.resize_size : static_cast<int>(std::lround(346.0 * f.image_size / 299.0));
  c.image.distort = f.distort;
  c.image.max_image_pixels = f.max_image_pixels;
  c.train_inception = f.train_inception;
  c.inception_weight_decay = f.inception_weight_decay;
  c.max_caption_tokens = f.max_caption_tokens;
  c.beam.beam_size = f.beam_size;
  c.beam.max_caption_length = f.max_caption_length;
  c.beam.length_normalization_factor = f.length_normalization_factor;
  c.eval_captions = f.eval_captions;
  c.start_id = vocab.start_id();
  c.end_id = vocab.end_id();
  return c;
}

json config_json(const CaptionFlags& f, const tasks::CaptionConfig& c) {
  return {{"task", "caption"},
          {"model", "show_and_tell"},
          {"vocab_size", c.model.vocab_size},
          {"image_size", c.image.image_size},
          {"resize_size", c.image.resize_size},
          {"embedding_size", c.model.embedding_size},
          {"num_lstm_units", c.model.num_lstm_units},
          {"lstm_dropout_keep_prob", c.model.lstm_dropout_keep_prob},
          {"initializer_scale", c.model.initializer_scale},
          {"batch_norm_decay", c.model.batch_norm_decay},
          {"depth_multiplier", c.model.inception_depth_multiplier},
          {"inception_pooling", c.model.inception_tf_avg_pool ? "tf" : "torchvision"},
          {"init", f.init},
          {"max_caption_tokens", c.max_caption_tokens},
          {"train_inception", c.train_inception},
          {"input_file_pattern", f.input_file_pattern},
          {"train_batch_size", f.train_batch_size},
          {"optimizer", f.optimizer},
          {"initial_learning_rate", f.initial_learning_rate},
          {"train_inception_learning_rate", f.train_inception_learning_rate},
          {"train_steps", f.run.total_steps},
          {"seed", f.seed}};
}

// The model flags of a train_dir's config.json (flags given explicitly stay as they are only for
// inference-time settings: beam search, batch sizes).
void load_model_config(const std::string& train_dir, CaptionFlags* f) {
  const json j = read_model_config(train_dir, "caption");
  f->image_size = j.at("image_size").get<int>();
  f->resize_size = j.value("resize_size", 0);
  f->embedding_size = j.at("embedding_size").get<int64_t>();
  f->num_lstm_units = j.at("num_lstm_units").get<int64_t>();
  f->max_caption_tokens = j.value("max_caption_tokens", int64_t{64});
  f->batch_norm_decay = j.value("batch_norm_decay", 0.9997);
  f->depth_multiplier = j.value("depth_multiplier", 1.0);
  f->inception_tf_avg_pool = j.value("inception_pooling", std::string("torchvision")) == "tf";
}

data::Vocabulary load_vocab(const std::string& path, const std::string& flag_hint) {
  if (!file_exists(path)) throw Error("vocabulary " + path + " not found (" + flag_hint + ")");
  return data::Vocabulary::load(path);
}

// im2txt's init_fn: the encoder from an Inception-v3 checkpoint (torchvision names, as
// `orchard import-weights` or a classifier writes them, or another caption model's).
void load_inception(tasks::CaptionTask& task, const std::string& checkpoint) {
  const std::string prefix = caption::kEncoderPrefix;
  auto not_encoder = [prefix](const std::string& name) { return name.rfind(prefix, 0) != 0; };
  if (tf::is_tensorflow_checkpoint(checkpoint)) {
    // TF-Slim's inception_v3.ckpt (V1), or an im2txt model's checkpoint: "InceptionV3/...".
    const models::TfNameMap map = [prefix](const std::string& name) -> std::optional<models::TfName> {
      if (name.rfind(prefix, 0) != 0) return std::nullopt;
      return models::inception_v3_tf_name(name.substr(prefix.size()));
    };
    const auto r = train::restore_part(checkpoint, "--inception_checkpoint_file", *task.module(), not_encoder, {}, map);
    spdlog::info(
        "encoder initialised from TensorFlow checkpoint {} ({} Inception-v3 variables; {} of its variables "
        "not used)",
        r.path, r.restored.size(), r.unused.size());
    return;
  }
  std::string first_error;
  // An Inception-v3 checkpoint names the encoder's variables without the prefix; another
  // caption model's with it.
  for (bool strip : {true, false}) {
    std::function<std::string(const std::string&)> source_name;
    if (strip) source_name = [prefix](const std::string& name) { return name.substr(prefix.size()); };
    try {
      const auto r =
          train::restore_part(checkpoint, "--inception_checkpoint_file", *task.module(), not_encoder, source_name);
      spdlog::info("encoder initialised from {} ({} Inception-v3 variables)", r.path, r.restored.size());
      return;
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
      if (std::string(e.what()).rfind("--inception_checkpoint_file", 0) == 0) throw;  // no such file
    }
  }
  throw Error("--inception_checkpoint_file " + checkpoint + " does not hold this encoder's Inception-v3 variables " +
              "(--depth_multiplier " + fmt::format("{:g}", task.config().model.inception_depth_multiplier) +
              " must be the checkpoint's): " + first_error);
}

data::PipelineOptions eval_options(const CaptionFlags& f, const std::string& pattern) {
  data::PipelineOptions o;
  o.file_pattern = pattern;
  o.training = false;
  o.num_epochs = 1;
  o.batch_size = f.eval_batch_size;
  o.num_threads = f.num_preprocess_threads;
  return o;
}

// `caption train`: the shared recipe (tasks/train_driver.h) with im2txt's parts.
class CaptionTrainer : public TrainDriver {
 public:
  explicit CaptionTrainer(CaptionFlags f) : f_(std::move(f)) {}

 private:
  Setup setup() override {
    if (f_.train_batch_size < 1) throw Error("--train_batch_size must be positive");
    if (f_.run.total_steps < 1) throw Error("--train_steps must be positive");
    if (f_.run.log_steps < 1 || f_.iterations_per_loop < 1)
      throw Error("--log_every_n_steps and --iterations_per_loop must be positive");
    return {&f_, f_.train_dir, f_.train_batch_size, f_.clean, f_.seed, f_.run, f_.stats_file};
  }

  void prepare() override {
    if (f_.vocab_file.empty()) f_.vocab_file = default_vocab_file(f_.input_file_pattern);
    const auto vocab = load_vocab(f_.vocab_file, "--vocab_file");
    vocab_size_ = static_cast<int64_t>(vocab.size());
    // TF-Slim's Inception-v3 weights: the encoder pools as TF-Slim's did (also when a run
    // started from them resumes without the flag).
    const std::string saved = join_path(f_.train_dir, "config.json");
    f_.inception_tf_avg_pool =
        (!f_.inception_checkpoint_file.empty() && tf::is_tensorflow_checkpoint(f_.inception_checkpoint_file)) ||
        (file_exists(saved) && json::parse(read_file(saved)).value("inception_pooling", std::string()) == "tf");
    tcfg_ = task_config(f_, vocab);

    // The data is checked before a model is built.
    num_records_ = count_examples(f_.input_file_pattern, f_.skip_corrupt_records);
    if (num_records_ < f_.train_batch_size)
      throw Error("--train_batch_size " + std::to_string(f_.train_batch_size) + " is larger than the " +
                  std::to_string(num_records_) + " training records");
    if (!f_.eval_file_pattern.empty())
      check_evaluation_data(f_.eval_file_pattern, "an empty --eval_file_pattern", f_.skip_corrupt_records);
  }

  Task& build_task() override {
    task_ = std::make_unique<CaptionTask>(tcfg_);
    return *task_;
  }

  void configure(engine::TrainerOptions& o) override {
    o.steps_per_epoch = std::max<int64_t>(1, num_records_ / f_.train_batch_size);
    o.steps_per_loop = engine::steps_per_loop_for({f_.iterations_per_loop, o.log_steps, o.checkpoint_every});
    o.eval_on_checkpoint = has_eval();
  }

  // im2txt: with --train_inception a constant 0.0005; otherwise 2.0 decayed by 0.5 every 8
  // epochs (staircase), the epoch being num_examples_per_epoch / batch_size steps.
  Optimization build_optimizer() override {
    const int64_t per_epoch = f_.num_examples_per_epoch > 0 ? f_.num_examples_per_epoch : num_records_;
    train::Schedule schedule = train::constant_learning_rate(f_.train_inception_learning_rate);
    if (!f_.train_inception) {
      train::ExponentialDecay decay;  // tf.train.exponential_decay(staircase=True)
      decay.initial_learning_rate = f_.initial_learning_rate;
      decay.decay_factor = f_.learning_rate_decay_factor;
      decay.decay_steps = static_cast<int64_t>(static_cast<double>(per_epoch) /
                                               static_cast<double>(f_.train_batch_size) * f_.num_epochs_per_decay);
      decay.staircase = true;
      schedule = decay.decay_factor > 0 && decay.decay_steps > 0
                     ? train::exponential_decay(decay)
                     : train::constant_learning_rate(f_.initial_learning_rate);
    }
    return {train::make_tf_optimizer(f_.optimizer, task_->trainable_parameters(), f_.momentum), schedule};
  }

  TrainInputs build_inputs(const engine::TrainerOptions&) override {
    TrainInputs in;
    in.train = training_input(f_.input_file_pattern, f_.train_batch_size, f_.seed, f_.num_preprocess_threads,
                              f_.skip_corrupt_records, runtime());
    in.train.shuffle_buffer = f_.shuffle_buffer;
    in.eval = eval_input_options(in.train, has_eval() ? f_.eval_file_pattern : f_.input_file_pattern);
    const int64_t replicas = runtime().dist ? runtime().dist->world_size() : 1;
    in.eval.batch_size = std::max<int64_t>(1, f_.eval_batch_size / replicas);
    in.skip_eval = !has_eval();
    in.eval_limit = f_.num_eval_examples > 0 ? f_.num_eval_examples / replicas : 0;
    return in;
  }

  void fine_tune() override {
    if (!f_.inception_checkpoint_file.empty()) load_inception(*task_, f_.inception_checkpoint_file);
    else spdlog::warn("no --inception_checkpoint_file: the encoder starts from random weights");
  }

  void write_run_files() override {
    atomic_write_file(join_path(f_.train_dir, "config.json"), config_json(f_, tcfg_).dump(2) + "\n");
    atomic_write_file(join_path(f_.train_dir, "word_counts.txt"), read_file(f_.vocab_file));
  }

  void log_start(const engine::TrainerOptions& o) override {
    spdlog::info(
        "caption: Show and Tell at {}px, vocabulary {} words, encoder {}, {} records ({} steps/epoch), {} "
        "steps, {} threads",
        tcfg_.image.image_size, vocab_size_, f_.train_inception ? "fine-tuned" : "frozen", num_records_,
        o.steps_per_epoch, o.total_steps, runtime().threads);
  }

  void finish(const train::RunStats& stats) override {
    if (stats.eval.count("Perplexity"))
      spdlog::info("final: perplexity {:.3f}, BLEU-4 {:.4f}, CIDEr-D {:.4f} at step {}", stats.eval.at("Perplexity"),
                   stats.eval.count("Bleu_4") ? stats.eval.at("Bleu_4") : 0.0,
                   stats.eval.count("CIDEr-D") ? stats.eval.at("CIDEr-D") : 0.0, stats.global_step);
    spdlog::info("train_dir: {}", f_.train_dir);
  }

  bool has_eval() const { return !f_.eval_file_pattern.empty(); }

  CaptionFlags f_;
  CaptionConfig tcfg_;
  std::unique_ptr<CaptionTask> task_;
  int64_t vocab_size_ = 0;
  int64_t num_records_ = 0;
};

void run_train(CaptionFlags f) { CaptionTrainer(std::move(f)).run(); }

struct EvalFlags {
  CaptionFlags f;
  // --checkpoint_dir, --run_once, --eval_interval_secs (evaluate.py: 600), --min_global_step
  // (evaluate.py: 5000), --eval_timeout, --max_eval_retries
  engine::CheckpointWatch watch = [] {
    engine::CheckpointWatch w;
    w.poll_secs = 600;
    w.min_global_step = 5000;
    return w;
  }();
};

void run_eval(EvalFlags e) {
  auto& f = e.f;
  train::configure_threads(f.num_threads);
  load_model_config(e.watch.checkpoint_dir, &f);
  if (f.vocab_file.empty()) f.vocab_file = join_path(e.watch.checkpoint_dir, "word_counts.txt");
  const auto vocab = load_vocab(f.vocab_file, "--vocab_file");
  tasks::CaptionTask task(task_config(f, vocab));
  const auto input = eval_options(f, f.input_file_pattern);
  count_examples(f.input_file_pattern);  // a clear error for a pattern without files

  engine::CheckpointWatch watch = e.watch;
  const json config = read_model_config(e.watch.checkpoint_dir, "caption");
  watch.final_step = config.value("train_steps", int64_t{0});
  spdlog::info("caption eval: watching {} (final step {}), events into {}/eval", watch.checkpoint_dir, watch.final_step,
               watch.checkpoint_dir);
  const auto [last_step, metrics] =
      evaluate_new_checkpoints(task, watch, e.watch.checkpoint_dir, input, f.num_eval_examples, /*summaries=*/true);
  json j = metrics;
  j["global_step"] = last_step;
  if (!f.stats_file.empty()) atomic_write_file(f.stats_file, j.dump(2) + "\n");
  if (!metrics.empty()) std::cout << j.dump() << std::endl;
}

struct RunFlags {
  CaptionFlags f;
  std::string checkpoint_path;
  std::string input_files;          // run: comma-separated
  std::vector<std::string> inputs;  // predict: positional
  std::string checkpoint;           // predict: a checkpoint file instead of the latest
  bool json_out = false;
  int64_t batch_size = 16;
};

void add_inference_flags(FlagSet* c, RunFlags& r) {
  c->add_option("--vocab_file", r.f.vocab_file, "word_counts.txt (default: the train_dir's)");
  c->add_flag("--json", r.json_out, "One JSON line per image");
  c->add_option("--batch_size", r.batch_size, "Images per encoder pass")->capture_default_str();
  add_host_flags(c, r.f);
  add_beam_flags(c, r.f);
}

void run_inference(RunFlags r) {
  auto& f = r.f;
  train::configure_threads(f.num_threads);
  // run: --checkpoint_path is a train_dir or one checkpoint file in it; predict: --model_dir is the
  // train_dir and --checkpoint an optional file.
  if (r.checkpoint.empty() && !dir_exists(r.checkpoint_path)) {
    r.checkpoint = r.checkpoint_path;
    r.checkpoint_path = parent_path(r.checkpoint_path);
  }
  const std::string train_dir = r.checkpoint_path;
  load_model_config(train_dir, &f);
  if (f.vocab_file.empty()) f.vocab_file = join_path(train_dir, "word_counts.txt");
  const auto vocab = load_vocab(f.vocab_file, "--vocab_file");
  tasks::CaptionTask task(task_config(f, vocab));
  engine::restore_for_inference(task, train_dir, r.checkpoint);
  std::vector<std::string> inputs = r.inputs;
  for (size_t start = 0; start < r.input_files.size();) {
    const size_t comma = r.input_files.find(',', start);
    const std::string part =
        r.input_files.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) inputs.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const auto image_options = task.config().image;
  PrepareImage prepare = [image_options](const std::string& encoded, const std::string& file, float* out) {
    std::mt19937_64 unused;
    data::preprocess_caption_image(encoded, image_options, /*training=*/false, unused, out, file);
  };
  predict_images(task, prepare, inputs, r.batch_size,
                 [&](const std::vector<std::string>& files, const at::Tensor& embeddings) {
                   const auto captions = task.generate_from_embeddings(embeddings);
                   for (size_t i = 0; i < files.size(); ++i) {
                     json list = json::array();
                     if (!r.json_out) std::cout << "Captions for image " << base_name(files[i]) << ":\n";
                     for (size_t k = 0; k < captions[i].size(); ++k) {
                       const auto& c = captions[i][k];
                       const std::string sentence = vocab.sentence(c.words);
                       const double p = std::exp(c.logprob);
                       if (r.json_out)
                         list.push_back({{"caption", sentence}, {"probability", p}, {"logprob", c.logprob}});
                       else std::cout << fmt::format("  {}) {} (p={:.6f})\n", k, sentence, p);
                     }
                     if (r.json_out) std::cout << json{{"file", files[i]}, {"captions", list}}.dump() << "\n";
                   }
                 });
  std::cout.flush();
}

}  // namespace

TaskCommands caption_commands() {
  TaskCommands task{"caption", "Image captioning: im2txt's Show and Tell", {}};
  task.verbs.push_back(
      make_verb<CaptionFlags>("train", "Train Show and Tell (encoder frozen, or fine-tuned with --train_inception)",
                              add_train_flags, run_train));
  task.verbs.push_back(
      {"eval", "Perplexity, BLEU and CIDEr-D of each new checkpoint (evaluate.py)", [](FlagSet* c) {
         auto e = std::make_shared<EvalFlags>();
         c->add_option("--checkpoint_dir", e->watch.checkpoint_dir, "The train_dir to watch")->required();
         c->add_option("--input_file_pattern", e->f.input_file_pattern, "Evaluation SequenceExample shards")
             ->required();
         c->add_flag("--run_once", e->watch.run_once, "Evaluate the latest checkpoint once and exit");
         c->add_option("--eval_interval_secs", e->watch.poll_secs, "Seconds between looks for a new checkpoint")
             ->capture_default_str();
         c->add_option("--min_global_step", e->watch.min_global_step, "Do not evaluate checkpoints before this step")
             ->capture_default_str();
         c->add_option("--eval_timeout", e->watch.timeout_secs, "Stop after this many seconds without a new checkpoint")
             ->capture_default_str();
         c->add_option("--max_eval_retries", e->watch.max_eval_retries,
                       "Retries of a failed evaluation (negative: always)")
             ->capture_default_str();
         add_common_flags(c, e->f);
         return [e] { run_eval(*e); };
       }});
  task.verbs.push_back({"run", "Captions for images with beam search (run_inference.py)", [](FlagSet* c) {
                          auto r = std::make_shared<RunFlags>();
                          c->add_option("--checkpoint_path", r->checkpoint_path,
                                        "A train_dir (its latest checkpoint) or a checkpoint file")
                              ->required();
                          c->add_option("--input_files", r->input_files,
                                        "Images: comma-separated files, globs or directories")
                              ->required();
                          add_inference_flags(c, *r);
                          return [r] { run_inference(*r); };
                        }});
  // The same with the other tasks' predict interface: --model_dir and positional inputs.
  task.verbs.push_back({"predict", "Beam-search captions for images (files, globs or directories)", [](FlagSet* c) {
                          auto r = std::make_shared<RunFlags>();
                          c->add_option("--model_dir", r->checkpoint_path, "The train_dir")->required();
                          c->add_option("--checkpoint", r->checkpoint, "A checkpoint file (default: the latest)");
                          c->add_option("inputs", r->inputs, "Images, globs or directories")->required();
                          add_inference_flags(c, *r);
                          return [r] { run_inference(*r); };
                        }});
  return task;
}

}  // namespace orchard::tasks
