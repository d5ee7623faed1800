// `orchard classify|multilabel export --format tflite`: Arm NN's TfLite parser and reference
// backend (Debian's python3-pyarmnn; tests/cli/armnn_tflite.py), a TFLite implementation that
// shares no code with Orchard, runs each exported file and must reproduce Orchard's outputs.
// The SSD's TFLite export is checked beside its other exports (export_cli_test.cc).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/export_models.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/detection.h"
#include "orchard/detect/metrics/coco_eval.h"
#include "orchard/models/image_model.h"

namespace orchard {
namespace test {

std::vector<at::Tensor> run_tflite_in_armnn(const std::string& tflite, const at::Tensor& input, const std::string& work,
                                            int64_t runs) {
  const auto x = input.contiguous();
  atomic_write_file(work + "/input.bin",
                    std::string(static_cast<const char*>(x.data_ptr()), static_cast<size_t>(x.nbytes())));
  const std::string command = "/usr/bin/python3 " + std::string(ARMNN_TFLITE_SCRIPT) + " " + tflite + " " + work +
                              "/input.bin " + work + " > " + work + "/armnn.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "Arm NN could not run " << tflite << ":\n" << read_file(work + "/armnn.log");
    return {};
  }
  std::vector<at::Tensor> outputs;
  const auto listing = nlohmann::json::parse(read_file(work + "/outputs.json"));
  for (size_t i = 0; i < listing.size(); ++i) {
    const std::string bytes = read_file(work + "/" + std::to_string(i) + ".bin");
    const auto shape = listing[i]["shape"].get<std::vector<int64_t>>();
    auto value = torch::from_blob(const_cast<char*>(bytes.data()), shape, torch::kFloat).clone();
    outputs.push_back(runs == 1 ? value.squeeze(0) : value);
  }
  return outputs;
}

double tflite_detection_ap50(const std::string& tflite, const std::string& records, int64_t size, int64_t num_classes,
                             const std::string& work) {
  // The images resized and scaled to [-1, 1] by Orchard's evaluation input path, as uint8 with
  // the converter's mean 128 and std 128: q = 128 x + 128.
  TFRecordReader reader(records);
  std::vector<data::DetectionExample> examples;
  std::vector<torch::Tensor> images;
  data::DetectionInputOptions input_options;
  input_options.height = input_options.width = size;
  input_options.channels_last = true;
  std::mt19937_64 rng(1);
  for (std::string rec; reader.next(&rec);) {
    examples.push_back(data::parse_detection_example(rec, "validation", num_classes));
    auto image = torch::empty({size, size, 3});
    data::preprocess_detection(examples.back(), input_options, /*training=*/false, rng, image.data_ptr<float>(),
                               nullptr, "validation");
    images.push_back((image * 128 + 128).round().clamp(0, 255).to(torch::kUInt8));
  }
  const auto n = static_cast<int64_t>(examples.size());
  auto out = run_tflite_in_armnn(tflite, torch::stack(images), work, n);
  if (out.size() != 4u) {  // boxes [n, 1, k, 4], classes, scores, num_detections: batch 1 each
    ADD_FAILURE() << tflite << ": " << out.size() << " outputs, the detection op's 4 expected";
    return -1;
  }
  for (auto& t : out) t = t.squeeze(1);
  detect::CocoEvaluator coco;
  const auto side = static_cast<double>(size);
  for (int64_t i = 0; i < n; ++i) {
    const auto& ex = examples[static_cast<size_t>(i)];
    coco.add_image(i);
    for (size_t k = 0; k < ex.boxes.size(); ++k) {
      const auto& b = ex.boxes[k];
      coco.add_ground_truth(
          {i, ex.classes[k], b.xmin * side, b.ymin * side, (b.xmax - b.xmin) * side, (b.ymax - b.ymin) * side});
    }
    const auto count = static_cast<int64_t>(out[3][i].item<float>());
    for (int64_t d = 0; d < count; ++d) {
      const auto box = out[0][i][d].clamp(0, 1) * side;  // ymin, xmin, ymax, xmax, clipped as the OD API's
      detect::CocoDetection det;
      det.image_id = i;
      det.category_id = static_cast<int64_t>(out[1][i][d].item<float>()) + 1;  // 0: the first class
      det.x = box[1].item<double>(), det.y = box[0].item<double>();
      det.w = (box[3] - box[1]).item<double>(), det.h = (box[2] - box[0]).item<double>();
      det.score = out[2][i][d].item<double>();
      coco.add_detection(det);
    }
  }
  return coco.evaluate().stats[1];
}

}  // namespace test
namespace {

struct TfliteCase {
  std::string task, arch;
  int size;
};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return a.sizes() == b.sizes() ? (a - b).abs().max().item<double>() : 1e9;
}

class ExportTflite : public ::testing::TestWithParam<TfliteCase> {};

TEST_P(ExportTflite, ArmNnReproducesLogitsProbsAndFeatures) {
  const auto& [task, arch, size] = GetParam();
  test::TempDir root;
  const std::string dir = root.file("model");
  auto module = test::write_model_dir(dir, task, arch, size);
  auto& model = dynamic_cast<models::ImageModelImpl&>(*module);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--out", root.file("m.tflite")},
                                             {"--out", root.file("f.tflite"), "--feature_vector"},
                                             {"--out", root.file("p.tflite"), "--include_preprocessing"}}) {
    std::vector<std::string> command = {task, "export", "--model_dir", dir, "--format", "tflite"};
    command.insert(command.end(), args.begin(), args.end());
    auto r = cli::run(command, root);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  const std::string magic = read_file(root.file("m.tflite")).substr(4, 4);
  EXPECT_EQ(magic, "TFL3");  // the schema's file_identifier

  torch::manual_seed(5);
  const auto x = torch::randn({1, 3, size, size}) * test::input_scale(arch);
  const auto nhwc = [](const torch::Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); };
  torch::NoGradGuard no_grad;
  const auto logits = model.forward(x), features = model.features(x);
  const auto probs = task == "classify" ? torch::softmax(logits, 1) : torch::sigmoid(logits);
  // Float32 arithmetic in another order: within 2e-4 of the output's scale (measured: up to 1.1e-4
  // for Inception-v3's features, whose values reach 24; 3e-5 for the others).
  const auto tol = [](const torch::Tensor& t) { return 2e-4 * std::max(1.0, t.abs().max().item<double>()); };

  const auto m = test::run_tflite_in_armnn(root.file("m.tflite"), nhwc(x), root.path());
  ASSERT_EQ(m.size(), 2u);  // logits, probs
  const auto f = test::run_tflite_in_armnn(root.file("f.tflite"), nhwc(x), root.path());
  ASSERT_EQ(f.size(), 1u);
  const double dl = max_diff(m[0], logits), dp = max_diff(m[1], probs), df = max_diff(f[0], features);

  const auto rgb = torch::randint(0, 256, {1, 3, size, size}).to(torch::kFloat);
  const auto scaled = test::scale_rgb(arch, rgb);
  const auto expected = model.forward(scaled);
  const auto p = test::run_tflite_in_armnn(root.file("p.tflite"), nhwc(rgb), root.path());
  ASSERT_EQ(p.size(), 2u);
  const double dpre = max_diff(p[0], expected);
  std::cout << arch << ": max |Arm NN (TFLite) - Orchard| logits " << dl << " (up to "
            << logits.abs().max().item<double>() << "), probs " << dp << ", features " << df
            << ", logits with preprocessing " << dpre << "\n";
  EXPECT_LE(dl, tol(logits));
  EXPECT_LE(dp, tol(logits));
  EXPECT_LE(df, tol(features));
  EXPECT_LE(dpre, tol(expected));
}

// A multi-label ResNet (torch's stem padding: explicit PAD ops, the max pool, residual ADDs with
// fused ReLUs, LOGISTIC), Inception-v3 (torchvision's count_include_pad pools as depthwise
// convolutions, concatenations), TF-Slim's Inception-v3 ('SAME' average pools) and MobileNetV2
// (depthwise convolutions, fused ReLU6). Arm NN's reference backend is slow (resnet50 at 64x64
// and the Model Garden's ResNet-50, which passed with 6.8e-5 and 6.1e-5 on the logits, took 25 s
// each): these four take ~50 s.
INSTANTIATE_TEST_SUITE_P(ImageModels, ExportTflite,
                         ::testing::Values(TfliteCase{"multilabel", "resnet_tiny", 32},
                                           TfliteCase{"classify", "inception_v3", 75},
                                           TfliteCase{"classify", "inception_v3_slim", 75},
                                           TfliteCase{"classify", "mobilenet_v2_slim", 64}),
                         [](const auto& info) { return info.param.task + "_" + info.param.arch; });

}  // namespace
}  // namespace orchard
