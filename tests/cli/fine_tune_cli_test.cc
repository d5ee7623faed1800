// fine_tune_checkpoint as the OD API restores it, through the binary, on tiny shapes runs: a
// TensorFlow checkpoint whose variables partly have another shape (a use_depthwise model's, as
// the zoo's ssd_mobilenet_v2_coco against the sample config) restores what fits and names the
// rest, --strict_fine_tune refuses it, `checkpoint inspect` says the same with a verdict, a
// missing data file is said, and the sample configs' PATH_TO_BE_CONFIGURED placeholders are named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/files.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using test::TempDir;

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
  return text;
}

class FineTuneCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMP_NUM_THREADS", "1", 1);  // as detect_cli_test: no spinning OpenMP barriers on 2 cores
    root_ = new TempDir();
    data_ = root_->file("shapes");
    auto r =
        run({"data", "shapes", "--task", "detection", "--out_dir", data_, "--num_train", "16", "--num_validation", "4"},
            *root_);
    ASSERT_EQ(r.rc, 0) << r.err;
    text_ = replace(read_file((stdfs::path(data_) / "pipeline.config").string()), "batch_size: 32", "batch_size: 2");
  }
  static void TearDownTestSuite() { delete root_; }

  // detect train for one step of `config_text` (written to name.config) into model_dir `name`.
  RunResult train(const std::string& name, const std::string& config_text, std::vector<std::string> extra = {}) {
    const std::string cfg = root_->file(name + ".config");
    atomic_write_file(cfg, config_text);
    std::vector<std::string> args = {
        "detect", "train",       "--pipeline_config_path",   cfg, "--model_dir", root_->file(name), "--num_train_steps",
        "1",      "--skip_eval", "--num_preprocess_threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args, *root_);
  }
  static std::string with_fine_tune(const std::string& text, const std::string& checkpoint) {
    return replace(
        text, "train_config {\n",
        "train_config {\n  fine_tune_checkpoint: \"" + checkpoint + "\"\n  fine_tune_checkpoint_type: \"detection\"\n");
  }

  static TempDir* root_;
  static std::string data_, text_;
};
TempDir* FineTuneCheckpoint::root_ = nullptr;
std::string FineTuneCheckpoint::data_, FineTuneCheckpoint::text_;

// The zoo's situation in miniature: a model trained with use_depthwise (its four extra layers
// separable: a 1x1 `weights` beside `_depthwise/depthwise_weights`) exported as a TensorFlow
// checkpoint with its pipeline.config beside it, fine-tuned by a config without use_depthwise.
TEST_F(FineTuneCheckpoint, RestoresWhatFitsAndNamesTheRest) {
  const std::string depthwise =
      replace(text_, "      min_depth: 8\n", "      min_depth: 8\n      use_depthwise: true\n");
  auto r = train("depthwise", depthwise);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string zoo = root_->file("zoo");
  r = run({"detect", "export", "--model_dir", root_->file("depthwise"), "--format", "tf", "--out", zoo + "/model.ckpt"},
          *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  atomic_write_file(zoo + "/pipeline.config", depthwise);  // as the zoo's tarballs have it

  r = train("tuned", with_fine_tune(text_, zoo + "/model.ckpt"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(stdfs::exists(root_->file("tuned/ckpt-1.pt")));
  EXPECT_TRUE(contains(r.err, "24 skipped (box and class prediction heads")) << r.err;
  EXPECT_TRUE(contains(r.err, "4 not in the checkpoint with the model's shape, left as initialised")) << r.err;
  // Each one named with both shapes (the model's in TensorFlow's layout), e.g.
  // FeatureExtractor/MobilenetV2/layer_19_2_Conv2d_2_3x3_s2_512/weights [1, 1, 128, 256] vs [3, 3, 128, 256].
  EXPECT_TRUE(contains(r.err, "\n  FeatureExtractor/MobilenetV2/layer_19_2_Conv2d_2_3x3_s2_")) << r.err;
  EXPECT_TRUE(contains(r.err, "/weights is [1, 1, ")) << r.err;
  EXPECT_TRUE(contains(r.err, "in the checkpoint, [3, 3, ")) << r.err;
  EXPECT_TRUE(contains(r.err, "in the model (extras.")) << r.err;
  // Why: the pipeline.config beside it, and the checkpoint's own names.
  EXPECT_TRUE(contains(r.err, "hint: the checkpoint's own " + zoo +
                                  "/pipeline.config builds a model that takes "
                                  "every variable it would restore"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "model.ssd.feature_extractor.use_depthwise (false here, true there)")) << r.err;
  EXPECT_TRUE(contains(r.err, "its model was built with model.ssd.feature_extractor.use_depthwise: true")) << r.err;
  EXPECT_TRUE(contains(r.err, "extras         restored")) << r.err;

  // --strict_fine_tune: an error naming them; nothing trained.
  r = train("strict", with_fine_tune(text_, zoo + "/model.ckpt"), {"--strict_fine_tune"});
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "4 variables fine_tune_checkpoint_type detection restores are not in it with the "
                       "model's shape (--strict_fine_tune"))
      << r.err;
  EXPECT_TRUE(contains(r.err, " | FeatureExtractor/MobilenetV2/layer_19_2_Conv2d_2_3x3_s2_")) << r.err;
  EXPECT_FALSE(stdfs::exists(root_->file("strict/ckpt-1.pt")));

  // inspect says what training does, ending with the verdict.
  r = run({"checkpoint", "inspect", zoo + "/model.ckpt", "--pipeline_config_path", root_->file("tuned.config")},
          *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "re-init    box_heads.0.weight")) << r.out;
  EXPECT_TRUE(contains(r.out, "24 re-initialised (box and class prediction heads (re-initialised))")) << r.out;
  EXPECT_TRUE(contains(r.out, "hint: the checkpoint's own")) << r.out;
  const auto last_line = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last_line.rfind("this checkpoint fine-tunes this config: ", 0), 0u) << r.out;
  EXPECT_TRUE(contains(last_line, " restored, 24 re-initialised, 4 skipped (absent or of another shape")) << last_line;

  // The index without its data file (a partial download): inspect says so without --stats; a
  // restore from it is an error naming the file.
  stdfs::create_directories(root_->file("partial"));
  stdfs::copy_file(zoo + "/model.ckpt.index", root_->file("partial/model.ckpt.index"));
  const std::string shard = root_->file("partial/model.ckpt.data-00000-of-00001");
  r = run({"checkpoint", "inspect", root_->file("partial/model.ckpt")}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "BoxPredictor_0/ClassPredictor/biases (float32)")) << r.out;
  EXPECT_TRUE(contains(r.err, shard + ": the data file is missing")) << r.err;
  r = train("from_partial", with_fine_tune(text_, root_->file("partial/model.ckpt")));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "its data file " + shard + " is missing")) << r.err;
}

// A sample config's PATH_TO_BE_CONFIGURED left in place is named with its field.
TEST_F(FineTuneCheckpoint, PlaceholderPathsAreNamed) {
  auto r = train("placeholder", with_fine_tune(text_, "PATH_TO_BE_CONFIGURED/model.ckpt"));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "train_config.fine_tune_checkpoint is still the sample config's placeholder "
                       "PATH_TO_BE_CONFIGURED/model.ckpt: set it to your checkpoint, or remove the line to "
                       "train from scratch"))
      << r.err;
  const std::string data = stdfs::absolute(data_).lexically_normal().string();
  r = train("placeholder_map", replace_all(text_, data + "/label_map.pbtxt", "PATH_TO_BE_CONFIGURED/label_map.pbtxt"));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "label_map_path is still the sample config's placeholder "
                       "PATH_TO_BE_CONFIGURED/label_map.pbtxt: set it to your label map"))
      << r.err;
  r = train("placeholder_input", replace_all(text_, data + "/train-", "PATH_TO_BE_CONFIGURED/mscoco_train.record-"));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "train_input_reader.tf_record_input_reader.input_path is still the sample config's "
                       "placeholder PATH_TO_BE_CONFIGURED/mscoco_train.record-"))
      << r.err;
}

}  // namespace
}  // namespace orchard::cli
