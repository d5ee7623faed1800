// The golden runs: for each of the four tasks, a tiny fixed-seed training run through the
// `orchard` binary as a user runs it (one thread, 20 steps, the loss logged at every step),
// compared with what main recorded before the engine redesign (tests/golden/golden.json; detect
// recorded again on 2026-12-03 when the SSD backbone took TF's 'SAME' padding, issue 32).
// detect is an SSD; the other detection meta-architectures have their own runs on the shapes
// set (recorded 2026-12-07 on main f27d9d2, before issue 54's restructuring), 10 steps at
// batch 2 each: faster_rcnn, mask_rcnn (the records' masks) and rfcn (two_stage_config below).
// For each run:
//   - the per-step training losses of the TensorBoard train summaries (float32 bits),
//   - every tensor of the final checkpoint ("model", and "training_weights" where present)
//     as the CRC-32C of its bytes plus its sum.
// Same CPU kind as the recording (the CPU's vector kernels: AVX-512, AVX2 or neither; OpenBLAS
// pinned to that kind's kernels, whatever the CPU's vendor or the environment): bit-identical
// to the recording, or to one of the task's recorded alternatives (golden.json). Another kind
// (other SIMD kernels): losses and tensor sums within a relative 1e-3 (the kernels round
// differently), which the message says.
//
// ORCHARD_GOLDEN_RECORD=<file> writes the values to <file> instead of comparing.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/crc32c.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"

namespace orchard::cli {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using test::TempDir;

constexpr int kSteps = 20;
constexpr int kTwoStageSteps = 10;

// The vector kernels ATen dispatches to on this CPU (its CPU capability): avx512, avx2 or
// default, from the kernel's flags.
std::string cpu_kind() {
  const std::string info = test::read_bytes("/proc/cpuinfo");
  const auto has = [&](const char* flag) { return info.find(std::string(" ") + flag + " ") != std::string::npos; };
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) return "avx512";
  if (has("avx2") && has("fma")) return "avx2";
  return "default";
}

// The per-step "loss" of model_dir/<sub>/events.out.tfevents.* as float32 bit patterns.
json losses(const std::string& events_dir, const std::string& tag) {
  const auto files = files_with(events_dir, "events.out.tfevents.");
  EXPECT_FALSE(files.empty()) << events_dir;
  std::map<int64_t, float> by_step;
  for (const auto& f : files)
    for (const auto& e : read_scalar_events(f))
      if (e.tag == tag) by_step[e.step] = static_cast<float>(e.value);
  json out = json::object();
  for (const auto& [step, v] : by_step) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    out[std::to_string(step)] = {{"bits", bits}, {"value", v}};
  }
  return out;
}

// {"model/<name>": {crc, sum, shape}} for the final checkpoint's tensors.
json checkpoint_digest(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  auto root = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, reader);
  auto dict = root.toGenericDict();
  json out = json::object();
  for (const char* key : {"model", "training_weights"}) {
    if (!dict.contains(key)) continue;
    for (const auto& e : dict.at(key).toGenericDict()) {
      auto t = e.value().toTensor().contiguous().cpu();
      const auto* bytes = static_cast<const char*>(t.data_ptr());
      const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
      std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      out[std::string(key) + "/" + e.key().toStringRef()] = {
          {"crc", crc32c::value(bytes, n)}, {"sum", t.to(torch::kDouble).sum().item<double>()}, {"shape", shape}};
    }
  }
  out["step"] = dict.at("step").toInt();
  return out;
}

std::string newest_checkpoint(const std::string& dir) {
  auto all = files_with(dir, "ckpt-");
  std::string best;
  int64_t best_step = -1;
  for (const auto& f : all) {
    const auto name = stdfs::path(f).filename().string();
    if (name.size() < 9 || name.substr(name.size() - 3) != ".pt") continue;
    const int64_t s = std::stoll(name.substr(5, name.size() - 8));
    if (s > best_step) best_step = s, best = f;
  }
  EXPECT_FALSE(best.empty()) << "no checkpoint in " << dir;
  return best;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

// The two-stage runs' model: Faster R-CNN as faster_rcnn_resnet50_coco builds it (ResNet-50 C4
// at stride 16 from scratch, frozen batch norms, the RPN, 8x8 crops max-pooled to 4x4) at 96x96,
// the side the SSD run's resizer takes the 64x64 shapes images to (a 6x6 first-stage map), with
// 16 proposals and 8 sampled per image; SECOND_STAGE_BOX_PREDICTOR is the box predictor (and any
// fields after it).
constexpr const char* kTwoStageModel = R"(model {
  faster_rcnn {
    num_classes: 3
    number_of_stages: NUMBER_OF_STAGES
    image_resizer {
      fixed_shape_resizer {
        height: 96
        width: 96
      }
    }
    feature_extractor {
      type: "faster_rcnn_resnet50"
      first_stage_features_stride: 16
    }
    first_stage_anchor_generator {
      grid_anchor_generator {
        height: 32
        width: 32
        scales: [0.5, 1.0, 2.0]
        aspect_ratios: [0.5, 1.0, 2.0]
        height_stride: 16
        width_stride: 16
      }
    }
    first_stage_box_predictor_conv_hyperparams {
      op: CONV
      regularizer {
        l2_regularizer {
          weight: 0.0
        }
      }
      initializer {
        truncated_normal_initializer {
          stddev: 0.01
        }
      }
    }
    first_stage_nms_score_threshold: 0.0
    first_stage_nms_iou_threshold: 0.7
    first_stage_max_proposals: 16
    first_stage_localization_loss_weight: 2.0
    first_stage_objectness_loss_weight: 1.0
    initial_crop_size: 8
    maxpool_kernel_size: 2
    maxpool_stride: 2
    second_stage_box_predictor {
      SECOND_STAGE_BOX_PREDICTOR
    }
    second_stage_batch_size: 8
    second_stage_post_processing {
      batch_non_max_suppression {
        score_threshold: 0.0
        iou_threshold: 0.6
        max_detections_per_class: 10
        max_total_detections: 10
      }
      score_converter: SOFTMAX
    }
    second_stage_localization_loss_weight: 2.0
    second_stage_classification_loss_weight: 1.0EXTRA_FIELDS
  }
}
)";

constexpr const char* kConvHyperparams = R"(conv_hyperparams {
          op: CONV
          regularizer {
            l2_regularizer {
              weight: 0.0
            }
          }
          initializer {
            truncated_normal_initializer {
              stddev: 0.01
            }
          }
        })";

constexpr const char* kFcHyperparams = R"(fc_hyperparams {
          op: FC
          regularizer {
            l2_regularizer {
              weight: 0.0
            }
          }
          initializer {
            variance_scaling_initializer {
              factor: 1.0
              uniform: true
              mode: FAN_AVG
            }
          }
        })";

// The shapes set's pipeline.config (data_dir/pipeline.config) with its SSD replaced by the
// two-stage model above, at batch 2 and the learning rate of tests/cli's Mask R-CNN run
// (Adam, cosine from 0.002 after a warmup from 0.0002); masks: the records' masks loaded.
std::string two_stage_config(const std::string& data_dir, const std::string& box_predictor, int stages,
                             const std::string& extra_fields, bool masks) {
  std::string text = read_file((stdfs::path(data_dir) / "pipeline.config").string());
  const auto model_start = text.find("model {"), model_end = text.find("train_config {");
  EXPECT_LT(model_start, model_end);
  std::string model = replace(kTwoStageModel, "SECOND_STAGE_BOX_PREDICTOR", box_predictor);
  model = replace(model, "NUMBER_OF_STAGES", std::to_string(stages));
  model = replace(model, "EXTRA_FIELDS", extra_fields);
  text.replace(model_start, model_end - model_start, model);
  text = replace(text, "batch_size: 32", "batch_size: 2");
  text = replace(text, "learning_rate_base: 0.01", "learning_rate_base: 0.002");
  text = replace(text, "warmup_learning_rate: 0.001", "warmup_learning_rate: 0.0002");
  if (masks)
    for (const char* reader : {"train_input_reader {", "eval_input_reader {"})
      text = replace(text, reader, std::string(reader) + "\n  load_instance_masks: true\n  mask_type: PNG_MASKS");
  return text;
}

class Golden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    // OpenBLAS's kernels and blocking come from the CPU model or from the environment
    // (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE; a machine may set them: Haswell kernels on an AVX-512
    // EPYC) and change the rounding: the runs take the kernels of the recording's capability (any
    // CPU of that capability runs them) and OpenBLAS's own cache sizes.
    ::setenv("OPENBLAS_CORETYPE", openblas_core(cpu_kind()), 1);
    ::unsetenv("OPENBLAS_L2_SIZE");
    std::cerr << "golden: CPU capability " << cpu_kind() << ", OpenBLAS kernels " << std::getenv("OPENBLAS_CORETYPE")
              << "\n";
    const char* record = std::getenv("ORCHARD_GOLDEN_RECORD");
    if (record && *record) {
      record_path_ = record;
    } else {
      expected_ = json::parse(test::read_bytes(std::string(ORCHARD_TEST_GOLDEN_DIR) + "/golden.json"));
    }
  }
  static const char* openblas_core(const std::string& capability) {
    return capability == "avx512" ? "SKYLAKEX" : capability == "avx2" ? "HASWELL" : "PRESCOTT";
  }
  static void TearDownTestSuite() {
    if (!record_path_.empty()) {
      recorded_["cpu_capability"] = cpu_kind();
      atomic_write_file(record_path_, recorded_.dump(1) + "\n");
    }
  }

  // Records or compares one task's run.
  void check(const std::string& task, const std::string& model_dir, const std::string& loss_tag, int steps = kSteps) {
    json got = {{"losses", losses((stdfs::path(model_dir) / "train").string(), loss_tag)},
                {"checkpoint", checkpoint_digest(newest_checkpoint(model_dir))}};
    ASSERT_EQ(got["losses"].size(), static_cast<size_t>(steps)) << got["losses"].dump(1);
    if (!record_path_.empty()) {
      recorded_[task] = got;
      return;
    }
    ASSERT_TRUE(expected_.contains(task)) << "golden.json has no " << task;
    const bool same_cpu = expected_.value("cpu_capability", "") == cpu_kind();
    // A task may have further recordings of the same capability ("alternatives", with the
    // reason in golden.json): runs on another machine that differ for a cause not pinned down
    // yet. A run equal bit for bit to one of them passes; otherwise it is compared with the first.
    const json* chosen = &expected_[task];
    if (same_cpu && expected_.contains("alternatives") && expected_["alternatives"].contains(task))
      for (const auto& alt : expected_["alternatives"][task]["runs"])
        if (alt["losses"] == got["losses"] && alt["checkpoint"] == got["checkpoint"]) chosen = &alt;
    const json& want = *chosen;
    if (!same_cpu)
      std::cerr << "golden: recorded on CPU capability " << expected_.value("cpu_capability", "?") << ", this is "
                << cpu_kind() << ": comparing within a relative 1e-3 instead of bit for bit\n";
    auto close = [](double a, double b, double abs_floor) {
      return std::abs(a - b) <= 1e-3 * std::max(std::abs(a), std::abs(b)) + abs_floor;
    };
    for (const auto& [step, w] : want["losses"].items()) {
      ASSERT_TRUE(got["losses"].contains(step)) << task << ": no loss at step " << step;
      const auto& g = got["losses"][step];
      if (same_cpu)
        EXPECT_EQ(g["bits"].get<uint32_t>(), w["bits"].get<uint32_t>())
            << task << " loss at step " << step << ": " << g["value"] << " != golden " << w["value"];
      else
        EXPECT_TRUE(close(g["value"].get<double>(), w["value"].get<double>(), 0))
            << task << " loss at step " << step << ": " << g["value"] << " vs golden " << w["value"];
    }
    const json& wc = want["checkpoint"];
    const json& gc = got["checkpoint"];
    EXPECT_EQ(gc.size(), wc.size()) << task << ": tensor count";
    for (const auto& [name, w] : wc.items()) {
      if (name == "step") {
        EXPECT_EQ(gc["step"], w) << task;
        continue;
      }
      ASSERT_TRUE(gc.contains(name)) << task << ": checkpoint lacks " << name;
      const auto& g = gc[name];
      EXPECT_EQ(g["shape"], w["shape"]) << task << " " << name;
      if (same_cpu)
        EXPECT_EQ(g["crc"].get<uint32_t>(), w["crc"].get<uint32_t>())
            << task << " " << name << " differs (sum " << g["sum"] << " vs golden " << w["sum"] << ")";
      else
        EXPECT_TRUE(close(g["sum"].get<double>(), w["sum"].get<double>(), 1e-3))
            << task << " " << name << " sum " << g["sum"] << " vs golden " << w["sum"];
    }
  }

  void two_stage(const std::string& task, const std::string& box_predictor, int stages, const std::string& extra_fields,
                 bool masks);

  static std::string record_path_;
  static json expected_, recorded_;
};
std::string Golden::record_path_;
json Golden::expected_, Golden::recorded_;

TEST_F(Golden, Classify) {
  TempDir root;
  const std::string data = root.file("fmnist");
  auto r = run({"data", "fashion-mnist", "--out_dir", data, "--limit", "160", "--num_shards", "2",
                "--num_validation_shards", "1"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string model = root.file("model");
  // 160 / 16 = 10 steps per epoch, 2 epochs; the moving average puts "training_weights" in
  // the checkpoint too.
  r = run({"classify",
           "train",
           "--data_dir",
           data,
           "--model_dir",
           model,
           "--model",
           "resnet_tiny",
           "--image_size",
           "28",
           "--batch_size",
           "16",
           "--train_epochs",
           "2",
           "--steps_per_loop",
           "1",
           "--log_steps",
           "1",
           "--seed",
           "3",
           "--num_threads",
           "1",
           "--datasets_num_private_threads",
           "1",
           "--base_learning_rate",
           "1.6",
           "--warmup_epochs",
           "1",
           "--moving_average_decay",
           "0.9",
           "--enable_checkpoint_and_export",
           "--enable_tensorboard"},
          root);
  ASSERT_EQ(r.rc, 0) << r.err;
  check("classify", model, "loss");
}

TEST_F(Golden, MultiLabel) {
  TempDir root;
  const std::string data = root.file("tags");
  auto r = run({"data", "shapes", "--task", "multilabel", "--out_dir", data, "--num_train", "160", "--num_validation",
                "32", "--seed", "3"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string model = root.file("model");
  r = run({"multilabel",
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
           "16",
           "--max_iter",
           std::to_string(kSteps),
           "--log_interval",
           "1",
           "--snapshot",
           "10",
           "--test_interval",
           "20",
           "--num_preprocess_threads",
           "1",
           "--num_threads",
           "1",
           "--seed",
           "3",
           "--lr",
           "0.8"},
          root);
  ASSERT_EQ(r.rc, 0) << r.err;
  check("multilabel", model, "loss");
}

TEST_F(Golden, Detect) {
  TempDir root;
  const std::string data = root.file("shapes");
  auto r = run({"data", "shapes", "--task", "detection", "--out_dir", data, "--num_train", "64", "--num_validation",
                "16", "--seed", "3"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string model = root.file("model");
  r = run({"detect", "train", "--pipeline_config_path", data + "/pipeline.config", "--model_dir", model,
           "--num_train_steps", std::to_string(kSteps), "--save_checkpoints_steps", "10", "--log_steps", "1", "--seed",
           "3", "--num_preprocess_threads", "1", "--num_threads", "1"},
          root);
  ASSERT_EQ(r.rc, 0) << r.err;
  check("detect", model, "Loss/total_loss");
}

// The two-stage runs: the shapes detection set (with masks for Mask R-CNN) and the model of
// two_stage_config, kTwoStageSteps steps at batch 2 through `orchard detect train`. From
// scratch, the box classifier's losses in the train summaries are 0 at some of the first steps
// (steps 3-5 of faster_rcnn, 1-3 of mask_rcnn, 5 of rfcn) and large after (tens to hundreds:
// its 2048-channel block4 features are unnormalised); steps 6-10 of each run have every loss
// term nonzero, the mask loss included.
void Golden::two_stage(const std::string& task, const std::string& box_predictor, int stages,
                       const std::string& extra_fields, bool masks) {
  TempDir root;
  const std::string data = root.file("shapes");
  std::vector<std::string> args = {"data",        "shapes", "--task",           "detection", "--out_dir", data,
                                   "--num_train", "32",     "--num_validation", "8",         "--seed",    "3"};
  if (masks) args.push_back("--include_masks");
  auto r = run(args, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string cfg = root.file(task + ".config"), model = root.file("model");
  atomic_write_file(cfg, two_stage_config(data, box_predictor, stages, extra_fields, masks));
  r = run({"detect",
           "train",
           "--pipeline_config_path",
           cfg,
           "--model_dir",
           model,
           "--num_train_steps",
           std::to_string(kTwoStageSteps),
           "--save_checkpoints_steps",
           std::to_string(kTwoStageSteps),
           "--save_checkpoints_secs",
           "0",
           "--log_steps",
           "1",
           "--seed",
           "3",
           "--num_preprocess_threads",
           "1",
           "--num_threads",
           "1"},
          root);
  ASSERT_EQ(r.rc, 0) << r.err;
  check(task, model, "Loss/total_loss", kTwoStageSteps);
}

TEST_F(Golden, FasterRcnn) {
  two_stage("faster_rcnn",
            std::string("mask_rcnn_box_predictor {\n        use_dropout: false\n        dropout_keep_probability: 1.0\n"
                        "        ") +
                kFcHyperparams + "\n      }",
            2, "", false);
}

// Mask R-CNN: the mask head of tests/cli's Mask R-CNN run (15x15 masks, two convolutions,
// number_of_stages 3, mask loss weight 4).
TEST_F(Golden, MaskRcnn) {
  two_stage("mask_rcnn",
            std::string("mask_rcnn_box_predictor {\n        use_dropout: false\n        dropout_keep_probability: 1.0\n"
                        "        predict_instance_masks: true\n        mask_height: 15\n        mask_width: 15\n"
                        "        mask_prediction_conv_depth: 0\n        mask_prediction_num_conv_layers: 2\n        ") +
                kConvHyperparams + "\n        " + kFcHyperparams + "\n      }",
            3, "\n    second_stage_mask_prediction_loss_weight: 4.0", true);
}

// R-FCN: the position-sensitive box predictor (3x3 bins, 6x6 crops, depth 64) on block4 run
// over the whole first-stage map.
TEST_F(Golden, Rfcn) {
  two_stage("rfcn",
            std::string("rfcn_box_predictor {\n        ") + kConvHyperparams +
                "\n        crop_height: 6\n        crop_width: 6\n        num_spatial_bins_height: 3\n"
                "        num_spatial_bins_width: 3\n        depth: 64\n      }",
            2, "", false);
}

TEST_F(Golden, Caption) {
  TempDir root;
  const std::string data = root.file("captions");
  auto r = run({"data", "shapes", "--task", "captioning", "--out_dir", data, "--num_train", "96", "--num_validation",
                "16", "--seed", "3"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string model = root.file("train");
  r = run({"caption",
           "train",
           "--input_file_pattern",
           data + "/train-*",
           "--train_dir",
           model,
           "--train_steps",
           std::to_string(kSteps),
           "--save_checkpoints_steps",
           "10",
           "--save_checkpoints_secs",
           "0",
           "--log_every_n_steps",
           "1",
           "--image_size",
           "75",
           "--train_batch_size",
           "8",
           "--train_inception",
           "--optimizer",
           "Adam",
           "--train_inception_learning_rate",
           "0.002",
           "--num_preprocess_threads",
           "1",
           "--num_threads",
           "1",
           "--seed",
           "3"},
          root);
  ASSERT_EQ(r.rc, 0) << r.err;
  check("caption", model, "loss");
}

}  // namespace
}  // namespace orchard::cli
