// `orchard classify train|eval|predict` end to end: the binary is run as a user runs it
// (ORCHARD_BIN), on a tiny Fashion-MNIST extract, with resnet_tiny at 28 px.
//   ClassifyTrain.*   one uninterrupted run (events, stats, eval, predict) and a run killed
//                     with SIGKILL and restarted, which must reach the same parameters.
//   ClassifyErrors.*  bad input: a non-zero exit and a message naming what and where.
// CTest runs the two suites as separate tests so they overlap on two cores.
#include <fcntl.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/core/thread_pool.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/tools.h"
#include "orchard/models/registry.h"
#include "orchard/proto/event.pb.h"
#include "orchard/proto/tensorflow/graph.pb.h"
#include "orchard/train/checkpoint.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using test::TempDir;

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";

// The tiny data set: 256 train and 256 validation images, 2 + 1 shards, labels.txt.
std::string make_data(const TempDir& root) {
  const std::string dir = root.file("fmnist");
  auto r = run({"data", "fashion-mnist", "--out_dir", dir, "--limit", "256", "--num_shards", "2",
                "--num_validation_shards", "1"},
               root);
  EXPECT_EQ(r.rc, 0) << r.err;
  return dir;
}

// Every flag of the training runs; only model_dir and stats_file differ between them.
std::vector<std::string> train_args(const std::string& data_dir, const std::string& model_dir) {
  // 256 examples / 16 = 16 steps per epoch; 40 steps; checkpoints every 2 x 5 = 10 steps;
  // eval at steps 16, 32 and 40. LR: 1.6 * 16 / 256 = 0.1 after a 16-step warm-up, 0.01
  // after step 24 (epoch 1.5).
  return {"classify",
          "train",
          "--data_dir",
          data_dir,
          "--model_dir",
          model_dir,
          "--model",
          "resnet_tiny",
          "--image_size",
          "28",
          "--batch_size",
          "16",
          "--train_epochs",
          "3",
          "--train_steps",
          "40",
          "--steps_per_loop",
          "2",
          "--log_steps",
          "5",
          "--seed",
          "7",
          "--num_threads",
          "1",
          "--datasets_num_private_threads",
          "1",
          "--base_learning_rate",
          "1.6",
          "--warmup_epochs",
          "1",
          "--lr_boundaries",
          "1.5",
          "--lr_multipliers",
          "1,0.1",
          "--enable_checkpoint_and_export",
          "--enable_tensorboard"};
}

// The checkpoint's "model" (the averages, with a moving average), or its "training_weights".
models::ResNet load_tiny(const std::string& ckpt, int64_t* step = nullptr, bool training_weights = false) {
  models::ModelConfig c;
  c.arch = "resnet_tiny";
  c.num_classes = 10;
  auto m = models::build_resnet(c);
  train::RestoreOptions ro;
  ro.load_rng = false;
  ro.training_weights = training_weights;
  ro.expect = {{"model", "resnet_tiny"}, {"num_classes", "10"}};
  auto [s, meta] = train::restore_checkpoint(ckpt, *m, nullptr, ro);
  if (step) *step = s;
  return m;
}

double max_diff(models::ResNet& a, models::ResNet& b) {
  double d = 0;
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) d = std::max(d, (p.value() - pb[p.key()]).abs().max().item<double>());
  auto bb = b->named_buffers();
  for (const auto& p : a->named_buffers())
    d = std::max(d, (p.value().to(torch::kDouble) - bb[p.key()].to(torch::kDouble)).abs().max().item<double>());
  return d;
}

std::string first_event_file_version(const std::string& path) {
  TFRecordReader reader(path);
  std::string rec;
  if (!reader.next(&rec)) return "";
  tensorflow::Event ev;
  if (!ev.ParseFromString(rec)) return "";
  return ev.file_version();
}

// ---------------------------------------------------------------------------------------
// One uninterrupted run (A), shared by the tests of its outputs.
class ClassifyTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!stdfs::exists(kFashionDir + "/train-images-idx3-ubyte.gz")) return;
    root_ = new TempDir;
    data_dir_ = make_data(*root_);
    model_a_ = root_->file("model_a");
    auto args = train_args(data_dir_, model_a_);
    args.insert(args.end(), {"--stats_file", root_->file("stats_a.json")});
    const auto t0 = std::chrono::steady_clock::now();
    run_a_ = run(args, *root_);
    seconds_a_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  void SetUp() override {
    if (!root_) GTEST_SKIP() << kFashionDir << " is missing (Debian package dataset-fashion-mnist)";
    ASSERT_EQ(run_a_.rc, 0) << joined(train_args(data_dir_, model_a_)) << "\n" << run_a_.err;
  }

  static TempDir* root_;
  static std::string data_dir_, model_a_;
  static RunResult run_a_;
  static double seconds_a_;
};
TempDir* ClassifyTrain::root_ = nullptr;
std::string ClassifyTrain::data_dir_, ClassifyTrain::model_a_;
RunResult ClassifyTrain::run_a_;
double ClassifyTrain::seconds_a_ = 0;

TEST_F(ClassifyTrain, ModelDirLayout) {
  // Checkpoints every 10 steps and at the end, the index, the configuration, the labels.
  for (const char* name :
       {"ckpt-10.pt", "ckpt-20.pt", "ckpt-30.pt", "ckpt-40.pt", "checkpoint", "config.json", "labels.txt"})
    EXPECT_TRUE(stdfs::exists(stdfs::path(model_a_) / name)) << name;
  EXPECT_EQ(files_with(model_a_, ".tmp-"), std::vector<std::string>{});
  EXPECT_EQ(train::CheckpointManager(model_a_).latest(), (stdfs::path(model_a_) / "ckpt-40.pt").string());
  auto config = json::parse(read_file(model_a_ + "/config.json"));
  EXPECT_EQ(config.at("model"), "resnet_tiny");
  EXPECT_EQ(config.at("num_classes"), 10);  // from labels.txt
  EXPECT_EQ(config.at("image_size"), 28);
  EXPECT_EQ(data::read_labels(model_a_ + "/labels.txt"), data::kFashionMnistClasses);
}

// --enable_checkpoint_and_export ends as the Model Garden's trainer does: model_dir/saved_model,
// the graph `classify export --format frozen_graph` writes from the last checkpoint (the same
// weights), with the serving signature.
TEST_F(ClassifyTrain, SavedModelAtTheEnd) {
  tensorflow::SavedModel saved;
  ASSERT_TRUE(saved.ParseFromString(read_file(model_a_ + "/saved_model/saved_model.pb")));
  EXPECT_TRUE(stdfs::is_directory(model_a_ + "/saved_model/variables"));
  ASSERT_EQ(saved.meta_graphs_size(), 1);
  const auto& signature = saved.meta_graphs(0).signature_def().at("serving_default");
  EXPECT_EQ(signature.inputs().at("inputs").name(), "images:0");
  EXPECT_EQ(signature.outputs().at("logits").tensor_shape().dim(1).size(), 10);
  EXPECT_EQ(signature.outputs().at("probs").name(), "probs:0");
  TempDir out;
  auto r =
      run({"classify", "export", "--model_dir", model_a_, "--format", "frozen_graph", "--out", out.file("m.pb")}, out);
  ASSERT_EQ(r.rc, 0) << r.err;
  tensorflow::GraphDef frozen;
  ASSERT_TRUE(frozen.ParseFromString(read_file(out.file("m.pb"))));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(saved.meta_graphs(0).graph_def(), frozen));
}

TEST_F(ClassifyTrain, TensorBoardEventFiles) {
  const auto train_files = files_with(model_a_ + "/train", "events.out.tfevents.");
  const auto eval_files = files_with(model_a_ + "/eval", "events.out.tfevents.");
  ASSERT_EQ(train_files.size(), 1u);
  ASSERT_EQ(eval_files.size(), 1u);
  EXPECT_EQ(first_event_file_version(train_files[0]), "brain.Event:2");
  EXPECT_EQ(first_event_file_version(eval_files[0]), "brain.Event:2");

  std::map<std::string, std::map<int64_t, double>> train, eval;
  for (const auto& e : read_scalar_events(train_files[0])) train[e.tag][e.step] = e.value;
  for (const auto& e : read_scalar_events(eval_files[0])) eval[e.tag][e.step] = e.value;
  for (const char* tag : {"loss", "learning_rate", "accuracy", "examples_per_second"})
    EXPECT_TRUE(train.count(tag)) << "train scalar " << tag << " missing";
  for (const char* tag : {"loss", "accuracy", "top_5_accuracy"})
    EXPECT_TRUE(eval.count(tag)) << "eval scalar " << tag << " missing";

  // Train summaries once per host loop (2 steps); the learning rate of the loop's last step:
  // 0.1 * s / 16 during warm-up, 0.1 up to step 24 (boundary inclusive), then 0.01.
  EXPECT_EQ(train["loss"].size(), 20u);
  EXPECT_EQ(train["loss"].begin()->first, 2);
  EXPECT_EQ(train["loss"].rbegin()->first, 40);
  EXPECT_NEAR(train["learning_rate"][10], 0.1 * 9 / 16, 1e-7);
  EXPECT_NEAR(train["learning_rate"][20], 0.1, 1e-7);
  EXPECT_NEAR(train["learning_rate"][24], 0.1, 1e-7);   // the LR of step 23
  EXPECT_NEAR(train["learning_rate"][26], 0.01, 1e-8);  // step 25 > boundary 24
  for (const auto& [step, acc] : train["accuracy"]) {
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
  }
  // Eval at each epoch end (16, 32) and at the end (40).
  std::set<int64_t> eval_steps;
  for (const auto& [step, v] : eval["accuracy"]) eval_steps.insert(step);
  EXPECT_EQ(eval_steps, (std::set<int64_t>{16, 32, 40}));
  for (const auto& [step, v] : eval["top_5_accuracy"]) EXPECT_GE(v, eval["accuracy"][step]);
}

TEST_F(ClassifyTrain, StatsFile) {
  auto stats = json::parse(read_file(root_->file("stats_a.json")));
  for (const char* key : {"loss", "training_accuracy_top_1", "accuracy_top_1", "top_5_accuracy", "eval_loss",
                          "avg_exp_per_second", "step_timestamp_log"})
    EXPECT_TRUE(stats.contains(key)) << key << " missing from " << stats.dump();
  EXPECT_EQ(stats.at("global_step"), 40);
  EXPECT_GT(stats.at("avg_exp_per_second").get<double>(), 0);
  EXPECT_GT(stats.at("loss").get<double>(), 0);
  const auto& log = stats.at("step_timestamp_log");
  ASSERT_EQ(log.size(), 8u);  // every 5 steps
  EXPECT_EQ(log[0].at("batch_index"), 5);
  EXPECT_EQ(log[7].at("batch_index"), 40);
  EXPECT_LE(log[0].at("timestamp").get<double>(), log[7].at("timestamp").get<double>());
  // The final eval in the stats is the one in the event file at step 40.
  std::map<std::string, double> eval;
  for (const auto& e : read_scalar_events(files_with(model_a_ + "/eval", "events.out.tfevents.").at(0)))
    if (e.step == 40) eval[e.tag] = e.value;
  EXPECT_NEAR(stats.at("accuracy_top_1").get<double>(), eval["accuracy"], 1e-6);
  EXPECT_NEAR(stats.at("top_5_accuracy").get<double>(), eval["top_5_accuracy"], 1e-6);
  EXPECT_NEAR(stats.at("eval_loss").get<double>(), eval["loss"], 1e-5);
  // 40 steps on 256 images: better than chance (0.1) already.
  EXPECT_GT(stats.at("top_5_accuracy").get<double>(), 0.5);
}

TEST_F(ClassifyTrain, EvalCommand) {
  auto r = run({"classify", "eval", "--model_dir", model_a_, "--num_threads", "1", "--batch_size", "16"}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = json::parse(r.out.substr(r.out.rfind('{')));
  auto stats = json::parse(read_file(root_->file("stats_a.json")));
  EXPECT_DOUBLE_EQ(j.at("accuracy_top_1").get<double>(), stats.at("accuracy_top_1").get<double>());
  EXPECT_DOUBLE_EQ(j.at("top_5_accuracy").get<double>(), stats.at("top_5_accuracy").get<double>());
  EXPECT_NEAR(j.at("eval_loss").get<double>(), stats.at("eval_loss").get<double>(), 1e-5);
  EXPECT_EQ(j.at("global_step").get<int64_t>(), 40);  // the latest checkpoint's step, logged too
  EXPECT_TRUE(contains(r.err, "eval at step 40 ")) << r.err;

  // A named older checkpoint evaluates differently (or at least runs).
  auto r10 =
      run({"classify", "eval", "--model_dir", model_a_, "--checkpoint", model_a_ + "/ckpt-10.pt", "--num_threads", "1"},
          *root_);
  ASSERT_EQ(r10.rc, 0) << r10.err;
  EXPECT_TRUE(contains(r10.err, "ckpt-10.pt")) << r10.err;
  EXPECT_EQ(json::parse(r10.out.substr(r10.out.rfind('{'))).at("global_step").get<int64_t>(), 10);
}

TEST_F(ClassifyTrain, PredictCommand) {
  // Two validation images as PNG files.
  TFRecordReader reader(data_dir_ + "/validation-00000-of-00001");
  std::vector<std::string> images;
  std::string rec;
  for (int i = 0; i < 2 && reader.next(&rec); ++i) {
    data::ExampleView ex(rec, "validation record " + std::to_string(i));
    const std::string path = root_->file("img" + std::to_string(i) + ".png");
    test::write_bytes(path, ex.bytes("image/encoded"));
    images.push_back(path);
  }
  ASSERT_EQ(images.size(), 2u);
  const auto labels = data::kFashionMnistClasses;

  for (int top_k : {3, 10}) {
    std::vector<std::string> args = {"classify", "predict", "--model_dir",         model_a_,
                                     "--json",   "--top_k", std::to_string(top_k), "--num_threads",
                                     "1"};
    args.insert(args.end(), images.begin(), images.end());
    auto r = run(args, *root_);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream lines(r.out);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      auto j = json::parse(line);
      EXPECT_EQ(j.at("file"), images.at(static_cast<size_t>(n)));
      const auto& preds = j.at("predictions");
      ASSERT_EQ(preds.size(), static_cast<size_t>(top_k));
      double sum = 0, prev = 2;
      std::set<int64_t> ids;
      for (const auto& p : preds) {
        const double prob = p.at("probability").get<double>();
        const int64_t id = p.at("class_id").get<int64_t>();
        ASSERT_GE(id, 0);
        ASSERT_LT(id, 10);
        EXPECT_EQ(p.at("label").get<std::string>(), labels[static_cast<size_t>(id)]);
        EXPECT_LE(prob, prev);  // best first
        EXPECT_GE(prob, 0);
        prev = prob;
        sum += prob;
        ids.insert(id);
      }
      EXPECT_EQ(ids.size(), static_cast<size_t>(top_k));
      if (top_k == 10) EXPECT_NEAR(sum, 1.0, 1e-4);
      else EXPECT_LT(sum, 1.0 + 1e-6);
      ++n;
    }
    EXPECT_EQ(n, 2) << r.out;
  }

  // Plain text: one line per image naming it and its classes.
  auto r = run({"classify", "predict", "--model_dir", model_a_, images[0], "--num_threads", "1"}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, images[0])) << r.out;

  // A directory: its images, not the other files beside them.
  const std::string photos = root_->file("photos");
  stdfs::create_directories(photos);
  for (size_t i = 0; i < images.size(); ++i) stdfs::copy_file(images[i], photos + "/p" + std::to_string(i) + ".PNG");
  test::write_bytes(photos + "/notes.txt", "not an image");
  r = run({"classify", "predict", "--model_dir", model_a_, photos, "--json", "--num_threads", "1"}, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, photos + "/p0.PNG")) << r.out;
  EXPECT_TRUE(contains(r.out, photos + "/p1.PNG")) << r.out;
  EXPECT_FALSE(contains(r.out, "notes.txt")) << r.out;

  // A file that is not there.
  auto bad = run({"classify", "predict", "--model_dir", model_a_, root_->file("nope.png")}, *root_);
  EXPECT_EQ(bad.rc, 1) << bad.err;
  EXPECT_TRUE(contains(bad.err, "nope.png")) << bad.err;
}

// predict over a folder with one damaged image: every good image gets its result, the bad one
// an error line naming it, and the command exits 1 at the end.
TEST_F(ClassifyTrain, PredictGivesEveryGoodImageItsResultDespiteABadOne) {
  const std::string photos = root_->file("photos_with_a_bad_one");
  stdfs::create_directories(photos);
  TFRecordReader reader(data_dir_ + "/validation-00000-of-00001");
  std::string rec;
  for (int i = 0; i < 3 && reader.next(&rec); ++i) {
    data::ExampleView ex(rec, "validation record " + std::to_string(i));
    test::write_bytes(photos + "/p" + std::to_string(i) + ".png", ex.bytes("image/encoded"));
  }
  test::write_bytes(photos + "/p1.png", "\x89PNG\r\n\x1a\n damaged");  // the middle one of three
  auto r =
      run({"classify", "predict", "--model_dir", model_a_, photos, "--json", "--batch_size", "2", "--num_threads", "1"},
          *root_);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.out, photos + "/p0.png")) << r.out;
  EXPECT_TRUE(contains(r.out, photos + "/p2.png")) << r.out;
  EXPECT_FALSE(contains(r.out, photos + "/p1.png")) << r.out;
  EXPECT_TRUE(contains(r.err, photos + "/p1.png")) << r.err;
  EXPECT_TRUE(contains(r.err, "1 of 3 images could not be read or decoded")) << r.err;
}

// Preemption: SIGTERM lets the step in progress finish, writes a checkpoint of it, exits 143;
// the same command then resumes there and reaches the uninterrupted run's parameters.
TEST_F(ClassifyTrain, TerminatedRunCheckpointsItsStepAndResumes) {
  const std::string model_t = root_->file("model_t");
  auto args = train_args(data_dir_, model_t);
  const std::string out = root_->file("t1.out"), err = root_->file("t1.err");
  const pid_t pid = spawn(args, out, err);
  train::CheckpointManager manager(model_t);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && manager.latest().empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGTERM);
  auto stopped = wait_for(pid, out, err);
  ASSERT_FALSE(stopped.signaled) << stopped.err;
  ASSERT_EQ(stopped.rc, 128 + SIGTERM) << "the run finished before the signal?\n" << stopped.err;
  EXPECT_TRUE(contains(stopped.err, "signal 15: stopped after step")) << stopped.err;
  const int64_t stopped_at = train::checkpoint_step(manager.latest());
  EXPECT_TRUE(contains(stopped.err, "stopped after step " + std::to_string(stopped_at))) << stopped.err;
  ASSERT_GT(stopped_at, 0);
  ASSERT_LT(stopped_at, 40);
  EXPECT_EQ(files_with(model_t, ".tmp-"), std::vector<std::string>{});

  auto resumed = run(args, *root_);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "at step " + std::to_string(stopped_at))) << resumed.err;
  auto a = load_tiny(model_a_ + "/ckpt-40.pt");
  auto t = load_tiny(model_t + "/ckpt-40.pt");
  EXPECT_LT(max_diff(a, t), 1e-6) << "stopped at step " << stopped_at;
}

// The most important property: SIGKILL at any point and a restart reach exactly the
// parameters of the uninterrupted run (model, optimizer, step, LR schedule, RNG, data position).
TEST_F(ClassifyTrain, KilledAndRestartedRunMatchesUninterrupted) {
  const std::string model_b = root_->file("model_b");
  auto args = train_args(data_dir_, model_b);
  args.insert(args.end(), {"--stats_file", root_->file("stats_b.json")});
  const std::string out = root_->file("b1.out"), err = root_->file("b1.err");
  const pid_t pid = spawn(args, out, err);
  // Kill as soon as the first checkpoint and its index are complete: mid-way between two
  // checkpoints, so the restart must redo steps and cross an epoch boundary and the LR drop.
  train::CheckpointManager manager(model_b);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool ready = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (stdfs::exists(model_b + "/checkpoint") && !manager.latest().empty()) {
      ready = true;
      break;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) break;  // ended by itself: the test below fails
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  auto killed = wait_for(pid, out, err);
  ASSERT_TRUE(ready) << "no checkpoint appeared\n" << killed.err;
  ASSERT_TRUE(killed.signaled) << "the run finished before it could be killed (rc " << killed.rc << ")";
  int64_t killed_at = -1;
  {
    const std::string latest = manager.latest();
    ASSERT_FALSE(latest.empty());
    killed_at = train::checkpoint_step(latest);
    ASSERT_LT(killed_at, 40);
  }

  auto resumed = run(args, *root_);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "at step " + std::to_string(killed_at))) << resumed.err;

  int64_t step_a = 0, step_b = 0;
  auto a = load_tiny(model_a_ + "/ckpt-40.pt", &step_a);
  auto b = load_tiny(model_b + "/ckpt-40.pt", &step_b);
  EXPECT_EQ(step_a, 40);
  EXPECT_EQ(step_b, 40);
  EXPECT_LT(max_diff(a, b), 1e-6) << "killed at step >= " << killed_at;
  // Checkpoints written after the restart agree too.
  for (int64_t step = (killed_at / 10 + 1) * 10; step < 40; step += 10) {
    auto ca = load_tiny(model_a_ + "/ckpt-" + std::to_string(step) + ".pt");
    auto cb = load_tiny(model_b + "/ckpt-" + std::to_string(step) + ".pt");
    EXPECT_LT(max_diff(ca, cb), 1e-6) << "ckpt-" << step;
  }
  auto stats_a = json::parse(read_file(root_->file("stats_a.json")));
  auto stats_b = json::parse(read_file(root_->file("stats_b.json")));
  EXPECT_DOUBLE_EQ(stats_a.at("accuracy_top_1").get<double>(), stats_b.at("accuracy_top_1").get<double>());
  EXPECT_EQ(files_with(model_b, ".tmp-"), std::vector<std::string>{});

  // Restarting a finished run trains nothing and keeps the checkpoint.
  const std::string before = test::read_bytes(model_b + "/ckpt-40.pt");
  auto again = run(args, *root_);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "nothing to train")) << again.err;
  EXPECT_EQ(test::read_bytes(model_b + "/ckpt-40.pt"), before);
}

// ---------------------------------------------------------------------------------------
class ClassifyErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!stdfs::exists(kFashionDir + "/train-images-idx3-ubyte.gz")) return;
    root_ = new TempDir;
    data_dir_ = make_data(*root_);
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  void SetUp() override {
    if (!root_) GTEST_SKIP() << kFashionDir << " is missing (Debian package dataset-fashion-mnist)";
  }
  // A short training command on the tiny data; `extra` flags replace the defaults' values
  // (a flag given twice would keep its last value, as absl does).
  static std::vector<std::string> args(const std::string& model_dir, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {"classify",
                                  "train",
                                  "--data_dir",
                                  data_dir_,
                                  "--model_dir",
                                  model_dir,
                                  "--model",
                                  "resnet_tiny",
                                  "--image_size",
                                  "28",
                                  "--batch_size",
                                  "16",
                                  "--train_steps",
                                  "2",
                                  "--steps_per_loop",
                                  "2",
                                  "--num_threads",
                                  "1",
                                  "--datasets_num_private_threads",
                                  "1",
                                  "--skip_eval"};
    for (size_t i = 0; i < extra.size(); ++i) {
      const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
      auto it = std::find(a.begin(), a.end(), extra[i]);
      if (it != a.end() && has_value) *(it + 1) = extra[i + 1];
      else if (it == a.end()) {
        a.push_back(extra[i]);
        if (has_value) a.push_back(extra[i + 1]);
      }
      if (has_value) ++i;
    }
    return a;
  }
  // Runs and expects a clean failure: exit 1 (an orchard::Error, not an internal error) and
  // every one of `needles` in the message.
  static RunResult expect_error(const std::vector<std::string>& a, const std::vector<std::string>& needles) {
    auto r = run(a, *root_);
    EXPECT_EQ(r.rc, 1) << joined(a) << "\n" << r.err;
    for (const auto& n : needles) EXPECT_TRUE(contains(r.err, n)) << "'" << n << "' not in:\n" << r.err;
    return r;
  }

  static TempDir* root_;
  static std::string data_dir_;
};
TempDir* ClassifyErrors::root_ = nullptr;
std::string ClassifyErrors::data_dir_;

// absl's habits, as TF users type them: a repeated flag keeps its last value, --flagfile,
// --nofoo, and the TensorFlow-only flags accepted with one line each. The run ends with its
// summary, and says that no weights were written (checkpoints are off, as in the seed).
TEST_F(ClassifyErrors, AbslFlagHabitsAndTheEndOfRunSummary) {
  auto last_wins = args(root_->file("m_absl_err"));
  last_wins.insert(last_wins.end(), {"--batch_size", "-1"});  // after --batch_size 16
  expect_error(last_wins, {"--batch_size must be positive"});
  EXPECT_FALSE(stdfs::exists(root_->file("m_absl_err")));

  const std::string flagfile = root_->file("flags.txt");
  test::write_bytes(flagfile,
                    "# the seed's command line, kept in a file\n--train_steps=1\n\n// also a comment\n"
                    "--enable_checkpoint_and_export\n--stats_file=" +
                        root_->file("absl_stats.json") + "\n");
  auto a = args(root_->file("m_absl"));
  a.insert(a.begin() + 2, {"--batch_size", "-1"});  // before --batch_size 16: overridden
  a.insert(a.end(), {"--flagfile", flagfile, "--noenable_checkpoint_and_export", "--tpu=grpc://10.0.0.1",
                     "--enable_eager", "true", "--alsologtostderr", "--v", "1", "--use_tf_function=false"});
  auto r = run(a, *root_);
  ASSERT_EQ(r.rc, 0) << joined(a) << "\n" << r.err;
  for (const std::string flag : {"--tpu", "--enable_eager", "--alsologtostderr", "--v", "--use_tf_function"})
    EXPECT_TRUE(contains(r.err, flag + " is a TensorFlow-only flag: accepted, it changes nothing here")) << r.err;
  EXPECT_EQ(nlohmann::json::parse(test::read_bytes(root_->file("absl_stats.json"))).at("global_step"), 1);
  EXPECT_TRUE(contains(r.err, "finished: step 1 in ")) << r.err;
  EXPECT_TRUE(contains(r.err, "images/s")) << r.err;
  EXPECT_TRUE(contains(r.err, "written to " + root_->file("m_absl"))) << r.err;
  EXPECT_TRUE(contains(r.err, "no weights were written")) << r.err;  // --noenable_checkpoint_and_export won
  EXPECT_TRUE(contains(r.err, "--enable_checkpoint_and_export writes them")) << r.err;
  EXPECT_TRUE(files_with(root_->file("m_absl"), "ckpt-").empty());

  expect_error(args(root_->file("m_absl2"), {"--flagfile", root_->file("no_such_flags.txt")}),
               {"--flagfile", root_->file("no_such_flags.txt")});
}

// A cgroup with a CPU quota of one CPU (issue 57): created here where the test may (root, a
// writable cgroup file system with the cpu controller; otherwise skipped with the reason), the
// run started inside it starts one intra-op thread and says why. OMP_NUM_THREADS is unset for it,
// and --num_threads 0 asks for the default.
TEST_F(ClassifyErrors, ACgroupQuotaOfOneCpuStartsOneIntraOpThread) {
  if (available_cores() < 2) GTEST_SKIP() << "one core here: a one-CPU quota changes nothing";
  // The cpu controller's hierarchy: cgroup v1's cpu mount, else cgroup v2 with cpu enabled.
  std::string mount, version;
  {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::vector<std::string> w;
      for (std::string x; f >> x;) w.push_back(x);
      const auto dash = std::find(w.begin(), w.end(), "-");
      if (w.size() < 5 || dash == w.end() || dash + 3 >= w.end()) continue;
      const std::string type = *(dash + 1), opts = "," + *(dash + 3) + ",";
      if (type == "cgroup" && contains(opts, ",cpu,")) {
        mount = w[4];
        version = "v1";
        break;
      }
      if (type == "cgroup2" && mount.empty() && contains(test::read_bytes(w[4] + "/cgroup.subtree_control"), "cpu")) {
        mount = w[4];
        version = "v2";
      }
    }
  }
  if (mount.empty()) GTEST_SKIP() << "no cgroup file system with the cpu controller here";
  const std::string group = mount + "/orchard-test-" + std::to_string(::getpid());
  std::error_code ec;
  if (!stdfs::create_directory(group, ec) || ec)
    GTEST_SKIP() << "cannot create a cgroup at " << group << ": " << ec.message();
  struct Remove {
    std::string dir;
    ~Remove() { ::rmdir(dir.c_str()); }
  } remove{group};
  const auto write = [&](const std::string& file, const std::string& value) {
    std::ofstream out(group + "/" + file);
    out << value << "\n";
    out.flush();
    return static_cast<bool>(out);
  };
  const bool limited = version == "v1" ? write("cpu.cfs_period_us", "100000") && write("cpu.cfs_quota_us", "100000")
                                       : write("cpu.max", "100000 100000");
  if (!limited) GTEST_SKIP() << "cannot set a CPU quota on " << group;

  // sh joins the cgroup, then becomes orchard.
  std::vector<std::string> argv_s = {"/bin/sh", "-c", "echo $$ > '" + group + "/cgroup.procs' && exec \"$0\" \"$@\"",
                                     ORCHARD_BIN};
  for (const auto& a : args(root_->file("m_quota"), {"--num_threads", "0"})) argv_s.push_back(a);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = environment_with({}, {"OMP_NUM_THREADS"});
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  const std::string out = root_->file("quota.out"), err = root_->file("quota.err");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  const auto r = wait_for(pid, out, err);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "threads: 1 intra-op (the cgroup CPU quota, 1 CPUs rounded down")) << r.err;
  EXPECT_TRUE(contains(r.err, group)) << r.err;
}

// Shared CPUs (issue 57): a run whose thread count Orchard chose lowers it while other threads
// hold the cores (here: one spinning thread per core in this test process), and says so; a count
// the user gave stays. The log names how OpenMP waits (the user's OMP_WAIT_POLICY or
// GOMP_SPINCOUNT, else libgomp's default).
TEST_F(ClassifyErrors, ThreadsFollowTheCpuTheRunGetsUnlessTheUserSetThem) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> competitors;
  for (int i = 0; i < std::max(1, available_cores()); ++i)
    competitors.emplace_back([&] {
      while (!stop) {
      }
    });
  struct Join {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Join() {
      stop = true;
      for (auto& t : threads) t.join();
    }
  } join{stop, competitors};
  // A few seconds of steps: the governor looks every second.
  auto a = args(root_->file("m_gov"), {"--train_steps", "150", "--train_epochs", "100", "--steps_per_loop", "150"});
  *(std::find(a.begin(), a.end(), "--num_threads") + 1) = "0";  // Orchard's choice
  auto r = run(a, *root_, environment_with({}, {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "fewer while another process holds the CPU); OpenMP waits: libgomp's default")) << r.err;
  if (available_cores() >= 2) {
    EXPECT_TRUE(contains(r.err, "intra-op (the compute threads waited")) << r.err;
  }

  auto fixed = args(root_->file("m_gov_fixed"));
  *(std::find(fixed.begin(), fixed.end(), "--num_threads") + 1) = "2";
  r = run(fixed, *root_, environment_with({"GOMP_SPINCOUNT=777"}, {"OMP_WAIT_POLICY"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(
      contains(r.err, "threads: 2 intra-op (--num_threads); OpenMP waits: GOMP_SPINCOUNT=777 (the environment)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "the compute threads waited")) << r.err;
}

// A missing validation split is found before a model is built (it was found after training
// had run), and the failed start leaves no empty model_dir behind.
TEST_F(ClassifyErrors, MissingValidationDataFailsBeforeTraining) {
  const std::string train_only = root_->file("train_only");
  stdfs::create_directories(train_only);
  for (const auto& e : stdfs::directory_iterator(data_dir_))
    if (e.path().filename().string().rfind("train-", 0) == 0)
      stdfs::copy_file(e.path(), train_only / e.path().filename());
  auto a = args(root_->file("m_noval"), {"--data_dir", train_only});
  a.erase(std::find(a.begin(), a.end(), "--skip_eval"));
  const auto r = expect_error(a, {"evaluation data", train_only + "/validation-*", "--skip_eval"});
  EXPECT_FALSE(contains(r.err, "step 1")) << r.err;
  EXPECT_FALSE(stdfs::exists(root_->file("m_noval"))) << "a failed start left model_dir behind";
}

// --max_image_pixels reaches the decoders: a 28x28 image over a limit of 100 pixels is a data
// error naming its file and record, found from the header.
TEST_F(ClassifyErrors, ImagesOverThePixelLimitNameTheirRecord) {
  expect_error(args(root_->file("m_pixels"), {"--max_image_pixels", "100"}),
               {data_dir_ + "/train-0000", "record", "28x28", "--max_image_pixels"});
}

// `data images` says when it wrote no validation records (training would then need --skip_eval).
TEST_F(ClassifyErrors, DataImagesWarnsAboutNoValidationRecords) {
  const std::string tree = root_->file("tree");
  for (const std::string cls : {"cat", "dog"}) {
    stdfs::create_directories(tree + "/" + cls);
    data::Image im;
    im.height = im.width = 8;
    im.pixels.assign(8 * 8 * 3, cls == "cat" ? 30 : 200);
    test::write_bytes(tree + "/" + cls + "/a.png", data::encode_png(im));
  }
  auto r =
      run({"data", "images", "--input_dir", tree, "--out_dir", root_->file("tree_out"), "--validation_fraction", "0.1"},
          *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "no validation records")) << r.err;
  EXPECT_TRUE(contains(r.err, "--skip_eval")) << r.err;
}

TEST_F(ClassifyErrors, MissingDataDir) {
  expect_error(args(root_->file("m_missing"), {"--data_dir", root_->file("no_such_data")}),
               {root_->file("no_such_data"), "no such directory"});
}

TEST_F(ClassifyErrors, EmptyDataDir) {
  stdfs::create_directories(root_->file("empty_data"));
  expect_error(args(root_->file("m_empty"), {"--data_dir", root_->file("empty_data")}), {root_->file("empty_data")});
}

TEST_F(ClassifyErrors, LabelOutOfRangeNamesFileAndRecord) {
  expect_error(args(root_->file("m_labels"), {"--num_classes", "5"}),
               {data_dir_ + "/train-0000", "record", "image/class/label", "--num_classes"});
}

TEST_F(ClassifyErrors, UnwritableModelDir) {
  test::write_bytes(root_->file("a_file"), "x");
  expect_error(args(root_->file("a_file/model")), {root_->file("a_file")});
}

TEST_F(ClassifyErrors, RestartWithAnotherModelOrClassCount) {
  const std::string m = root_->file("m_restart");
  auto first = run(args(m, {"--enable_checkpoint_and_export"}), *root_);
  ASSERT_EQ(first.rc, 0) << first.err;
  ASSERT_TRUE(stdfs::exists(m + "/ckpt-2.pt"));
  const auto files = test::list_dir(m);
  const std::string ckpt = test::read_bytes(m + "/ckpt-2.pt");
  const std::string config = test::read_bytes(m + "/config.json");

  expect_error(args(m, {"--enable_checkpoint_and_export", "--num_classes", "12", "--train_steps", "4"}),
               {"ckpt-2.pt", "num_classes=10", "num_classes=12"});
  expect_error(
      args(m, {"--enable_checkpoint_and_export", "--train_steps", "4", "--model", "resnet18_small", "--width", "8"}),
      {"ckpt-2.pt", "model=resnet_tiny", "model=resnet18_small"});
  // Nothing overwritten: the checkpoint, the index and the configuration are as they were.
  EXPECT_EQ(test::list_dir(m), files);
  EXPECT_EQ(test::read_bytes(m + "/ckpt-2.pt"), ckpt);
  EXPECT_EQ(test::read_bytes(m + "/config.json"), config);
  // ...so the model_dir still evaluates.
  auto eval = run({"classify", "eval", "--model_dir", m, "--num_threads", "1"}, *root_);
  EXPECT_EQ(eval.rc, 0) << eval.err;
  EXPECT_TRUE(contains(eval.out, "accuracy_top_1")) << eval.out;
}

TEST_F(ClassifyErrors, UnknownModelListsNames) {
  expect_error(args(root_->file("m_unknown"), {"--model", "resnet51"}),
               {"resnet51", "resnet18", "resnet152_small", "resnet_tiny"});
}

TEST_F(ClassifyErrors, TpuStrategyNotSupported) {
  expect_error(args(root_->file("m_tpu"), {"--distribution_strategy", "tpu"}), {"tpu", "not supported"});
}

TEST_F(ClassifyErrors, AugmentationProbabilityOutOfRange) {
  expect_error(args(root_->file("m_erasing"), {"--random_erasing", "1.5"}), {"--random_erasing must be in [0, 1]"});
  expect_error(args(root_->file("m_erasing"), {"--random_erasing", "-0.1"}), {"--random_erasing must be in [0, 1]"});
  EXPECT_FALSE(stdfs::exists(root_->file("m_erasing") + "/config.json"));
}

TEST_F(ClassifyErrors, BatchLargerThanTheData) {
  expect_error(args(root_->file("m_batch"), {"--batch_size", "512"}), {"--batch_size 512", "256"});
}

TEST_F(ClassifyErrors, EvalWithoutAModelDir) {
  stdfs::create_directories(root_->file("not_a_model"));
  expect_error({"classify", "eval", "--model_dir", root_->file("not_a_model")},
               {root_->file("not_a_model") + "/config.json"});
}

}  // namespace
}  // namespace orchard::cli

// Short runs that need no separate suite: they share ClassifyErrors' tiny data.
namespace orchard::cli {
namespace {

TEST_F(ClassifyErrors, ProfileStepsWritesAChromeTrace) {
  const std::string model_dir = root_->file("m_profile");
  auto r = run(args(model_dir, {"--train_steps", "4", "--steps_per_loop", "4", "--profile_steps", "1,2"}), *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto traces = files_with(model_dir + "/train", ".trace.json");
  ASSERT_EQ(traces.size(), 1u);
  const json trace = json::parse(test::read_bytes(traces[0]));
  const json& events = trace.is_object() ? trace.at("traceEvents") : trace;
  ASSERT_TRUE(events.is_array());
  std::set<std::string> names;
  for (const auto& e : events)
    if (e.contains("name")) names.insert(e.at("name").get<std::string>());
  EXPECT_TRUE(names.count("aten::convolution") || names.count("aten::mkldnn_convolution")) << traces[0];
  EXPECT_TRUE(names.count("aten::convolution_backward") || names.count("ConvolutionBackward0")) << traces[0];
}

TEST_F(ClassifyErrors, CosineLearningRateAfterWarmup) {
  // 16 steps per epoch, 2 epochs: a linear warm-up over 8 steps to 1.6 * 16 / 256 = 0.1, then
  // 0.05 * (1 + cos(pi * (step - 8) / 24)) down to 0 at step 32. The summary at the end of
  // each 2-step loop holds the LR of the loop's last step (s - 1).
  const std::string model_dir = root_->file("m_cosine");
  auto r = run(args(model_dir, {"--lr_schedule", "cosine", "--train_epochs", "2", "--train_steps", "32",
                                "--warmup_epochs", "0.5", "--base_learning_rate", "1.6", "--enable_tensorboard"}),
               *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto files = files_with(model_dir + "/train", "events.out.tfevents.");
  ASSERT_EQ(files.size(), 1u);
  std::map<int64_t, double> lr;
  for (const auto& e : read_scalar_events(files[0]))
    if (e.tag == "learning_rate") lr[e.step] = e.value;
  ASSERT_EQ(lr.size(), 16u);
  const double pi = std::acos(-1.0);
  auto cosine = [&](int64_t step) { return 0.05 * (1 + std::cos(pi * static_cast<double>(step - 8) / 24)); };
  EXPECT_NEAR(lr[4], 0.1 * 3 / 8, 1e-7);
  EXPECT_NEAR(lr[8], 0.1 * 7 / 8, 1e-7);
  EXPECT_NEAR(lr[10], cosine(9), 1e-7);
  EXPECT_NEAR(lr[20], cosine(19), 1e-7);
  EXPECT_NEAR(lr[32], cosine(31), 1e-7);
  for (int64_t s = 12; s <= 32; s += 2) EXPECT_LT(lr[s], lr[s - 2]) << s;
  EXPECT_EQ(json::parse(read_file(model_dir + "/config.json")).at("lr_schedule"), "cosine");

  expect_error(
      args(root_->file("m_cosine_bad"), {"--lr_schedule", "cosine", "--train_epochs", "2", "--warmup_epochs", "2"}),
      {"--warmup_epochs", "--train_epochs"});
}

TEST_F(ClassifyErrors, EvaluationsKeepTheirIntervalWhenStepsPerLoopDoesNotDivideIt) {
  // 16 steps per epoch, loops of 5: as orbit's Controller, the loop ending at 16 is cut short
  // for the epoch's evaluation (loops end at 5, 10, 15, 16, 20).
  auto a = args(root_->file("m_loops"), {"--train_epochs", "2", "--train_steps", "20", "--steps_per_loop", "5"});
  a.erase(std::find(a.begin(), a.end(), "--skip_eval"));
  auto r = run(a, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "eval at step 16 ")) << r.err;
  EXPECT_TRUE(contains(r.err, "eval at step 20 ")) << r.err;
  EXPECT_FALSE(contains(r.err, "eval at step 15 ")) << r.err;
}

// --moving_average_decay: evaluation uses the averages (and reports the trained weights beside
// them), checkpoints hold both, `classify eval` scores the averages, and a run stopped and
// continued matches an uninterrupted one, averages included.
TEST_F(ClassifyErrors, MovingAverageOfTheWeights) {
  auto ema_args = [&](const std::string& dir, const std::string& steps) {
    auto a = args(root_->file(dir),
                  {"--train_epochs", "2", "--train_steps", steps, "--steps_per_loop", "4", "--moving_average_decay",
                   "0.9", "--enable_checkpoint_and_export", "--stats_file", root_->file(dir + ".json")});
    a.erase(std::find(a.begin(), a.end(), "--skip_eval"));
    return a;
  };
  auto r = run(ema_args("m_ema", "12"), *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "eval (moving average of the weights) at step 12 ")) << r.err;
  EXPECT_TRUE(contains(r.err, "eval (training weights) at step 12 ")) << r.err;
  EXPECT_EQ(json::parse(read_file(root_->file("m_ema") + "/config.json")).at("moving_average_decay"), 0.9);

  const std::string ckpt = root_->file("m_ema") + "/ckpt-12.pt";
  auto averaged = load_tiny(ckpt);
  auto trained = load_tiny(ckpt, nullptr, /*training_weights=*/true);
  EXPECT_GT(max_diff(averaged, trained), 1e-4) << "the checkpoint's model is not the average";

  // `classify eval` restores the averages: the score of the evaluation during training.
  const json stats = json::parse(read_file(root_->file("m_ema.json")));
  auto e = run({"classify", "eval", "--model_dir", root_->file("m_ema"), "--num_threads", "1", "--stats_file",
                root_->file("m_ema_eval.json")},
               *root_);
  ASSERT_EQ(e.rc, 0) << e.err;
  const json evaluated = json::parse(read_file(root_->file("m_ema_eval.json")));
  EXPECT_NEAR(evaluated.at("eval_loss").get<double>(), stats.at("eval_loss").get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(evaluated.at("accuracy_top_1").get<double>(), stats.at("accuracy_top_1").get<double>());

  // Stopped at step 8 and continued to 12: the same weights and averages.
  ASSERT_EQ(run(ema_args("m_ema2", "8"), *root_).rc, 0);
  auto continued = run(ema_args("m_ema2", "12"), *root_);
  ASSERT_EQ(continued.rc, 0) << continued.err;
  EXPECT_TRUE(contains(continued.err, "resumed from")) << continued.err;
  const std::string ckpt2 = root_->file("m_ema2") + "/ckpt-12.pt";
  auto averaged2 = load_tiny(ckpt2);
  EXPECT_LT(max_diff(averaged, averaged2), 1e-6);
  auto trained2 = load_tiny(ckpt2, nullptr, /*training_weights=*/true);
  EXPECT_LT(max_diff(trained, trained2), 1e-6);

  expect_error(args(root_->file("m_ema_bad"), {"--moving_average_decay", "1"}), {"--moving_average_decay"});
}

TEST_F(ClassifyErrors, CorruptRecordFailsOrIsSkippedAndCounted) {
  // A copy of the data whose first train shard has one record with a broken data CRC.
  const std::string data = root_->file("corrupt_data");
  stdfs::create_directories(data);
  for (const auto& e : stdfs::directory_iterator(data_dir_))
    stdfs::copy(e.path(), data + "/" + e.path().filename().string());
  const std::string shard = data + "/train-00000-of-00002";
  std::string bytes = test::read_bytes(shard);
  bytes[20] = static_cast<char>(bytes[20] ^ 0x55);  // inside the first record's data
  test::write_bytes(shard, bytes);

  auto base = args(root_->file("m_corrupt"), {"--data_dir", data, "--train_steps", "4", "--steps_per_loop", "4"});
  auto r = run(base, *root_);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, shard)) << r.err;
  EXPECT_TRUE(contains(r.err, "CRC")) << r.err;

  // 20 steps cross the epoch boundary (16 steps per epoch), which the skipped record moves.
  auto skip = args(root_->file("m_skip"), {"--data_dir", data, "--train_steps", "20", "--steps_per_loop", "20",
                                           "--skip_corrupt_records", "--stats_file", root_->file("skip_stats.json")});
  r = run(skip, *root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "skipped")) << r.err;
  const json stats = json::parse(test::read_bytes(root_->file("skip_stats.json")));
  // One bad record, met in two epochs: counted once, and named by file and record.
  EXPECT_EQ(stats.at("skipped_records").get<int64_t>(), 1);
  ASSERT_EQ(stats.at("skipped").size(), 1u);
  EXPECT_TRUE(contains(stats.at("skipped")[0].get<std::string>(), shard + ": record ")) << stats.dump();
}

}  // namespace
}  // namespace orchard::cli
