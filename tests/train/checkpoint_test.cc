#include "orchard/train/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/models/registry.h"

namespace orchard::train {
namespace {

using test::TempDir;
namespace stdfs = std::filesystem;

models::ResNet tiny(int64_t num_classes = 10, const std::string& arch = "resnet_tiny") {
  models::ModelConfig c;
  c.arch = arch;
  c.num_classes = num_classes;
  return models::build_resnet(c);
}

std::unique_ptr<torch::optim::SGD> sgd(models::ResNet& m) {
  return std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

// One SGD step in training mode (moves weights, momentum and BN running statistics).
void train_step(models::ResNet& m, torch::optim::SGD& opt, int seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({4, 3, 12, 12});
  auto y = torch::randint(10, {4}, torch::kLong);
  m->train();
  opt.zero_grad();
  torch::nn::functional::cross_entropy(m->forward(x), y).backward();
  opt.step();
}

// Largest absolute difference over all parameters and buffers (by name).
double max_diff(models::ResNet& a, models::ResNet& b) {
  double d = 0;
  auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) d = std::max(d, (p.value() - pb[p.key()]).abs().max().item<double>());
  auto bb = b->named_buffers();
  for (const auto& p : a->named_buffers())
    d = std::max(d, (p.value().to(torch::kDouble) - bb[p.key()].to(torch::kDouble)).abs().max().item<double>());
  return d;
}

Meta tiny_meta(int64_t num_classes = 10) {
  return {{"task", "classify"}, {"model", "resnet_tiny"}, {"num_classes", std::to_string(num_classes)}};
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no orchard::Error";
  return "";
}

TEST(CheckpointStep, FromFileName) {
  EXPECT_EQ(checkpoint_step("ckpt-12.pt"), 12);
  EXPECT_EQ(checkpoint_step("/a/b/ckpt-0.pt"), 0);
  EXPECT_EQ(checkpoint_step("ckpt-12.pt.tmp-4242"), -1);
  EXPECT_EQ(checkpoint_step("ckpt-.pt"), -1);
  EXPECT_EQ(checkpoint_step("checkpoint"), -1);
}

TEST(Checkpoint, RoundTripRestoresEverything) {
  TempDir dir;
  torch::manual_seed(1);
  auto a = tiny();
  auto opt_a = sgd(a);
  train_step(a, *opt_a, 10);
  train_step(a, *opt_a, 11);
  CheckpointManager manager(dir.str());
  Meta meta = tiny_meta();
  meta["epoch"] = "3";
  const std::string path = manager.save(7, *a, opt_a.get(), meta);
  EXPECT_EQ(path, dir.file("ckpt-7.pt"));
  const auto after_save = torch::rand({5});  // the RNG state saved is the one before this draw

  torch::manual_seed(2);
  auto b = tiny();
  auto opt_b = sgd(b);
  ASSERT_GT(max_diff(a, b), 1e-3);
  torch::manual_seed(999);
  RestoreOptions ro;
  ro.expect = tiny_meta();
  auto [step, got_meta] = restore_checkpoint(path, *b, opt_b.get(), ro);
  EXPECT_EQ(step, 7);
  EXPECT_EQ(got_meta.at("epoch"), "3");
  EXPECT_EQ(got_meta.at("model"), "resnet_tiny");
  EXPECT_EQ(max_diff(a, b), 0.0);  // parameters and buffers (BN running stats, num_batches_tracked)
  EXPECT_EQ(b->named_buffers()["bn1.num_batches_tracked"].item<int64_t>(), 2);
  EXPECT_TRUE(torch::equal(torch::rand({5}), after_save));  // RNG state restored

  // Momentum restored: the same next step on both gives the same weights...
  train_step(a, *opt_a, 12);
  train_step(b, *opt_b, 12);
  EXPECT_LT(max_diff(a, b), 1e-6);

  // ...which it would not without the optimizer state.
  auto c = tiny();
  auto opt_c = sgd(c);
  RestoreOptions no_opt;
  no_opt.load_optimizer = false;
  restore_checkpoint(path, *c, opt_c.get(), no_opt);
  auto d = tiny();
  auto opt_d = sgd(d);
  restore_checkpoint(path, *d, opt_d.get(), RestoreOptions{});
  train_step(c, *opt_c, 12);
  train_step(d, *opt_d, 12);
  EXPECT_GT(max_diff(c, d), 1e-5);
  EXPECT_LT(max_diff(a, d), 1e-6);
}

// A run that trains more variables than the checkpoint's (im2txt's second phase unfreezes the
// encoder) keeps the weights and starts its optimizer afresh instead of failing.
TEST(Checkpoint, OptimizerStateOfOtherTrainedVariablesIsSkipped) {
  TempDir dir;
  torch::manual_seed(1);
  auto a = tiny();
  std::vector<torch::Tensor> fc_only = {a->named_parameters()["fc.weight"], a->named_parameters()["fc.bias"]};
  auto opt_a = std::make_unique<torch::optim::SGD>(fc_only, torch::optim::SGDOptions(0.05).momentum(0.9));
  train_step(a, *opt_a, 10);
  const std::string path = CheckpointManager(dir.str()).save(3, *a, opt_a.get(), tiny_meta());

  auto b = tiny();
  auto opt_b = sgd(b);  // every parameter
  auto [step, meta] = restore_checkpoint(path, *b, opt_b.get(), RestoreOptions{});
  EXPECT_EQ(step, 3);
  EXPECT_EQ(meta.at("optimizer_parameters"), "2");
  EXPECT_EQ(max_diff(a, b), 0.0);
  // Fresh optimizer: no momentum buffers yet.
  EXPECT_TRUE(opt_b->state().empty());

  // The same set of variables loads its state.
  auto c = tiny();
  std::vector<torch::Tensor> c_fc = {c->named_parameters()["fc.weight"], c->named_parameters()["fc.bias"]};
  torch::optim::SGD opt_c(c_fc, torch::optim::SGDOptions(0.05).momentum(0.9));
  restore_checkpoint(path, *c, &opt_c, RestoreOptions{});
  EXPECT_EQ(opt_c.state().size(), 2u);
}

TEST(Checkpoint, KeepsNewestNAndIndexNamesTheNewest) {
  TempDir dir;
  auto m = tiny();
  auto opt = sgd(m);
  CheckpointManager manager(dir.str(), /*max_to_keep=*/2);
  for (int64_t step : {2, 9, 10, 11}) manager.save(step, *m, opt.get(), tiny_meta());
  // Numeric order, not lexicographic: 10 and 11 are newer than 9.
  EXPECT_EQ(test::list_dir(dir.str()), (std::vector<std::string>{"checkpoint", "ckpt-10.pt", "ckpt-11.pt"}));
  const std::string index = test::read_bytes(dir.file("checkpoint"));
  EXPECT_EQ(index.rfind("model_checkpoint_path: \"ckpt-11.pt\"\n", 0), 0u) << index;
  EXPECT_NE(index.find("all_model_checkpoint_paths: \"ckpt-10.pt\""), std::string::npos) << index;
  EXPECT_EQ(index.find("ckpt-9.pt"), std::string::npos) << index;
  EXPECT_EQ(manager.latest(), dir.file("ckpt-11.pt"));
  const auto listed = manager.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].first, 10);
  EXPECT_EQ(listed[1].first, 11);
}

TEST(Checkpoint, LatestFallsBackToScanning) {
  TempDir dir;
  CheckpointManager manager(dir.str());
  EXPECT_EQ(manager.latest(), "");
  EXPECT_EQ(CheckpointManager(dir.file("absent")).latest(), "");
  auto m = tiny();
  manager.save(5, *m, nullptr, tiny_meta());
  manager.save(20, *m, nullptr, tiny_meta());
  EXPECT_EQ(manager.latest(), dir.file("ckpt-20.pt"));
  // The index names a checkpoint that is gone (deleted by keep-N, or by hand).
  stdfs::remove(dir.file("ckpt-20.pt"));
  EXPECT_EQ(manager.latest(), dir.file("ckpt-5.pt"));
  // No index at all.
  stdfs::remove(dir.file("checkpoint"));
  EXPECT_EQ(manager.latest(), dir.file("ckpt-5.pt"));
}

TEST(Checkpoint, NoTempFilesLeftBehind) {
  TempDir dir;
  auto m = tiny();
  auto opt = sgd(m);
  CheckpointManager manager(dir.str());
  for (int64_t step = 1; step <= 3; ++step) manager.save(step, *m, opt.get(), tiny_meta());
  for (const auto& name : test::list_dir(dir.str()))
    EXPECT_TRUE(name == "checkpoint" || checkpoint_step(name) >= 0) << "stray file " << name;
}

TEST(Checkpoint, StaleTemporariesOfAKilledWriterAreRemoved) {
  TempDir dir;
  auto m = tiny();
  auto opt = sgd(m);
  CheckpointManager manager(dir.str());
  manager.save(5, *m, opt.get(), tiny_meta());
  for (const char* name : {"ckpt-10.pt.tmp-99999", "checkpoint.tmp-99999", "config.json.tmp-1"})
    test::write_bytes((dir.path() / name).string(), "partial");
  test::write_bytes((dir.path() / "notes.tmp-1").string(), "not ours");
  EXPECT_EQ(manager.remove_stale_temporaries(), 3);
  const auto names = test::list_dir(dir.str());
  EXPECT_EQ(std::count(names.begin(), names.end(), std::string("ckpt-5.pt")), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), std::string("notes.tmp-1")), 1);
  EXPECT_EQ(names.size(), 3u);  // ckpt-5.pt, checkpoint, notes.tmp-1
  EXPECT_EQ(manager.latest(), (dir.path() / "ckpt-5.pt").string());
}

TEST(Checkpoint, SignatureMismatchNamesIt) {
  TempDir dir;
  auto m = tiny();
  CheckpointManager(dir.str()).save(4, *m, nullptr, tiny_meta());
  auto other = tiny(5);
  RestoreOptions ro;
  ro.expect = tiny_meta(5);
  const std::string msg = error_of([&] { restore_checkpoint(dir.file("ckpt-4.pt"), *other, nullptr, ro); });
  EXPECT_NE(msg.find(dir.file("ckpt-4.pt")), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_classes=10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_classes=5"), std::string::npos) << msg;

  ro.expect = tiny_meta();
  ro.expect["model"] = "resnet18_small";
  const std::string msg2 = error_of([&] { restore_checkpoint(dir.file("ckpt-4.pt"), *m, nullptr, ro); });
  EXPECT_NE(msg2.find("model=resnet_tiny"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("model=resnet18_small"), std::string::npos) << msg2;

  ro.expect = {{"width", "8"}};  // a key the checkpoint does not have
  const std::string msg3 = error_of([&] { restore_checkpoint(dir.file("ckpt-4.pt"), *m, nullptr, ro); });
  EXPECT_NE(msg3.find("width=<absent>"), std::string::npos) << msg3;
}

TEST(Checkpoint, ShapeMismatchNamesTheVariable) {
  TempDir dir;
  auto m = tiny(10);
  CheckpointManager(dir.str()).save(4, *m, nullptr, tiny_meta());
  auto other = tiny(5);  // no signature check: the shapes must catch it
  const std::string msg =
      error_of([&] { restore_checkpoint(dir.file("ckpt-4.pt"), *other, nullptr, RestoreOptions{}); });
  EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[10, 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 64]"), std::string::npos) << msg;

  // A deeper model: variables the checkpoint lacks are listed.
  models::ModelConfig c;
  c.arch = "resnet18_small";
  c.num_classes = 10;
  c.width = 8;
  auto deeper = models::build_resnet(c);
  const std::string msg2 =
      error_of([&] { restore_checkpoint(dir.file("ckpt-4.pt"), *deeper, nullptr, RestoreOptions{}); });
  EXPECT_NE(msg2.find("missing from the checkpoint"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("layer1.1."), std::string::npos) << msg2;
}

TEST(Checkpoint, GarbageAndTruncatedFiles) {
  TempDir dir;
  auto m = tiny();
  test::write_bytes(dir.file("ckpt-1.pt"), test::random_bytes(4096, 7));
  const std::string msg = error_of([&] { restore_checkpoint(dir.file("ckpt-1.pt"), *m, nullptr, RestoreOptions{}); });
  EXPECT_NE(msg.find(dir.file("ckpt-1.pt")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an Orchard checkpoint"), std::string::npos) << msg;

  test::write_bytes(dir.file("ckpt-2.pt"), "");
  EXPECT_NE(error_of([&] {
              restore_checkpoint(dir.file("ckpt-2.pt"), *m, nullptr, RestoreOptions{});
            }).find(dir.file("ckpt-2.pt")),
            std::string::npos);

  CheckpointManager(dir.file("good")).save(3, *m, nullptr, tiny_meta());
  const std::string good = test::read_bytes(dir.file("good/ckpt-3.pt"));
  test::write_bytes(dir.file("ckpt-4.pt"), good.substr(0, good.size() / 2));
  EXPECT_NE(error_of([&] {
              restore_checkpoint(dir.file("ckpt-4.pt"), *m, nullptr, RestoreOptions{});
            }).find(dir.file("ckpt-4.pt")),
            std::string::npos);

  // A valid pickle that is not a checkpoint dict.
  auto bytes = torch::pickle_save(c10::IValue(int64_t{42}));
  test::write_bytes(dir.file("ckpt-5.pt"), std::string(bytes.begin(), bytes.end()));
  EXPECT_NE(error_of([&] {
              restore_checkpoint(dir.file("ckpt-5.pt"), *m, nullptr, RestoreOptions{});
            }).find("not an Orchard checkpoint"),
            std::string::npos);

  EXPECT_THROW(restore_checkpoint(dir.file("ckpt-404.pt"), *m, nullptr, RestoreOptions{}), Error);
}

}  // namespace
}  // namespace orchard::train
