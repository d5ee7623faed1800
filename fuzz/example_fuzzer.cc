// tf.train.Example / SequenceExample parsing (issue 31): the input is one serialized record, as
// a TFRecord holds it. It goes through `orchard data inspect`'s record_to_json, ExampleView's
// typed accessors, and every task's record parser with the preprocessing each runs in training
// and evaluation (ImageNet classification, ML-Images multi-label, OD API detection, im2txt
// captioning), at small output sizes.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "orchard/core/error.h"
#include "orchard/data/caption.h"
#include "orchard/data/detection.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/imagenet.h"
#include "orchard/data/ml_images.h"
#include "orchard/proto/example.pb.h"

using orchard::fuzz::expect_clean;

namespace {

using namespace orchard::data;  // NOLINT: every call below is into orchard::data

constexpr int kImageSize = 32;     // classification and caption crops
constexpr int64_t kClassNum = 5;   // ML-Images label vector length (the seed records use 5)
constexpr int64_t kMaxBoxes = 16;  // detection padding

void run_parser(const ParseFn& parse, const SampleSpec& spec, const std::string& record, std::mt19937_64& rng) {
  size_t image_floats = 1;
  for (int64_t d : spec.image_shape) image_floats *= static_cast<size_t>(d);
  std::vector<float> image(image_floats);
  std::vector<std::vector<uint8_t>> fields;
  SampleOut out;
  out.image = image.data();
  for (const auto& f : spec.fields) {
    size_t n = 1;
    for (int64_t d : f.shape) n *= static_cast<size_t>(d);
    fields.emplace_back(n * 8);  // 8 bytes per element covers float, int64 and bool
    out.fields.push_back(fields.back().data());
  }
  expect_clean([&] { parse(record, "fuzz: record 0", rng, out); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  orchard::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string record(reinterpret_cast<const char*>(data), size);
  std::mt19937_64 rng(size);

  expect_clean([&] { record_to_json(record); });
  expect_clean([&] {
    ExampleView view(record, "fuzz: record 0");
    for (const auto& entry : view.features().feature()) {
      const std::string& key = entry.first;  // a structured binding cannot be captured in C++17
      expect_clean([&] { view.bytes(key); });
      expect_clean([&] { view.int64(key); });
      expect_clean([&] { view.float32(key); });
      expect_clean([&] { view.floats(key); });
      expect_clean([&] { view.int64s(key); });
      expect_clean([&] { view.bytes_list(key); });
    }
    features_to_json(view.features());
  });

  for (bool training : {true, false}) {
    ImageNetParseOptions imagenet;
    imagenet.preprocess.image_size = kImageSize;
    imagenet.training = training;
    run_parser(make_imagenet_parser(imagenet), imagenet_spec(kImageSize, false), record, rng);

    MlImagesParseOptions ml;
    ml.preprocess.image_size = kImageSize;
    ml.preprocess.channels_last = true;
    ml.training = training;
    ml.class_num = kClassNum;
    run_parser(make_ml_images_parser(ml), ml_images_spec(kImageSize, true, kClassNum), record, rng);
  }

  expect_clean([&] {
    const DetectionExample example = parse_detection_example(record, "fuzz: record 0", 90);
    DetectionInputOptions options;
    options.height = 24;
    options.width = 32;
    options.max_boxes = kMaxBoxes;
    options.augmentation.random_horizontal_flip = true;
    options.augmentation.ssd_random_crop = default_ssd_random_crop();
    std::vector<float> image(3 * 24 * 32);
    std::vector<float> boxes(kMaxBoxes * 4);
    std::vector<int64_t> classes(kMaxBoxes), num_boxes(1), image_id(1), original_size(2);
    std::vector<uint8_t> crowd(kMaxBoxes);
    DetectionTargets targets{boxes.data(),     classes.data(),  reinterpret_cast<bool*>(crowd.data()),
                             num_boxes.data(), image_id.data(), original_size.data()};
    for (bool training : {true, false})
      expect_clean([&] { preprocess_detection(example, options, training, rng, image.data(), &targets, "fuzz"); });
  });

  expect_clean([&] {
    const CaptionExample example = parse_caption_example(record, "fuzz: record 0");
    CaptionImageOptions options;
    options.image_size = kImageSize;
    options.resize_size = kImageSize + 5;
    std::vector<float> image(3 * kImageSize * kImageSize);
    for (bool training : {true, false})
      expect_clean([&] { preprocess_caption_image(example.encoded, options, training, rng, image.data(), "fuzz"); });
  });
  return 0;
}
