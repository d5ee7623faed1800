// The TensorFlow tools' command lines as their users type them (issue: drop-in for the TF
// tools): model_tpu_main's and the Model Garden's --mode, their other flags, export_inference_graph's
// flags, a truncated shard under --skip_corrupt_records, a batch larger than the data set,
// progress and time-based checkpoints of slow steps, and messages that must not mislead.
// Cheap runs: the shapes set at 96x96, two to six steps.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/proto/tensorflow/graph.pb.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using test::TempDir;

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

// The checkpoints directly in `dir` (not those of its export/ folders), by name.
std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : stdfs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && f.path().extension() == ".pt") out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class DropIn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    root_ = new TempDir();
    data_ = root_->file("shapes");
    auto r =
        run({"data", "shapes", "--task", "detection", "--out_dir", data_, "--num_train", "16", "--num_validation", "4"},
            *root_);
    ASSERT_EQ(r.rc, 0) << r.err;
    // Batch 8 at 96x96: two steps take seconds.
    text_ = replaced(read_file((stdfs::path(data_) / "pipeline.config").string()), "batch_size: 32", "batch_size: 8");
    config_ = root_->file("shapes.config");
    atomic_write_file(config_, text_);
  }
  static void TearDownTestSuite() { delete root_; }

  static std::string write_config(const std::string& name, const std::string& text) {
    const std::string path = root_->file(name);
    atomic_write_file(path, text);
    return path;
  }

  static RunResult detect_train(const std::string& model_dir, std::vector<std::string> extra,
                                const std::string& config = "") {
    std::vector<std::string> args = {
        "detect",      "train",   "--pipeline_config_path", config.empty() ? config_ : config,
        "--model_dir", model_dir, "--num_train_steps",      "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, *root_);
  }

  static TempDir* root_;
  static std::string data_, text_, config_;
};
TempDir* DropIn::root_ = nullptr;
std::string DropIn::data_, DropIn::text_, DropIn::config_;

// model_tpu_main's evaluation job (--mode=eval --use_tpu=false beside a TPU training job)
// evaluates model_dir's checkpoints and never trains; --mode=train does not evaluate; anything
// else is refused.
TEST_F(DropIn, ModeEvalEvaluatesTheModelDirAndModeTrainDoesNotEvaluate) {
  const std::string m = root_->file("mode");
  auto r = detect_train(m, {"--mode=train"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(stdfs::exists(stdfs::path(m) / "eval")) << "--mode=train evaluated";
  EXPECT_FALSE(contains(r.err, "DetectionBoxes_Precision/mAP")) << r.err;
  const auto before = checkpoints_in(m);
  ASSERT_EQ(before, std::vector<std::string>{"ckpt-2.pt"});

  r = run({"detect", "train", "--pipeline_config_path", config_, "--model_dir", m, "--num_train_steps", "2",
           "--mode=eval", "--use_tpu=false", "--eval_timeout", "5", "--eval_poll_secs", "0.2"},
          *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "DetectionBoxes_Precision/mAP")) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "--mode eval: evaluating the checkpoints of")) << r.err;
  EXPECT_EQ(checkpoints_in(m), before) << "--mode=eval wrote checkpoints";
  EXPECT_FALSE(files_with((stdfs::path(m) / "eval").string(), "events.out.tfevents").empty());

  r = detect_train(m, {"--mode", "evaluate"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--mode must be train, eval or train_and_eval, not 'evaluate'")) << r.err;
}

// model_tpu_main's flags: --num_shards accepted with its line, --iterations_per_loop is the
// host loop (a checkpoint every 2 steps lands at the end of the 3-step loop), --train_batch_size
// overrides train_config.batch_size, --hparams_overrides load_pretrained=false skips the
// fine_tune_checkpoint; a misspelt flag names the flag meant.
TEST_F(DropIn, ModelTpuMainFlags) {
  const std::string m = root_->file("tpu");
  // A fine_tune_checkpoint that does not exist: load_pretrained=false never reads it.
  const std::string cfg = write_config(
      "finetune.config", replaced(text_, "  num_steps: 1200\n",
                                  "  num_steps: 1200\n  fine_tune_checkpoint: \"/nonexistent/model.ckpt\"\n"));
  auto r = detect_train(m,
                        {"--num_train_steps", "4", "--num_shards", "8", "--iterations_per_loop", "3",
                         "--save_checkpoints_steps", "2", "--log_steps", "100", "--train_batch_size", "4",
                         "--hparams_overrides", "load_pretrained=false", "--skip_eval", "--max_to_keep", "10"},
                        cfg);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--num_shards is a TensorFlow-only flag")) << r.err;
  EXPECT_TRUE(contains(r.err, "--train_batch_size 4 overrides train_config.batch_size 8")) << r.err;
  EXPECT_TRUE(contains(r.err, ", batch 4,")) << r.err;
  EXPECT_TRUE(contains(r.err, "load_pretrained=false")) << r.err;
  EXPECT_EQ(checkpoints_in(m), (std::vector<std::string>{"ckpt-3.pt", "ckpt-4.pt"})) << r.err;
  EXPECT_TRUE(contains(read_file((stdfs::path(m) / "pipeline.config").string()), "batch_size: 4"));

  r = detect_train(root_->file("tpu2"), {"--hparams_overrides", "learning_rate=0.1"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "unknown hyperparameter 'learning_rate'")) << r.err;

  r = detect_train(root_->file("tpu3"), {"--train_batch_sise", "64", "--iterations_per_loop", "8"});
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(
      contains(r.err, "orchard detect train: unknown flag --train_batch_sise (did you mean --train_batch_size?)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "The following arguments were not expected")) << r.err;
  EXPECT_FALSE(stdfs::exists(root_->file("tpu3")));
}

// export_inference_graph.py's command line: --input_type, --pipeline_config_path,
// --trained_checkpoint_prefix (TensorFlow's model.ckpt-N form), --output_directory, --config_override.
TEST_F(DropIn, ExportInferenceGraphFlags) {
  const std::string m = root_->file("export_model");
  auto r = detect_train(m, {"--skip_eval"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // model_main's end-of-training Servo export: export/Servo/<timestamp>/saved_model.pb.
  ASSERT_TRUE(stdfs::is_directory(m + "/export/Servo")) << r.err;
  const auto servo = stdfs::directory_iterator(m + "/export/Servo")->path();
  EXPECT_TRUE(stdfs::exists(servo / "saved_model.pb")) << servo;
  EXPECT_TRUE(stdfs::is_directory(servo / "variables")) << servo;
  const std::string out = root_->file("exported");
  // use_moving_average unset (the proto default, true): a note for training, not for an export.
  const std::string cfg = write_config("no_average.config", replaced(text_, "    use_moving_average: false\n", ""));
  r = run(
      {"detect", "export", "--input_type", "image_tensor", "--pipeline_config_path", cfg, "--trained_checkpoint_prefix",
       m + "/model.ckpt-2", "--output_directory", out, "--config_override", "eval_config { num_examples: 7 }"},
      *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(stdfs::exists(stdfs::path(out) / "ckpt-2.pt")) << r.err;
  EXPECT_TRUE(contains(read_file((stdfs::path(out) / "pipeline.config").string()), "num_examples: 7"));
  // export_inference_graph.py's TensorFlow files (docs/deploy.md; the graph itself is checked in
  // export_cli_test.cc).
  for (const char* name : {"frozen_inference_graph.pb", "saved_model/saved_model.pb", "model.ckpt.index",
                           "model.ckpt.data-00000-of-00001"})
    EXPECT_TRUE(stdfs::exists(stdfs::path(out) / name)) << name << "\n" << r.err;
  tensorflow::SavedModel saved;
  ASSERT_TRUE(saved.ParseFromString(read_file((stdfs::path(out) / "saved_model/saved_model.pb").string())));
  const auto& signature = saved.meta_graphs(0).signature_def().at("serving_default");
  EXPECT_EQ(signature.inputs().at("inputs").name(), "image_tensor:0");
  for (const char* output : {"detection_boxes", "detection_scores", "detection_classes", "num_detections"})
    EXPECT_EQ(signature.outputs().at(output).name(), std::string(output) + ":0");
  EXPECT_FALSE(contains(r.err, "use_moving_average")) << "the training-only note on an export: " << r.err;

  r = run({"detect", "export", "--trained_checkpoint_prefix", m + "/model.ckpt-9", "--output_directory", out}, *root_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "model.ckpt-9: no such checkpoint (looked for")) << r.err;
  r = run({"detect", "export", "--input_type", "tf_example", "--trained_checkpoint_prefix", m + "/model.ckpt-2",
           "--output_directory", out},
          *root_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--input_type tf_example is a TensorFlow graph input")) << r.err;
}

// A truncated shard: without --skip_corrupt_records the error names the file and the flag; with
// it, training counts the records before the damage and runs.
TEST_F(DropIn, SkipCorruptRecordsRescuesTrainingFromATruncatedShard) {
  const std::string data = root_->file("truncated");
  stdfs::create_directories(data);
  for (const auto& f : stdfs::directory_iterator(data_)) stdfs::copy(f.path(), stdfs::path(data) / f.path().filename());
  auto shards = files_with(data, "train-");
  ASSERT_FALSE(shards.empty());
  const std::string shard = shards.back();
  stdfs::resize_file(shard, stdfs::file_size(shard) - 100);
  std::string cfg = text_;
  for (size_t pos; (pos = cfg.find(data_ + "/")) != std::string::npos;) cfg.replace(pos, data_.size(), data);
  cfg = write_config("truncated.config", cfg);

  auto r = detect_train(root_->file("t1"), {"--skip_eval"}, cfg);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, stdfs::path(shard).filename().string())) << r.err;
  EXPECT_TRUE(contains(r.err, "--skip_corrupt_records")) << r.err;
  r = detect_train(root_->file("t2"), {"--skip_eval", "--skip_corrupt_records"}, cfg);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(stdfs::exists(stdfs::path(root_->file("t2")) / "ckpt-2.pt")) << r.err;
}

// The OD API repeats its input before batching: a batch larger than the data set trains (the
// TPU sample configs' batch 64-2048 on a small set), with a warning.
TEST_F(DropIn, ABatchLargerThanTheDataSetRepeatsIt) {
  const std::string m = root_->file("big_batch");
  auto r = detect_train(m, {"--skip_eval", "--train_batch_size", "40"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "the data set is repeated, each batch holds it 2.5 times over")) << r.err;
  EXPECT_TRUE(stdfs::exists(stdfs::path(m) / "ckpt-2.pt"));
}

// Slow steps: a progress line after the first step (not only at --log_steps), and
// --save_checkpoints_secs read after every step, not only at host-loop ends.
TEST_F(DropIn, SlowStepsShowProgressAndGetTimeBasedCheckpoints) {
  const std::string m = root_->file("slow");
  auto r = detect_train(m, {"--num_train_steps", "5", "--log_steps", "100", "--save_checkpoints_steps", "1000",
                            "--save_checkpoints_secs", "0.001", "--max_to_keep", "10", "--skip_eval"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "step 1/5: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "s/step so far")) << r.err;
  // Each step's clock check finds the (tiny) interval passed: a checkpoint after every step.
  EXPECT_EQ(checkpoints_in(m),
            (std::vector<std::string>{"ckpt-1.pt", "ckpt-2.pt", "ckpt-3.pt", "ckpt-4.pt", "ckpt-5.pt"}))
      << r.err;
  // A short run still writes its throughput (the last step has its log line and summary).
  EXPECT_TRUE(contains(r.err, "step 5/5: loss")) << r.err;
}

// An evaluation job with a misspelt --checkpoint_dir waits, gives up, and leaves no folder.
TEST_F(DropIn, EvalJobWithAMisspeltCheckpointDirLeavesNothingBehind) {
  const std::string typo = root_->file("no_such_model_dir");
  auto r = run({"detect", "eval", "--checkpoint_dir", typo, "--pipeline_config_path", config_, "--eval_timeout", "0.5",
                "--eval_poll_secs", "0.1"},
               *root_);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "waiting for the first checkpoint")) << r.err;
  EXPECT_FALSE(stdfs::exists(typo)) << "an empty folder was left behind";
}

TEST_F(DropIn, DetectHelpNamesEveryMetaArchitecture) {
  auto r = run({"detect", "--help"}, *root_);
  EXPECT_EQ(r.rc, 0);
  EXPECT_FALSE(contains(r.out, "model_main (SSD)")) << r.out;
  EXPECT_TRUE(contains(r.out, "Faster R-CNN")) << r.out;
}

// The Model Garden's command line: --mode train / eval for classify, and its GPU-thread and
// metrics flags accepted with their lines.
TEST(DropInClassify, ModeTrainThenModeEvalAndTheModelGardensFlags) {
  ::setenv("OMP_NUM_THREADS", "1", 1);
  TempDir root;
  const std::string data = root.file("fmnist");
  auto r = run({"data", "fashion-mnist", "--out_dir", data, "--limit", "64", "--num_shards", "1",
                "--num_validation_shards", "1"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string m = root.file("m");
  const std::vector<std::string> flags = {"--data_dir",
                                          data,
                                          "--model_dir",
                                          m,
                                          "--model",
                                          "resnet_tiny",
                                          "--image_size",
                                          "28",
                                          "--batch_size",
                                          "16",
                                          "--train_steps",
                                          "4",
                                          "--steps_per_loop",
                                          "2",
                                          "--enable_checkpoint_and_export",
                                          "--enable_tensorboard"};
  std::vector<std::string> args = {"classify",
                                   "train",
                                   "--mode=train",
                                   "--tf_gpu_thread_mode",
                                   "gpu_private",
                                   "--per_gpu_thread_count",
                                   "2",
                                   "--report_accuracy_metrics=false"};
  args.insert(args.end(), flags.begin(), flags.end());
  r = run(args, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--tf_gpu_thread_mode is a TensorFlow-only flag")) << r.err;
  EXPECT_TRUE(contains(r.err, "--report_accuracy_metrics is a TensorFlow-only flag")) << r.err;
  EXPECT_FALSE(contains(r.err, "final: top-1 accuracy")) << "--mode=train evaluated: " << r.err;
  const auto before = checkpoints_in(m);
  ASSERT_FALSE(before.empty()) << r.err;

  args = {"classify", "train", "--mode=eval"};
  args.insert(args.end(), flags.begin(), flags.end());
  r = run(args, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"accuracy_top_1\"")) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\"global_step\":4")) << r.out;
  EXPECT_EQ(checkpoints_in(m), before) << "--mode=eval trained";
  EXPECT_FALSE(files_with((stdfs::path(m) / "eval").string(), "events.out.tfevents").empty());
}

}  // namespace
}  // namespace orchard::cli
