// Data-parallel training on loopback: `orchard launch` and workers started by hand with the
// torchrun variables, Gloo over 127.0.0.1.
//   DataParallel.*    2 processes x batch b == 1 process x batch 2b (parameters, loss curve,
//                     eval); a killed worker stops the other with a message, and a restart
//                     resumes; launch stops the others when one fails.
//   ClusterConfig.*   TF_CONFIG parsing, the divisibility and strategy errors.
//   MixedPrecision.*  --dtype bf16 (CPU autocast) trains every task.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/event_writer.h"
#include "orchard/models/registry.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/distributed.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using test::TempDir;

// A port per test, away from the usual 29500, so concurrent CTest jobs do not collide.
int next_port() {
  static int port = 29700 + static_cast<int>(::getpid() % 200) * 5;
  return port++;
}

// Starts one worker with the torchrun variables.
pid_t spawn_worker(const std::vector<std::string>& args, int rank, int world, int port, const std::string& out,
                   const std::string& err) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  const pid_t pid = spawn(args, out, err);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"}) unsetenv(v);
  return pid;
}

models::ResNet load(const std::string& ckpt) {
  models::ModelConfig c;
  c.arch = "resnet_tiny";
  c.num_classes = 10;
  auto m = models::build_resnet(c);
  train::RestoreOptions ro;
  ro.load_rng = false;
  train::restore_checkpoint(ckpt, *m, nullptr, ro);
  return m;
}

std::map<std::string, std::map<int64_t, double>> scalars(const std::string& dir) {
  std::map<std::string, std::map<int64_t, double>> out;
  for (const auto& e : read_scalar_events(files_with(dir, "events.out.tfevents.").at(0))) out[e.tag][e.step] = e.value;
  return out;
}

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir();
    // One shard: records are dealt round-robin to the workers, so with the shuffle buffer off
    // the two local batches of a step are exactly the one-process batch.
    data_ = root_->file("fmnist");
    auto r = run({"data", "fashion-mnist", "--out_dir", data_, "--limit", "256", "--num_shards", "1",
                  "--num_validation_shards", "1"},
                 *root_);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  static void TearDownTestSuite() { delete root_; }

  static std::vector<std::string> args(const std::string& model_dir, int steps = 24) {
    return {"classify", "train", "--data_dir", data_, "--model_dir", model_dir, "--model", "resnet_tiny",
            "--image_size", "28", "--batch_size", "16", "--train_epochs", "3", "--train_steps", std::to_string(steps),
            "--shuffle_buffer", "1", "--seed", "3", "--base_learning_rate", "0.1", "--warmup_epochs", "0.5",
            "--steps_per_loop", "4", "--log_steps", "4", "--enable_checkpoint_and_export", "--enable_tensorboard",
            "--data_format", "channels_first", "--datasets_num_private_threads", "1", "--num_threads", "1",
            "--collective_timeout", "20",
            // Strong enough that counting the L2 term once per replica would show.
            "--weight_decay", "0.02"};
  }

  static TempDir* root_;
  static std::string data_;
};
TempDir* DataParallel::root_ = nullptr;
std::string DataParallel::data_;

TEST_F(DataParallel, TwoProcessesMatchOneProcessWithTwiceTheBatch) {
  const std::string one = root_->file("one"), two = root_->file("two");
  auto single = run(args(one), *root_);
  ASSERT_EQ(single.rc, 0) << single.err;
  // Synchronized batch norm: each replica normalises over the global batch, as one process does.
  auto launch_args =
      std::vector<std::string>{"launch", "--nproc_per_node", "2", "--master_port", std::to_string(next_port()), "--"};
  for (const auto& a : args(two)) launch_args.push_back(a);
  launch_args.push_back("--sync_bn");
  auto pair = run(launch_args, *root_);
  ASSERT_EQ(pair.rc, 0) << pair.err;
  EXPECT_TRUE(contains(pair.err, "rank 0 of 2 joined")) << pair.err;

  auto a = load(one + "/ckpt-24.pt"), b = load(two + "/ckpt-24.pt");
  // The same parameters up to float reassociation: relative norm of the difference over all.
  auto pb = b->named_parameters();
  double diff = 0, norm = 0;
  for (const auto& p : a->named_parameters()) {
    diff += (p.value() - pb[p.key()]).pow(2).sum().item<double>();
    norm += p.value().pow(2).sum().item<double>();
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-3) << "relative difference of the parameters after 24 steps";
  // The running statistics follow the global batch too.
  auto ba = a->named_buffers(), bb = b->named_buffers();
  for (const char* name : {"bn1.running_mean", "bn1.running_var", "layer4.0.bn2.running_var"}) {
    const auto& x = ba[name];
    const auto& y = bb[name];
    EXPECT_LT(((x - y).norm() / x.norm()).item<double>(), 1e-3) << name << "\n" << x << "\n" << y;
  }

  // The same loss curve and evaluation (metrics summed over both workers' shards).
  auto sa = scalars(one + "/train"), sb = scalars(two + "/train");
  ASSERT_EQ(sa["loss"].size(), 6u);
  for (const auto& [step, loss] : sa["loss"]) EXPECT_NEAR(sb["loss"][step], loss, 1e-4 * std::abs(loss)) << step;
  auto ea = scalars(one + "/eval"), eb = scalars(two + "/eval");
  EXPECT_NEAR(eb["accuracy"][24], ea["accuracy"][24], 1.5 / 256);  // at most one image flips
  EXPECT_NEAR(eb["loss"][24], ea["loss"][24], 1e-3 * ea["loss"][24]);
  // Only rank 0 writes.
  EXPECT_EQ(files_with(two + "/train", "events.out.tfevents.").size(), 1u);
}

TEST_F(DataParallel, AKilledWorkerStopsTheOtherAndARestartResumes) {
  const std::string dir = root_->file("killed");
  const int port = next_port();
  const auto a = args(dir, 2000);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank)
    pids.push_back(spawn_worker(a, rank, 2, port, root_->file("k" + std::to_string(rank) + ".out"),
                                root_->file("k" + std::to_string(rank) + ".err")));
  // Kill rank 1 once a checkpoint exists (every 4 x 5 = 20 steps).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (train::CheckpointManager(dir).latest().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(train::CheckpointManager(dir).latest().empty()) << "no checkpoint appeared";
  kill(pids[1], SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  auto r1 = wait_for(pids[1], root_->file("k1.out"), root_->file("k1.err"));
  EXPECT_TRUE(r1.signaled);
  auto r0 = wait_for(pids[0], root_->file("k0.out"), root_->file("k0.err"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(r0.rc, 1) << r0.err;
  EXPECT_TRUE(contains(r0.err, "collective operation failed")) << r0.err;
  EXPECT_LT(waited, 30) << "the surviving worker took too long to stop";

  // The same command again, through orchard launch: it resumes from the newest checkpoint.
  const int64_t saved = train::checkpoint_step(train::CheckpointManager(dir).latest());
  auto resumed_args =
      std::vector<std::string>{"launch", "--nproc_per_node", "2", "--master_port", std::to_string(next_port()), "--"};
  auto b = args(dir, static_cast<int>(saved) + 8);
  resumed_args.insert(resumed_args.end(), b.begin(), b.end());
  auto again = run(resumed_args, *root_);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "resumed from")) << again.err;
  EXPECT_TRUE(stdfs::exists(dir + "/ckpt-" + std::to_string(saved + 8) + ".pt"));
}

TEST_F(DataParallel, AHangingWorkerStopsTheOtherAfterTheTimeout) {
  const std::string dir = root_->file("hung");
  const int port = next_port();
  auto a = args(dir, 2000);
  a.back() = "4";  // --collective_timeout 4
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank)
    pids.push_back(spawn_worker(a, rank, 2, port, root_->file("h" + std::to_string(rank) + ".out"),
                                root_->file("h" + std::to_string(rank) + ".err")));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (train::CheckpointManager(dir).latest().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(train::CheckpointManager(dir).latest().empty()) << "no checkpoint appeared";
  kill(pids[1], SIGSTOP);  // alive, holding its sockets open, never answering
  const auto stopped_at = std::chrono::steady_clock::now();
  auto r0 = wait_for(pids[0], root_->file("h0.out"), root_->file("h0.err"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  kill(pids[1], SIGKILL);
  wait_for(pids[1], root_->file("h1.out"), root_->file("h1.err"));
  EXPECT_EQ(r0.rc, 1) << r0.err;
  EXPECT_TRUE(contains(r0.err, "collective operation failed")) << r0.err;
  EXPECT_GE(waited, 3.0);
  EXPECT_LT(waited, 30.0) << "the timeout did not bound the wait";
}

TEST_F(DataParallel, LaunchStopsTheOthersWhenOneFails) {
  // The workers stop at once (the batch does not divide by the replicas): launch reports the
  // first failure, stops the rest and exits non-zero.
  auto r = run({"launch",
                "--nproc_per_node",
                "2",
                "--master_port",
                std::to_string(next_port()),
                "--grace_seconds",
                "2",
                "--",
                "classify",
                "train",
                "--data_dir",
                data_,
                "--model_dir",
                root_->file("odd"),
                "--model",
                "resnet_tiny",
                "--batch_size",
                "15",
                "--train_steps",
                "2"},
               *root_);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "must divide by the 2 replicas")) << r.err;
  EXPECT_TRUE(contains(r.err, "stopping the other workers")) << r.err;
}

TEST(ClusterConfig, TfConfigGivesRankWorldAndRendezvous) {
  auto s = train::parse_tf_config(
      R"({"cluster": {"worker": ["host0:2222", "host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 2}})");
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.world_size, 3);
  EXPECT_EQ(s.master_addr, "host0");
  EXPECT_EQ(s.master_port, 2222);
  auto chief = train::parse_tf_config(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2", "w1:3"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(chief.rank, 1);  // the chief is rank 0
  EXPECT_EQ(chief.world_size, 3);
  EXPECT_EQ(chief.master_addr, "c");
  EXPECT_THROW(train::parse_tf_config(R"({"cluster": {"worker": ["a:1"], "ps": ["p:2"]}, "task": {"index": 0}})"),
               Error);
  EXPECT_THROW(train::parse_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 3}})"), Error);
  EXPECT_THROW(train::parse_tf_config("not json"), Error);
  EXPECT_THROW(train::parse_tf_config(R"({"cluster": {"worker": ["nohost"]}, "task": {"index": 0}})"), Error);
}

TEST(ClusterConfig, OneProcessStrategiesRefuseAGroup) {
  TempDir root;
  const int port = next_port();
  const std::string out = root.file("o"), err = root.file("e");
  auto r = wait_for(spawn_worker({"classify", "train", "--use_synthetic_data", "--model", "resnet_tiny",
                                  "--distribution_strategy", "off", "--model_dir", root.file("m")},
                                 1, 2, port, out, err),
                    out, err);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--distribution_strategy off trains in one process")) << r.err;
}

// --dtype bf16 runs each task's forward pass under CPU autocast: every task trains (before
// 2026-11-30 the SSD's ReLU6 had no bf16 backward and the caption LSTM got a bf16 input),
// and the classifier's first loss moves by bf16 rounding only.
TEST(MixedPrecision, Bf16TrainsEveryTask) {
  setenv("OMP_NUM_THREADS", "1", 1);
  TempDir root;
  auto classify = [&](const std::string& dtype) {
    auto r = run({"classify",
                  "train",
                  "--use_synthetic_data",
                  "--model",
                  "resnet18_small",
                  "--width",
                  "8",
                  "--image_size",
                  "16",
                  "--batch_size",
                  "8",
                  "--num_classes",
                  "10",
                  "--train_steps",
                  "1",
                  "--model_dir",
                  root.file("cls-" + dtype),
                  "--dtype",
                  dtype,
                  "--stats_file",
                  root.file(dtype + ".json")},
                 root);
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(test::read_bytes(root.file(dtype + ".json"))).at("loss").get<double>();
  };
  const double fp32 = classify("fp32"), bf16 = classify("bf16");
  EXPECT_NE(bf16, fp32);  // the same seed and batch: only the arithmetic differs
  EXPECT_NEAR(bf16, fp32, 0.01 * fp32);

  const std::string data = root.file("data");
  for (const std::string task : {"multilabel", "detection", "captioning"})
    ASSERT_EQ(run({"data", "shapes", "--task", task, "--out_dir", data + "/" + task, "--num_train", "40",
                   "--num_validation", "2", "--train_shards", "1"},
                  root)
                  .rc,
              0);
  const std::vector<std::vector<std::string>> runs = {
      {"multilabel", "train", "--data_dir", data + "/multilabel", "--model_dir", root.file("ml"), "--model",
       "resnet_tiny", "--class_num", "6", "--image_size", "32", "--batch_size", "4", "--max_iter", "2",
       "--log_interval", "1", "--skip_eval"},
      {"detect", "train", "--pipeline_config_path", data + "/detection/pipeline.config", "--model_dir",
       root.file("det"), "--num_train_steps", "2", "--log_steps", "1", "--skip_eval"},
      {"caption", "train", "--input_file_pattern", data + "/captioning/train-*", "--train_dir", root.file("cap"),
       "--train_steps", "2", "--train_batch_size", "2", "--image_size", "75", "--depth_multiplier", "0.25",
       "--train_inception", "--log_every_n_steps", "1"},
  };
  for (auto args : runs) {
    args.insert(args.end(), {"--dtype", "bf16"});
    auto r = run(args, root);
    EXPECT_EQ(r.rc, 0) << args[0] << ":\n" << r.err;
    EXPECT_TRUE(contains(r.err, "step 2/2: loss ")) << args[0] << ":\n" << r.err;
    EXPECT_FALSE(contains(r.err, "loss nan")) << r.err;
  }
}

}  // namespace
}  // namespace orchard::cli
