// `orchard checkpoint inspect` on checkpoints TensorFlow wrote (tests/fixtures/tf), and
// `orchard import-weights --format tf`: a TensorFlow checkpoint becomes a classify model_dir.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/models/registry.h"
#include "orchard/models/tf_weights.h"
#include "orchard/train/checkpoint.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
const stdfs::path kTf = stdfs::path(ORCHARD_TEST_FIXTURES) / "tf";

// The model `config` describes, with the weights of model_dir's newest checkpoint.
models::ImageModel load_model_dir(const models::ModelConfig& config, const std::string& model_dir) {
  auto model = models::build_model(config);
  train::RestoreOptions ro;
  ro.load_optimizer = false;
  ro.load_rng = false;
  train::restore_checkpoint(train::CheckpointManager(model_dir).latest(), *model, nullptr, ro);
  return model;
}

TEST(TfCheckpointInspect, ListsValuesAndJson) {
  test::TempDir root;
  const std::string v1 = (kTf / "half_plus_two_v1" / "export-00000-of-00001").string();
  auto r = run({"checkpoint", "inspect", "--stats", v1}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "(V1 TensorSlice): 2 variables, 2 values")) << r.out;
  EXPECT_TRUE(contains(r.out, "a (float32) []  = 0.5")) << r.out;
  EXPECT_TRUE(contains(r.out, "b (float32) []  = 2")) << r.out;

  r = run({"checkpoint", "inspect", "--json", (kTf / "estimator_ckpt").string()}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "V2 tensor bundle");
  EXPECT_EQ(j["variables"].size(), 60u);
  bool found = false;
  for (const auto& v : j["variables"])
    if (v["name"] == "global_step") {
      found = true;
      EXPECT_EQ(v["dtype"], "int64");
    }
  EXPECT_TRUE(found);

  r = run({"checkpoint", "inspect", "--tensor", "dnn/logits/bias", (kTf / "estimator_ckpt").string()}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "dnn/logits/bias (float32) [1]")) << r.out;
  EXPECT_TRUE(contains(r.out, "-0.0688979")) << r.out;

  // The TF2 object graph: each key's variable name.
  r = run({"checkpoint", "inspect", (kTf / "half_plus_two_tf2").string()}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "a/.ATTRIBUTES/VARIABLE_VALUE <- a")) << r.out;

  // The index alone (the data shard, which holds the object graph, not downloaded yet): keys,
  // dtypes and shapes, and a warning (seen on the TF2 detection zoo's ckpt-0.index).
  stdfs::create_directories(root.file("index_only"));
  stdfs::copy_file(kTf / "half_plus_two_tf2" / "variables.index", root.file("index_only/variables.index"));
  r = run({"checkpoint", "inspect", root.file("index_only/variables")}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "a/.ATTRIBUTES/VARIABLE_VALUE (float32) []")) << r.out;
  EXPECT_TRUE(contains(r.err, "listed without their variable names")) << r.err;

  r = run({"checkpoint", "inspect", root.file("model.ckpt")}, root);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "no TensorFlow checkpoint there")) << r.err;
}

TEST(TfCheckpointInspect, MapsTheModelZoosSsdOntoOrchards) {
  test::TempDir root;
  const auto dir = kTf / "ssd_mobilenet_v2_coco_2018_03_29";
  auto r = run({"checkpoint", "inspect", (dir / "model.ckpt.index").string(), "--pipeline_config_path",
                (dir / "pipeline.config").string()},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "ssd_mobilenet_v2 (90 classes, 1917 anchors), fine_tune_checkpoint_type detection"))
      << r.out;
  // Of the 344 variables, fine_tune_checkpoint_type detection re-initialises the 24 of the box
  // predictor (6 maps x box and class x weights and biases); the other 320 fit.
  EXPECT_TRUE(contains(r.out,
                       "320 matched, 0 set to their default (absent from the checkpoint), 0 missing, 0 with "
                       "another shape"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "24 re-initialised (box and class prediction heads")) << r.out;
  EXPECT_TRUE(contains(r.out, "unused     global_step")) << r.out;
  EXPECT_TRUE(contains(r.out, "backbone.features.2.conv.1.0.weight")) << r.out;
  // Its data shard is not in the repository: said without --stats, and in the verdict.
  EXPECT_TRUE(contains(r.err, "model.ckpt.data-00000-of-00001: the data file is missing")) << r.err;
  EXPECT_TRUE(contains(r.out,
                       "\nthis checkpoint fine-tunes this config: 320 restored, 24 re-initialised, 0 skipped, "
                       "once its data file is there\n"))
      << r.out;
  r = run({"checkpoint", "inspect", (dir / "model.ckpt.index").string()}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "345 variables")) << r.out;
  EXPECT_TRUE(contains(r.err, "model.ckpt.data-00000-of-00001: the data file is missing")) << r.err;
  // An image model without a map: said so.
  r = run({"checkpoint", "inspect", (dir / "model.ckpt").string(), "--map", "resnet50"}, root);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "no TensorFlow name map for this model")) << r.err;
}

// The zoo's ssd_mobilenet_v2_coco_2018_03_29 checkpoint (index only) against three configs: its
// own pipeline.config (use_depthwise: true) fits except for the re-initialised heads; the OD
// API's current sample ssd_mobilenet_v2_coco.config (upstream master, the tutorial's pairing) and
// Orchard's configs/ copy build full 3x3 extra layers and 1x1 heads (no use_depthwise), so the
// checkpoint's four separable extra-layer kernels do not fit: skipped, with the reason from the
// checkpoint's own pipeline.config beside it.
TEST(TfCheckpointInspect, SampleConfigsAgainstTheZoosCheckpoint) {
  test::TempDir root;
  const auto dir = kTf / "ssd_mobilenet_v2_coco_2018_03_29";
  auto r = run({"checkpoint", "inspect", (dir / "model.ckpt").string(), "--pipeline_config_path",
                (dir / "pipeline.config").string()},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "hint:")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "\nthis checkpoint fine-tunes this config: 320 restored, 24 re-initialised, 0 skipped, "
                       "once its data file is there\n"))
      << r.out;

  const auto sample = stdfs::path(ORCHARD_TEST_FIXTURES) / "od_api_configs" / "ssd_mobilenet_v2_coco.config";
  const auto orchards = stdfs::path(ORCHARD_TEST_FIXTURES) / ".." / ".." / "configs" / "ssd_mobilenet_v2_coco.config";
  for (const auto& config : {sample, orchards}) {
    r = run({"checkpoint", "inspect", (dir / "model.ckpt").string(), "--pipeline_config_path", config.string()}, root);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out,
                         "296 matched, 0 set to their default (absent from the checkpoint), 0 missing, 4 with "
                         "another shape"))
        << config << r.out;
    EXPECT_TRUE(contains(r.out,
                         "SHAPE      extras.0.1.0.weight                              [512, 256, 3, 3]   <- "
                         "FeatureExtractor/MobilenetV2/layer_19_2_Conv2d_2_3x3_s2_512/weights [1, 1, 256, 512]"))
        << r.out;
    EXPECT_TRUE(contains(r.out, "hint: the checkpoint's own " + (dir / "pipeline.config").string() +
                                    " builds a model that takes every variable it would restore"))
        << r.out;
    EXPECT_TRUE(contains(r.out, "model.ssd.feature_extractor.use_depthwise (false here, true there)")) << r.out;
    EXPECT_TRUE(contains(r.out, "hint: the checkpoint holds 4 of these layers as separable convolutions")) << r.out;
    EXPECT_TRUE(contains(r.out,
                         "\nthis checkpoint fine-tunes this config: 296 restored, 24 re-initialised, 4 skipped "
                         "(absent or of another shape: left as initialised; --strict_fine_tune refuses them), "
                         "once its data file is there\n"))
        << r.out;
  }
}

// A Model Garden ResNet-50 checkpoint (here written by Orchard's writer under its Keras names)
// imported as a classify model_dir holds exactly its variables.
TEST(TfCheckpointImportWeights, ResNet50GardenBecomesAModelDir) {
  test::TempDir root;
  models::ModelConfig c;
  c.arch = "resnet50_garden";
  c.num_classes = 7;
  auto source = models::build_model(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& b : source->named_buffers())
      if (b.value().is_floating_point()) b.value().uniform_(0.5, 1.5);
  }
  models::write_tf_checkpoint(root.file("garden/ckpt-1"), *source, models::tf_name_map("resnet50_garden"), 1);
  auto r = run({"import-weights", "--format", "tf", "--arch", "resnet50_garden", "--checkpoint",
                root.file("garden/ckpt-1.index"), "--out_dir", root.file("imported")},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "imported resnet50_garden (7 classes)")) << r.err;
  EXPECT_TRUE(contains(r.err, "1 TensorFlow variables not used (e.g. global_step)")) << r.err;
  auto restored = load_model_dir(c, root.file("imported"));
  auto want = source->named_parameters();
  for (const auto& p : restored->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();
  auto want_buffers = source->named_buffers();
  for (const auto& b : restored->named_buffers())
    if (b.value().is_floating_point()) {
      EXPECT_TRUE(torch::equal(b.value(), want_buffers[b.key()])) << b.key();
    }

  // And back out: `checkpoint export` (= classify export --format tf) gives the same variables.
  r = run({"checkpoint", "export", "--model_dir", root.file("imported"), "--out", root.file("back/model.ckpt")}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  {
    const tf::CheckpointReader original(root.file("garden/ckpt-1"));
    const tf::CheckpointReader back(root.file("back/model.ckpt"));
    ASSERT_EQ(back.variables().size(), original.variables().size());
    for (const auto& v : original.variables())
      if (v.name != "global_step") {
        EXPECT_EQ(back.read(v.name).data, original.read(v.name).data) << v.name;
      }
  }
  r = run({"checkpoint", "export", "--model_dir", root.file("nothing"), "--out", root.file("x")}, root);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "no config.json")) << r.err;

  // A model without TensorFlow names, and MobileNetV2 (TF-Slim's takes other inputs): errors.
  r = run({"import-weights", "--format", "tf", "--arch", "resnet50", "--checkpoint", root.file("garden/ckpt-1"),
           "--out_dir", root.file("x")},
          root);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "no TensorFlow names for this model")) << r.err;
  r = run({"import-weights", "--format", "tf", "--arch", "mobilenet_v2", "--checkpoint", root.file("garden/ckpt-1"),
           "--out_dir", root.file("x")},
          root);
  EXPECT_EQ(r.rc, 1);
  // Said as a checkpoint of another network before anything else is asked for (--num_classes:
  // the Model Garden checkpoint has no MobilenetV2/Logits).
  EXPECT_TRUE(contains(r.err, "not a checkpoint of --arch mobilenet_v2_slim: 0 of ")) << r.err;
  EXPECT_TRUE(contains(r.err, "MobilenetV2/Conv/weights absent")) << r.err;
  EXPECT_FALSE(contains(r.err, "--num_classes")) << r.err;
  // The right network without its classifier: then --num_classes is asked for.
  {
    models::ModelConfig mc;
    mc.arch = "mobilenet_v2_slim";
    mc.num_classes = 3;
    auto mobilenet = models::build_model(mc);
    const auto map = models::tf_name_map("mobilenet_v2_slim");
    models::write_tf_checkpoint(
        root.file("headless/model.ckpt"), *mobilenet,
        [&](const std::string& n) -> std::optional<models::TfName> {
          if (n.rfind("classifier.", 0) == 0) return std::nullopt;
          return map(n);
        },
        0);
  }
  r = run({"import-weights", "--format", "tf", "--arch", "mobilenet_v2", "--checkpoint", root.file("headless"),
           "--out_dir", root.file("y")},
          root);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err,
                       "its mobilenet_v2_slim network fits, but it has no MobilenetV2/Logits/Conv2d_1c_1x1/"
                       "biases to take --num_classes from; pass it"))
      << r.err;
}

// TF-Slim's MobileNetV2 and Inception-v3 (`--arch mobilenet_v2 | inception_v3`, as TF-Slim
// names them) become Orchard's _slim variants, which compute what TF-Slim's networks compute:
// 'SAME' strided convolutions, pools without the padding, [-1, 1] inputs.
TEST(TfCheckpointImportWeights, SlimNetworksBecomeTheirSlimVariants) {
  struct Case {
    std::string slim_arch, tf_arch;
    int size;
    double moving_variance;  // keeps the activations alive through the blocks (see below)
  };
  for (const auto& [slim_arch, tf_arch, size, moving_variance] :
       {Case{"mobilenet_v2_slim", "mobilenet_v2", 64, 0.03}, Case{"inception_v3_slim", "inception_v3", 75, 0.3}}) {
    SCOPED_TRACE(slim_arch);
    test::TempDir root;
    models::ModelConfig c;
    c.arch = slim_arch;
    c.num_classes = 11;  // TF-Slim's: 1001
    auto source = models::build_model(c);
    {
      torch::NoGradGuard no_grad;
      // Moving statistics that keep the activations alive through 20 blocks (means near 0,
      // variances below those of freshly drawn weights; with variances near 1 the activations
      // fade and every image gets the same logits).
      for (auto& b : source->named_buffers()) {
        if (!b.value().is_floating_point()) continue;
        if (b.key().find("running_mean") != std::string::npos) b.value().uniform_(-0.05, 0.05);
        else b.value().uniform_(moving_variance / 2, moving_variance * 2);
      }
    }
    models::write_tf_checkpoint(root.file("slim/model.ckpt"), *source, models::tf_name_map(slim_arch), 1);
    auto r = run({"import-weights", "--format", "tf", "--arch", tf_arch, "--checkpoint", root.file("slim"),
                  "--image_size", std::to_string(size), "--out_dir", root.file("imported")},
                 root);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "TF-Slim's " + tf_arch + " is Orchard's " + slim_arch)) << r.err;
    EXPECT_TRUE(contains(r.err, "imported " + slim_arch + " (11 classes)")) << r.err;
    const auto config = nlohmann::json::parse(read_file(root.file("imported/config.json")));
    EXPECT_EQ(config["model"], slim_arch);

    // The imported model computes what the source computes; the torchvision-padded network
    // with the same weights does not (the padding and the pools differ).
    auto restored = load_model_dir(c, root.file("imported"));
    models::ModelConfig torchvision = c;
    torchvision.arch = tf_arch;
    auto other = load_model_dir(torchvision, root.file("imported"));
    source->eval(), restored->eval(), other->eval();
    torch::NoGradGuard no_grad;
    // Two images unlike each other (noise images alike pool to nearly the same features).
    const auto x = torch::cat({torch::rand({1, 3, size, size}) * 2 - 1,
                               torch::linspace(-1, 1, size).view({1, 1, 1, size}).expand({1, 3, size, size})});
    const auto want = source->forward(x);
    ASSERT_GT((want[0] - want[1]).abs().max().item<double>(), 1e-3) << "the two images' logits do not differ";
    EXPECT_TRUE(torch::equal(restored->forward(x), want));
    EXPECT_GT((other->forward(x) - want).abs().max().item<double>(), 1e-3 * want.abs().max().item<double>());
    EXPECT_TRUE(models::takes_unit_range_inputs(slim_arch));
  }
}

// classify train --pretrained_filepath (Model Garden's flag) with a TensorFlow checkpoint: the
// backbone comes from it through the model's TensorFlow names, the classifier is new.
TEST(TfCheckpointClassify, PretrainedFilepathFineTunesTheBackbone) {
  test::TempDir root;
  models::ModelConfig c;
  c.arch = "mobilenet_v2_slim";
  c.num_classes = 11;
  auto source = models::build_model(c);
  models::write_tf_checkpoint(root.file("slim/model.ckpt"), *source, models::tf_name_map(c.arch), 1);
  const auto train = [&](const std::string& model, const std::string& dir) {
    // LR 0: the parameters stay what the fine-tune start gave them.
    return run({"classify",
                "train",
                "--use_synthetic_data",
                "--model",
                model,
                "--num_classes",
                "5",
                "--image_size",
                "32",
                "--batch_size",
                "8",
                "--train_steps",
                "1",
                "--base_learning_rate",
                "0",
                "--model_dir",
                root.file(dir),
                "--enable_checkpoint_and_export",
                "--num_train_examples",
                "64",
                "--pretrained_filepath",
                root.file("slim/model.ckpt")},
               root);
  };
  auto r = train(c.arch, "tuned");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "fine-tuning from the backbone of")) << r.err;
  models::ModelConfig tc = c;
  tc.num_classes = 5;
  auto tuned = load_model_dir(tc, root.file("tuned"));
  auto from = source->named_parameters();
  int compared = 0;
  for (const auto& p : tuned->named_parameters()) {
    if (p.key().rfind("classifier.", 0) == 0) {
      EXPECT_EQ(p.value().size(0), 5) << p.key();
      continue;
    }
    EXPECT_TRUE(torch::equal(p.value(), from[p.key()])) << p.key();
    ++compared;
  }
  EXPECT_GT(compared, 100);

  // A model without TensorFlow names cannot take it; the error names the flag.
  r = train("resnet_tiny", "tiny");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--pretrained_filepath")) << r.err;
}

}  // namespace
}  // namespace orchard::cli
