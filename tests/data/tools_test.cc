#include "orchard/data/tools.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace orchard::data {
namespace {

using test::read_records;

using test::TempDir;
namespace stdfs = std::filesystem;

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";

// Every record of the files matching `pattern`, in file order.
std::vector<std::string> read_pattern(const std::string& pattern) {
  std::vector<std::string> out;
  for (const auto& f : expand_file_pattern(pattern)) {
    auto recs = read_records(f);
    out.insert(out.end(), recs.begin(), recs.end());
  }
  return out;
}

// The first bytes of a gzip'd idx file, read here independently of the converter.
std::string gunzip_prefix(const std::string& path, size_t n) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string out(n, '\0');
  const int got = gzread(f, out.data(), static_cast<unsigned>(n));
  gzclose(f);
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return out;
}

TEST(WriteShards, ContiguousRangesAndNames) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) records.push_back("r" + std::to_string(i));
  write_shards(dir.str(), "train", records, 3);
  EXPECT_EQ(test::list_dir(dir.str()),
            (std::vector<std::string>{"train-00000-of-00003", "train-00001-of-00003", "train-00002-of-00003"}));
  EXPECT_EQ(read_records(dir.file("train-00000-of-00003")), (std::vector<std::string>{"r0", "r1", "r2"}));
  EXPECT_EQ(read_records(dir.file("train-00001-of-00003")), (std::vector<std::string>{"r3", "r4", "r5"}));
  EXPECT_EQ(read_records(dir.file("train-00002-of-00003")), (std::vector<std::string>{"r6", "r7", "r8", "r9"}));
  EXPECT_THROW(write_shards(dir.str(), "x", records, 0), Error);
}

TEST(ConvertFashionMnist, LimitedConversion) {
  if (!stdfs::exists(kFashionDir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kFashionDir << " is missing (Debian package dataset-fashion-mnist)";
  TempDir dir;
  FashionMnistOptions o;
  o.out_dir = dir.file("fmnist");
  o.limit = 50;
  o.train_shards = 4;
  o.validation_shards = 2;
  const auto [train, validation] = convert_fashion_mnist(o);
  EXPECT_EQ(train, 50);
  EXPECT_EQ(validation, 50);
  EXPECT_EQ(
      test::list_dir(o.out_dir),
      (std::vector<std::string>{"labels.txt", "train-00000-of-00004", "train-00001-of-00004", "train-00002-of-00004",
                                "train-00003-of-00004", "validation-00000-of-00002", "validation-00001-of-00002"}));
  const auto labels = read_labels(o.out_dir + "/labels.txt");
  ASSERT_EQ(labels.size(), 10u);
  EXPECT_EQ(labels.front(), "T-shirt/top");
  EXPECT_EQ(labels.back(), "Ankle boot");
  EXPECT_EQ(labels, kFashionMnistClasses);

  // Labels and pixels against the idx files, read here: 8-byte label header, 16-byte image header.
  const std::string idx_labels = gunzip_prefix(kFashionDir + "/train-labels-idx1-ubyte.gz", 8 + 50);
  const std::string idx_images = gunzip_prefix(kFashionDir + "/train-images-idx3-ubyte.gz", 16 + 50 * 784);
  ASSERT_EQ(idx_labels.size(), 58u);
  ASSERT_EQ(idx_images.size(), 16u + 50 * 784);
  const auto records = read_pattern(o.out_dir + "/train-*");
  ASSERT_EQ(records.size(), 50u);
  for (size_t i = 0; i < records.size(); ++i) {
    const ExampleView ex(records[i], "train record " + std::to_string(i));
    const int expected = static_cast<uint8_t>(idx_labels[8 + i]);
    ASSERT_EQ(ex.int64("image/class/label"), expected + 1) << i;  // 1-based
    EXPECT_EQ(ex.bytes("image/class/text"), kFashionMnistClasses[static_cast<size_t>(expected)]);
    EXPECT_EQ(ex.int64("image/height"), 28);
    EXPECT_EQ(ex.int64("image/width"), 28);
    EXPECT_EQ(ex.bytes("image/format"), "PNG");
    const Image im = decode_image(ex.bytes("image/encoded"), ex.source());
    ASSERT_EQ(im.height, 28);
    ASSERT_EQ(im.width, 28);
    for (size_t p = 0; p < 784; ++p) {
      const uint8_t want = static_cast<uint8_t>(idx_images[16 + i * 784 + p]);
      ASSERT_EQ(im.pixels[3 * p], want) << "record " << i << " pixel " << p;
      ASSERT_EQ(im.pixels[3 * p + 1], want);
      ASSERT_EQ(im.pixels[3 * p + 2], want);
    }
  }
  EXPECT_EQ(read_pattern(o.out_dir + "/validation-*").size(), 50u);

  // The same input gives the same bytes (features in sorted order, not protobuf's hash order).
  FashionMnistOptions again = o;
  again.out_dir = dir.file("fmnist-again");
  convert_fashion_mnist(again);
  for (const char* name : {"train-00000-of-00004", "validation-00001-of-00002"})
    EXPECT_EQ(test::read_bytes(o.out_dir + "/" + name), test::read_bytes(again.out_dir + "/" + name)) << name;
}

TEST(ConvertFashionMnist, JpegFormatAndErrors) {
  if (!stdfs::exists(kFashionDir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kFashionDir << " is missing (Debian package dataset-fashion-mnist)";
  TempDir dir;
  FashionMnistOptions o;
  o.out_dir = dir.str();
  o.limit = 4;
  o.train_shards = 1;
  o.validation_shards = 1;
  o.format = "jpeg";
  EXPECT_EQ(convert_fashion_mnist(o), (std::pair<int64_t, int64_t>{4, 4}));
  const auto records = read_records(dir.file("train-00000-of-00001"));
  ASSERT_EQ(records.size(), 4u);
  const ExampleView ex(records[0], "r0");
  EXPECT_EQ(ex.bytes("image/format"), "JPEG");
  EXPECT_EQ(sniff_format(ex.bytes("image/encoded")), ImageFormat::kJpeg);
  EXPECT_EQ(decode_image(ex.bytes("image/encoded"), "r0").height, 28);

  o.format = "gif";
  EXPECT_THROW(convert_fashion_mnist(o), Error);
  o.format = "png";
  o.source_dir = dir.file("nowhere");
  EXPECT_THROW(convert_fashion_mnist(o), Error);
}

TEST(ConvertImageFolder, TwoClasses) {
  TempDir dir;
  // cat/: 5 red PNGs, dog/: 5 blue PNGs of different sizes, plus files that are not images.
  const std::map<std::string, std::array<uint8_t, 3>> colours = {{"cat", {220, 10, 10}}, {"dog", {10, 10, 220}}};
  for (const auto& [cls, rgb] : colours) {
    stdfs::create_directories(dir.path() / "in" / cls);
    for (int i = 0; i < 5; ++i) {
      Image im;
      im.height = 6 + i;
      im.width = 9;
      im.pixels.resize(static_cast<size_t>(im.height) * im.width * 3);
      for (size_t p = 0; p < im.pixels.size(); ++p) im.pixels[p] = rgb[p % 3];
      test::write_bytes((dir.path() / "in" / cls / (std::to_string(i) + ".png")).string(), encode_png(im));
    }
    test::write_bytes((dir.path() / "in" / cls / "notes.txt").string(), "not an image");
  }
  test::write_bytes(dir.file("in/README"), "top-level files are not classes");

  ImageFolderOptions o;
  o.input_dir = dir.file("in");
  o.out_dir = dir.file("out");
  o.num_shards = 2;
  o.validation_fraction = 0.2;
  o.seed = 3;
  const auto [train, validation] = convert_image_folder(o);
  EXPECT_EQ(train, 8);
  EXPECT_EQ(validation, 2);
  EXPECT_EQ(test::list_dir(o.out_dir), (std::vector<std::string>{"labels.txt", "train-00000-of-00002",
                                                                 "train-00001-of-00002", "validation-00000-of-00001"}));
  EXPECT_EQ(read_labels(o.out_dir + "/labels.txt"), (std::vector<std::string>{"cat", "dog"}));

  auto records = read_pattern(o.out_dir + "/train-*");
  EXPECT_EQ(records.size(), 8u);
  const auto val = read_pattern(o.out_dir + "/validation-*");
  EXPECT_EQ(val.size(), 2u);
  records.insert(records.end(), val.begin(), val.end());
  std::map<int64_t, int> per_label;
  std::set<std::string> filenames;
  for (const auto& rec : records) {
    const ExampleView ex(rec, "record");
    const int64_t label = ex.int64("image/class/label");
    ++per_label[label];
    ASSERT_TRUE(label == 1 || label == 2) << label;
    const std::string cls = label == 1 ? "cat" : "dog";
    EXPECT_EQ(ex.bytes("image/class/text"), cls);
    const std::string filename = ex.bytes("image/filename");
    EXPECT_EQ(filename.rfind(cls + "/", 0), 0u) << filename;
    filenames.insert(filename);
    const Image im = decode_image(ex.bytes("image/encoded"), filename);
    EXPECT_EQ(ex.int64("image/height"), im.height);
    EXPECT_EQ(ex.int64("image/width"), 9);
    EXPECT_EQ(im.pixels[0], colours.at(cls)[0]);
    EXPECT_EQ(im.pixels[2], colours.at(cls)[2]);
  }
  EXPECT_EQ(per_label, (std::map<int64_t, int>{{1, 5}, {2, 5}}));
  EXPECT_EQ(filenames.size(), 10u);  // every image once
}

TEST(ConvertImageFolder, Errors) {
  TempDir dir;
  ImageFolderOptions o;
  o.input_dir = dir.file("missing");
  o.out_dir = dir.file("out");
  EXPECT_THROW(convert_image_folder(o), Error);
  stdfs::create_directories(dir.path() / "empty");
  o.input_dir = dir.file("empty");
  EXPECT_THROW(convert_image_folder(o), Error);  // no class folders
  stdfs::create_directories(dir.path() / "empty" / "cls");
  EXPECT_THROW(convert_image_folder(o), Error);  // no images
  // A .jpg that is not an image is rejected, naming the file.
  test::write_bytes(dir.file("empty/cls/broken.jpg"), "this is text");
  try {
    convert_image_folder(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.jpg"), std::string::npos) << e.what();
  }
}

TEST(ReadLabels, MissingFileIsEmpty) {
  TempDir dir;
  EXPECT_TRUE(read_labels(dir.file("labels.txt")).empty());
}

}  // namespace
}  // namespace orchard::data
