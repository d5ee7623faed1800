// Regression tests for what the fuzz targets found (fuzz/README.md, issue 31). Each reproducer
// is a file under tests/fixtures/fuzz/<target>/; it must now fail with a clean DataError (or be
// accepted), never with another exception, a sanitizer report or undefined behaviour.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/caption.h"
#include "orchard/data/detection.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/detect/dataset_tools/coco.h"

namespace orchard::data {
namespace {

namespace stdfs = std::filesystem;

const stdfs::path kFuzzFixtures = stdfs::path(ORCHARD_TEST_FIXTURES) / "fuzz";

// The reproducers of one target, in name order.
std::vector<stdfs::path> reproducers(const std::string& target) {
  std::vector<stdfs::path> files;
  for (const auto& entry : stdfs::directory_iterator(kFuzzFixtures / target))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// What coco_json_fuzzer does with its input: the json names images in a directory holding a
// tiny tiny.jpg and tiny.png, and is converted as instances and as captions.
class CocoJson {
 public:
  CocoJson() {
    Image image;
    image.height = 6;
    image.width = 10;
    image.pixels.assign(6 * 10 * 3, 90);
    atomic_write_file(dir_.file("tiny.jpg"), encode_jpeg(image));
    atomic_write_file(dir_.file("tiny.png"), encode_png(image));
  }
  CocoConvertOptions instances(const stdfs::path& json) const {
    CocoConvertOptions o;
    o.annotations = json.string();
    o.image_dir = dir_.str();
    o.out_dir = dir_.file("out");
    o.num_shards = 2;
    return o;
  }
  CocoCaptionOptions captions(const stdfs::path& json) const {
    CocoCaptionOptions o;
    o.annotations = json.string();
    o.image_dir = dir_.str();
    o.out_dir = dir_.file("out");
    o.num_shards = 2;
    o.min_word_count = 1;
    return o;
  }
  std::string out(const std::string& name) const { return dir_.file("out/" + name); }

 private:
  test::TempDir dir_;
};

// Runs `fn`; an orchard::Error is a clean rejection, anything else escapes and fails the test.
template <typename Fn>
void accept_or_reject_cleanly(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

TEST(FuzzRegression, CocoJsonReproducersFailCleanly) {
  const CocoJson coco;
  for (const auto& json : reproducers("coco_json")) {
    SCOPED_TRACE(json.string());
    // Each into an empty out_dir: a label map left by an earlier one would refuse this one early.
    std::filesystem::remove_all(coco.out(""));
    EXPECT_NO_THROW(accept_or_reject_cleanly([&] { convert_coco_detection(coco.instances(json)); }));
    EXPECT_NO_THROW(accept_or_reject_cleanly([&] { convert_coco_captions(coco.captions(json)); }));
  }
}

// An image without "file_name": nlohmann's out_of_range used to escape the converter.
TEST(FuzzRegression, CocoJsonMissingKeyIsADataError) {
  const CocoJson coco;
  const stdfs::path json = kFuzzFixtures / "coco_json" / "missing-file-name.json";
  test::expect_data_error([&] { convert_coco_detection(coco.instances(json)); },
                          {"missing-file-name.json", "malformed COCO json", "file_name"});
}

// An image id of 7.8e66: nlohmann's get<int64_t>() cast it to an integer, undefined behaviour.
TEST(FuzzRegression, CocoJsonFloatIdIsADataError) {
  const CocoJson coco;
  const stdfs::path json = kFuzzFixtures / "coco_json" / "float-out-of-range-image-id.json";
  test::expect_data_error([&] { convert_coco_captions(coco.captions(json)); },
                          {"float-out-of-range-image-id.json", "'id' must be an integer"});
}

// A category named a"b: the label map was written with the quote unescaped and did not parse.
TEST(FuzzRegression, CocoCategoryNamesAreEscapedInTheLabelMap) {
  const CocoJson coco;
  convert_coco_detection(coco.instances(kFuzzFixtures / "coco_json" / "category-name-with-quote.json"));
  EXPECT_EQ(read_file(coco.out("label_map.pbtxt")),
            "item {\n  id: 1\n  name: \"a\\\"b\"\n  display_name: \"a\\\"b\"\n}\n");
}

TEST(FuzzRegression, ExampleReproducersFailCleanly) {
  for (const auto& file : reproducers("example")) {
    SCOPED_TRACE(file.string());
    const std::string record = read_file(file.string());
    EXPECT_NO_THROW(accept_or_reject_cleanly([&] { record_to_json(record); }));
    EXPECT_NO_THROW(accept_or_reject_cleanly([&] { parse_detection_example(record, "r", 90); }));
    EXPECT_NO_THROW(accept_or_reject_cleanly([&] { parse_caption_example(record, "r"); }));
  }
}

// A detection record whose image/source_id is an empty bytes list (the fuzzer's reproducer,
// example/detection-empty-source-id.pb, is also wrong in other ways): .at(0) threw
// std::out_of_range. It is an absent id now, as in the OD API's decoder.
TEST(FuzzRegression, DetectionEmptySourceIdIsAbsent) {
  Image image;
  image.height = 4;
  image.width = 6;
  image.pixels.assign(4 * 6 * 3, 50);
  DetectionExample d;
  d.encoded = encode_png(image);
  d.source_id = "7";
  d.boxes = {Box{0.1f, 0.2f, 0.5f, 0.6f}};
  d.classes = {3};
  tensorflow::Example ex;
  ASSERT_TRUE(ex.ParseFromString(make_detection_example(d, "png")));
  (*ex.mutable_features()->mutable_feature())["image/source_id"].mutable_bytes_list()->clear_value();
  const DetectionExample parsed = parse_detection_example(ex.SerializeAsString(), "r", 90);
  EXPECT_EQ(parsed.source_id, "");
  EXPECT_EQ(parsed.classes, std::vector<int64_t>{3});
}

// Finding image-1: a PNG and a JPEG whose headers claim 30000 x 30000 pixels (the JPEG is a
// 16 x 16 seed with its SOF0 dimensions rewritten). decode_png / decode_jpeg allocate the whole
// RGB image (2.7 GB) before reading any pixel data, so a few such records in a shard take a
// training run down, and the fuzzers hit libFuzzer's malloc limit. The files end with
// image_fuzzer's 8 parameter bytes, which the decoders ignore. They must be DataErrors without
// that allocation (--max_image_pixels, checked from the header).
TEST(FuzzRegression, HugeImageHeadersAreRejectedBeforeAllocating) {
  const auto peak_rss = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return int64_t{usage.ru_maxrss} * 1024;
  };
  const int64_t before = peak_rss();
  for (const auto& file : reproducers("image")) {
    if (file.filename().string().rfind("oom-", 0) != 0) continue;
    SCOPED_TRACE(file.string());
    const std::string bytes = read_file(file.string());
    EXPECT_EQ(image_size(bytes, "r", int64_t{1} << 40).height, 30000);  // the header, as written
    test::expect_data_error([&] { decode_image(bytes, "r"); }, {"r"});
    test::expect_data_error([&] { decode_scaled(bytes, 256, "r"); }, {"r"});
  }
  EXPECT_LT(peak_rss() - before, int64_t{256} << 20);
}

// Finding image-2: a 33 x 5 PNG (followed by image_fuzzer's parameter bytes) cropped with the
// window {2, 8, 0, 0}. decode_crop's JPEG path reads an empty window as the whole image; the PNG
// path passed it to crop_image and returned a 0 x 0 image. Both formats must agree.
TEST(FuzzRegression, EmptyCropWindowIsTheWholeImageForPngAsForJpeg) {
  const std::string bytes = read_file((kFuzzFixtures / "image" / "abort-png-empty-crop-window.png").string());
  const Image full = decode_image(bytes, "r");
  ASSERT_EQ(full.height, 5);
  ASSERT_EQ(full.width, 33);
  for (const CropWindow& window : {CropWindow{2, 8, 0, 0}, CropWindow{0, 0, 3, 0}, CropWindow{1, 1, -4, 2}}) {
    const Image png = decode_crop(bytes, window, 1, 1, "r");
    EXPECT_EQ(png.height, 5);
    EXPECT_EQ(png.width, 33);
    EXPECT_EQ(png.pixels, full.pixels);
    const Image jpeg = decode_crop(encode_jpeg(full), window, 1, 1, "r");
    EXPECT_EQ(jpeg.height, 5);
    EXPECT_EQ(jpeg.width, 33);
  }
}

}  // namespace
}  // namespace orchard::data
