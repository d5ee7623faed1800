// `orchard data shapes` + `orchard multilabel train|eval|predict` end to end: the binary on
// the synthetic shapes set (6 labels: 3 kinds, 3 colours), resnet_tiny at 32 px.
//   MultiLabelTrain.*   learns the set (mAP >= 0.9), summaries, checkpoints, eval, predict,
//                       fine-tuning from a classify checkpoint.
//   MultiLabelErrors.*  bad input: a non-zero exit and a message naming what and where.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/models/registry.h"
#include "orchard/train/checkpoint.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using test::TempDir;

std::string make_shapes(const TempDir& root, int num_train, int num_validation) {
  const std::string dir = root.file("shapes");
  auto r = run({"data", "shapes", "--task", "multilabel", "--out_dir", dir, "--num_train", std::to_string(num_train),
                "--num_validation", std::to_string(num_validation), "--seed", "3"},
               root);
  EXPECT_EQ(r.rc, 0) << r.err;
  return dir;
}

std::map<std::string, torch::Tensor> checkpoint_tensors(const std::string& path, const models::ModelConfig& c) {
  auto m = models::build_resnet(c);
  train::RestoreOptions ro;
  ro.load_rng = false;
  ro.skip = [](const std::string& name) { return name.rfind("multilabel_", 0) == 0; };
  train::restore_checkpoint(path, *m, nullptr, ro);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().clone();
  return out;
}

class MultiLabelTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir();
    data_ = make_shapes(*root_, 2000, 300);
    model_ = root_->file("model");
    // 2000 / 32 = 62 steps per epoch; LR 4 x 32 / 256 = 0.5, x0.1 after step 1000; checkpoints
    // every 400 steps keeping 2; evaluation at 600 and at the end.
    result_ = run({"multilabel",      "train", "--data_dir",    data_,
                   "--model_dir",     model_,  "--model",       "resnet_tiny",
                   "--class_num",     "6",     "--image_size",  "32",
                   "--batch_size",    "32",    "--lr",          "4",
                   "--lr_decay_step", "1000",  "--max_iter",    "1200",
                   "--log_interval",  "100",   "--snapshot",    "400",
                   "--test_interval", "600",   "--max_to_keep", "2",
                   "--random_seed",   "1",     "--stats_file",  root_->file("stats.json")},
                  *root_);
  }
  static void TearDownTestSuite() { delete root_; }

  static TempDir* root_;
  static std::string data_, model_;
  static RunResult result_;
};
TempDir* MultiLabelTrain::root_ = nullptr;
std::string MultiLabelTrain::data_, MultiLabelTrain::model_;
RunResult MultiLabelTrain::result_;

TEST_F(MultiLabelTrain, LearnsTheShapesSet) {
  ASSERT_EQ(result_.rc, 0) << result_.err;
  const json stats = json::parse(test::read_bytes(root_->file("stats.json")));
  EXPECT_GE(stats.at("eval_mAP").get<double>(), 0.9) << stats.dump(2);
  for (const char* key : {"eval_precision", "eval_recall", "eval_f1", "accuracy_top_1", "eval_loss", "loss",
                          "training_accuracy_top_1", "avg_exp_per_second"})
    EXPECT_TRUE(stats.contains(key)) << key;
  EXPECT_GT(stats.at("eval_f1").get<double>(), 0.8);
  EXPECT_EQ(stats.at("global_step").get<int>(), 1200);
  // The seed's log: learning rate (scaled, then decayed) and loss every log_interval steps.
  EXPECT_TRUE(contains(result_.err, "step 100/1200: loss")) << result_.err;
  EXPECT_TRUE(contains(result_.err, "lr 0.50000")) << result_.err;
  EXPECT_TRUE(contains(result_.err, "step 1100/1200") && contains(result_.err, "lr 0.05000")) << result_.err;
}

TEST_F(MultiLabelTrain, SummariesCheckpointsAndConfig) {
  ASSERT_EQ(result_.rc, 0) << result_.err;
  std::map<std::string, std::map<int64_t, double>> train, eval;
  for (const auto& e : read_scalar_events(files_with(model_ + "/train", "events.out.tfevents.").at(0)))
    train[e.tag][e.step] = e.value;
  for (const auto& e : read_scalar_events(files_with(model_ + "/eval", "events.out.tfevents.").at(0)))
    eval[e.tag][e.step] = e.value;
  for (const char* tag : {"learning_rate", "cross_entropy", "loss", "accuracy"})
    EXPECT_EQ(train[tag].size(), 12u) << tag;  // every log_interval steps
  EXPECT_NEAR(train["learning_rate"][100], 0.5, 1e-6);
  EXPECT_NEAR(train["learning_rate"][1200], 0.05, 1e-6);
  for (const char* tag : {"mAP", "precision", "recall", "f1", "accuracy", "loss"}) {
    EXPECT_EQ(eval[tag].count(600), 1u) << tag;
    EXPECT_EQ(eval[tag].count(1200), 1u) << tag;
  }
  // Every 400 steps, the newest 2 kept.
  EXPECT_EQ(files_with(model_, ".pt").size(), 2u);
  EXPECT_TRUE(stdfs::exists(model_ + "/ckpt-800.pt"));
  EXPECT_TRUE(stdfs::exists(model_ + "/ckpt-1200.pt"));
  const json config = json::parse(test::read_bytes(model_ + "/config.json"));
  EXPECT_EQ(config.at("task"), "multilabel");
  EXPECT_EQ(config.at("class_num"), 6);
  EXPECT_EQ(test::read_bytes(model_ + "/labels.txt"), test::read_bytes(data_ + "/labels.txt"));
}

TEST_F(MultiLabelTrain, EvalReproducesTheFinalMetrics) {
  ASSERT_EQ(result_.rc, 0) << result_.err;
  auto r = run({"multilabel", "eval", "--model_dir", model_, "--num_threads", "1"}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json got = json::parse(r.out);
  const json stats = json::parse(test::read_bytes(root_->file("stats.json")));
  EXPECT_NEAR(got.at("mAP").get<double>(), stats.at("eval_mAP").get<double>(), 1e-6);
  EXPECT_NEAR(got.at("f1").get<double>(), stats.at("eval_f1").get<double>(), 1e-6);
  EXPECT_EQ(got.at("global_step"), stats.at("global_step"));
}

// A flag given on the command line wins over the saved configuration even when its value is
// the default (once detected by comparing with the default, so --threshold 0.5 was ignored).
TEST_F(MultiLabelTrain, AnExplicitThresholdWinsOverTheSavedOneEvenAtTheDefault) {
  ASSERT_EQ(result_.rc, 0) << result_.err;
  const std::string copy = root_->file("model_threshold_0.9");
  stdfs::create_directories(copy);
  for (const auto& e : stdfs::directory_iterator(model_))
    if (e.is_regular_file()) stdfs::copy_file(e.path(), stdfs::path(copy) / e.path().filename());
  json config = json::parse(test::read_bytes(copy + "/config.json"));
  ASSERT_EQ(config.at("threshold").get<double>(), 0.5);
  config["threshold"] = 0.9;  // as if trained with --threshold 0.9
  test::write_bytes(copy + "/config.json", config.dump(2));
  auto original = run({"multilabel", "eval", "--model_dir", model_, "--num_threads", "1"}, *root_);
  auto saved = run({"multilabel", "eval", "--model_dir", copy, "--num_threads", "1"}, *root_);
  auto given = run({"multilabel", "eval", "--model_dir", copy, "--num_threads", "1", "--threshold", "0.5"}, *root_);
  ASSERT_EQ(original.rc, 0) << original.err;
  ASSERT_EQ(saved.rc, 0) << saved.err;
  ASSERT_EQ(given.rc, 0) << given.err;
  EXPECT_NE(json::parse(saved.out), json::parse(original.out)) << "the saved threshold 0.9 was not used";
  EXPECT_EQ(json::parse(given.out), json::parse(original.out)) << "--threshold 0.5 did not win";
}

TEST_F(MultiLabelTrain, PredictPrintsTheLabelsOfImages) {
  ASSERT_EQ(result_.rc, 0) << result_.err;
  // Validation images as files, with their true label sets.
  const auto names = std::vector<std::string>{"circle", "square", "triangle", "red", "green", "blue"};
  std::map<std::string, std::set<std::string>> truth;
  TFRecordReader reader(data_ + "/validation-00000-of-00001");
  std::string record;
  for (int i = 0; i < 40 && reader.next(&record); ++i) {
    data::ExampleView ex(record, "validation");
    const std::string path = root_->file("img" + std::to_string(i) + ".jpg");
    test::write_bytes(path, ex.bytes("image"));
    const std::string& bytes = ex.bytes("label");
    ASSERT_EQ(bytes.size(), 24u);
    for (size_t c = 0; c < 6; ++c) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * c, 4);
      if (v == 1.f) truth[path].insert(names[c]);
    }
  }
  auto r = run({"multilabel", "predict", "--model_dir", model_, "--json", root_->file("img*.jpg")}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int n = 0;
  double jaccard = 0;
  while (std::getline(lines, line)) {
    const json j = json::parse(line);
    std::set<std::string> predicted;
    double last = 1;
    for (const auto& l : j.at("labels")) {
      EXPECT_GE(l.at("probability").get<double>(), 0.5);
      EXPECT_LE(l.at("probability").get<double>(), last);  // most probable first
      last = l.at("probability").get<double>();
      predicted.insert(l.at("label").get<std::string>());
    }
    const auto& want = truth.at(j.at("file").get<std::string>());
    std::set<std::string> both, either = predicted;
    for (const auto& w : want) (predicted.count(w) ? both : either).insert(w);
    jaccard += static_cast<double>(both.size()) / static_cast<double>(std::max<size_t>(1, either.size()));
    ++n;
  }
  EXPECT_EQ(n, 40);
  EXPECT_GT(jaccard / n, 0.7) << r.out;
  // Human-readable form: "file: label (p), ...".
  auto plain = run({"multilabel", "predict", "--model_dir", model_, root_->file("img0.jpg")}, *root_);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_TRUE(contains(plain.out, "img0.jpg:")) << plain.out;
}

TEST_F(MultiLabelTrain, FineTunesFromTheBackboneOfAClassifyCheckpoint) {
  const std::string cls = root_->file("classify");
  auto c = run({"classify",
                "train",
                "--use_synthetic_data",
                "--model",
                "resnet_tiny",
                "--num_classes",
                "10",
                "--image_size",
                "32",
                "--batch_size",
                "8",
                "--train_steps",
                "3",
                "--data_format",
                "channels_first",
                "--model_dir",
                cls,
                "--enable_checkpoint_and_export",
                "--num_train_examples",
                "64"},
               *root_);
  ASSERT_EQ(c.rc, 0) << c.err;
  const std::string tuned = root_->file("tuned");
  // LR 0 and no weight decay: the trained variables stay what the fine-tune start gave them.
  auto r = run({"multilabel",
                "train",
                "--data_dir",
                data_,
                "--model_dir",
                tuned,
                "--model",
                "resnet_tiny",
                "--class_num",
                "6",
                "--image_size",
                "32",
                "--batch_size",
                "32",
                "--lr",
                "0",
                "--weight_decay",
                "0",
                "--max_iter",
                "2",
                "--log_interval",
                "1",
                "--skip_eval",
                "--fine_tune_checkpoint",
                cls},
               *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "fine-tuning from the backbone of")) << r.err;
  models::ModelConfig from_cfg, to_cfg;
  from_cfg.arch = to_cfg.arch = "resnet_tiny";
  from_cfg.num_classes = 10;
  to_cfg.num_classes = 6;
  const auto from = checkpoint_tensors(train::CheckpointManager(cls).latest(), from_cfg);
  const auto to = checkpoint_tensors(tuned + "/ckpt-2.pt", to_cfg);
  int compared = 0;
  for (const auto& [name, value] : to) {
    if (name.rfind("fc.", 0) == 0) {
      EXPECT_NE(value.sizes(), from.at(name).sizes()) << name;  // a new 6-class head
      continue;
    }
    EXPECT_TRUE(torch::equal(value, from.at(name))) << name;
    ++compared;
  }
  EXPECT_GT(compared, 10);

  // A backbone of another width is refused, naming the variable.
  const std::string wide = root_->file("wide");
  ASSERT_EQ(run({"classify",
                 "train",
                 "--use_synthetic_data",
                 "--model",
                 "resnet_tiny",
                 "--width",
                 "16",
                 "--num_classes",
                 "10",
                 "--image_size",
                 "32",
                 "--batch_size",
                 "8",
                 "--train_steps",
                 "1",
                 "--model_dir",
                 wide,
                 "--enable_checkpoint_and_export",
                 "--num_train_examples",
                 "64"},
                *root_)
                .rc,
            0);
  auto bad = run({"multilabel", "train", "--data_dir", data_, "--model_dir", root_->file("tuned2"), "--model",
                  "resnet_tiny", "--class_num", "6", "--image_size", "32", "--batch_size", "32", "--max_iter", "1",
                  "--skip_eval", "--fine_tune_checkpoint", wide},
                 *root_);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_TRUE(contains(bad.err, "variable 'conv1.weight' has shape")) << bad.err;
}

// --optimizer adam: trains, checkpoints Adam's moments and resumes from them; bad
// --optimizer / --init values are refused before any work.
TEST(MultiLabelOptions, AdamTrainsAndResumes) {
  TempDir root;
  const std::string data = make_shapes(root, 64, 16);
  const std::string model = root.file("adam");
  auto train = [&](int steps) {
    return run({"multilabel",
                "train",
                "--data_dir",
                data,
                "--model_dir",
                model,
                "--model",
                "resnet_tiny",
                "--class_num",
                "6",
                "--image_size",
                "32",
                "--batch_size",
                "8",
                "--max_iter",
                std::to_string(steps),
                "--snapshot",
                "2",
                "--skip_eval",
                "--optimizer",
                "adam",
                "--lr",
                "0.016",
                "--num_threads",
                "1"},
               root);
  };
  auto first = train(2);
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(json::parse(read_file(model + "/config.json")).at("optimizer"), "adam");
  auto resumed = train(4);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "ckpt-2")) << resumed.err;  // restored, Adam state included
  EXPECT_TRUE(stdfs::exists(model + "/ckpt-4.pt"));

  auto bad = run({"multilabel", "train", "--data_dir", data, "--model_dir", root.file("b1"), "--model", "resnet_tiny",
                  "--class_num", "6", "--optimizer", "rmsprop"},
                 root);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_TRUE(contains(bad.err, "--optimizer must be momentum or adam, not 'rmsprop'")) << bad.err;
  bad = run({"multilabel", "train", "--data_dir", data, "--model_dir", root.file("b2"), "--model", "resnet_tiny",
             "--class_num", "6", "--init", "torchvision"},
            root);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_TRUE(contains(bad.err, "--init torchvision applies to inception_v3, not resnet_tiny")) << bad.err;
  EXPECT_FALSE(stdfs::exists(root.file("b1") + "/config.json"));
}

TEST(MultiLabelErrors, WrongLabelLengthNamesFileAndRecord) {
  TempDir root;
  const std::string data = make_shapes(root, 64, 16);
  auto r = run({"multilabel", "train", "--data_dir", data, "--model_dir", root.file("m"), "--model", "resnet_tiny",
                "--class_num", "5", "--image_size", "32", "--batch_size", "8", "--max_iter", "2", "--num_threads", "1"},
               root);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "train-0000")) << r.err;
  EXPECT_TRUE(contains(r.err, "record")) << r.err;
  EXPECT_TRUE(contains(r.err, "'label' holds 24 bytes, not 4 x 5 = 20")) << r.err;
  EXPECT_TRUE(files_with(root.file("m"), ".pt").empty());

  auto missing =
      run({"multilabel", "train", "--data_dir", root.file("nope"), "--model_dir", root.file("m2"), "--class_num", "6"},
          root);
  EXPECT_EQ(missing.rc, 1);
  EXPECT_TRUE(contains(missing.err, root.file("nope"))) << missing.err;
  auto balance = run({"multilabel", "train", "--data_dir", data, "--model_dir", root.file("m3"), "--class_num", "6",
                      "--loss_balance", "focal"},
                     root);
  EXPECT_EQ(balance.rc, 1);
  EXPECT_TRUE(contains(balance.err, "--loss_balance")) << balance.err;
  stdfs::create_directories(root.file("empty"));
  auto not_ours = run({"multilabel", "predict", "--model_dir", root.file("empty"), root.file("x.jpg")}, root);
  EXPECT_EQ(not_ours.rc, 1);
  EXPECT_TRUE(contains(not_ours.err, "config.json: not found")) << not_ours.err;
  auto no_ckpt = run({"multilabel", "predict", "--model_dir", root.file("m"), root.file("x.jpg")}, root);
  EXPECT_EQ(no_ckpt.rc, 1);
  EXPECT_TRUE(contains(no_ckpt.err, "no checkpoint")) << no_ckpt.err;
}

}  // namespace
}  // namespace orchard::cli
