// `orchard data voc|pets|images|coco` through the binary: the converters end to end on tiny
// trees, and the refusals that keep a user from a silently wrong data set.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace stdfs = std::filesystem;

namespace orchard::cli {
namespace {

std::string jpeg(int height, int width) {
  data::Image img;
  img.height = height;
  img.width = width;
  img.pixels.assign(static_cast<size_t>(height) * width * 3, 120);
  return data::encode_jpeg(img, 90);
}

void write(const stdfs::path& path, const std::string& bytes) {
  stdfs::create_directories(path.parent_path());
  atomic_write_file(path.string(), bytes);
}

// One object per xml: name, difficult, box "xmin ymin xmax ymax".
std::string xml(const std::string& folder, const std::string& file, int w, int h, const std::string& name,
                int difficult, const std::string& box) {
  std::string b[4];
  std::string s = box;
  for (int i = 0; i < 4; ++i) {
    const size_t p = s.find(' ');
    b[i] = s.substr(0, p);
    s = p == std::string::npos ? "" : s.substr(p + 1);
  }
  return "<annotation><folder>" + folder + "</folder><filename>" + file + "</filename><size><width>" +
         std::to_string(w) + "</width><height>" + std::to_string(h) + "</height><depth>3</depth></size>" +
         "<object><name>" + name + "</name><pose>Left</pose><truncated>0</truncated><difficult>" +
         std::to_string(difficult) + "</difficult><bndbox><xmin>" + b[0] + "</xmin><ymin>" + b[1] + "</ymin><xmax>" +
         b[2] + "</xmax><ymax>" + b[3] + "</ymax></bndbox></object></annotation>";
}

class DataConvert : public ::testing::Test {
 protected:
  // VOCdevkit/VOC2007: 000001 (a dog, and a difficult cat in 000002), trainval.
  std::string voc_tree() {
    const stdfs::path year = root_.path() / "VOCdevkit" / "VOC2007";
    write(year / "JPEGImages" / "000001.jpg", jpeg(40, 60));
    write(year / "JPEGImages" / "000002.jpg", jpeg(30, 30));
    write(year / "ImageSets" / "Main" / "trainval.txt", "000001\n000002\n");
    write(year / "Annotations" / "000001.xml", xml("VOC2007", "000001.jpg", 60, 40, "dog", 0, "6 4 30 40"));
    write(year / "Annotations" / "000002.xml", xml("VOC2007", "000002.jpg", 30, 30, "cat", 1, "1 1 15 15"));
    return (root_.path() / "VOCdevkit").string();
  }
  test::TempDir root_;
};

TEST_F(DataConvert, VocEndToEnd) {
  const std::string devkit = voc_tree();
  const std::string out = root_.file("voc/pascal_trainval.record");
  auto r = run({"data", "voc", "--data_dir", devkit, "--year", "VOC2007", "--set", "trainval", "--output_path", out,
                "--ignore_difficult_instances"},
               root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "wrote 2 images with 1 boxes (1 difficult left out)")) << r.err;
  EXPECT_TRUE(stdfs::exists(root_.file("voc/pascal_label_map.pbtxt")));
  const auto records = test::read_records(out);
  ASSERT_EQ(records.size(), 2u);
  const data::ExampleView v(records[0], "0");
  EXPECT_EQ(v.bytes_list("image/object/class/text"), (std::vector<std::string>{"dog"}));
  EXPECT_EQ(v.int64s("image/object/class/label"), (std::vector<int64_t>{12}));
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmin")[0], 0.1f);  // 6 / 60
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymax")[0], 1.0f);  // 40 / 40
  EXPECT_TRUE(data::ExampleView(records[1], "1").int64s("image/object/class/label").empty());

  // A class that is not in the label map: one line naming the xml and the class, non-zero exit.
  write(stdfs::path(devkit) / "VOC2007" / "Annotations" / "000002.xml",
        xml("VOC2007", "000002.jpg", 30, 30, "unicorn", 0, "1 1 15 15"));
  r = run({"data", "voc", "--data_dir", devkit, "--set", "trainval", "--output_path", root_.file("voc/b.record")},
          root_);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "000002.xml: object 0 (unicorn): class 'unicorn' is not in the label map")) << r.err;
  EXPECT_FALSE(stdfs::exists(root_.file("voc/b.record")));
}

TEST_F(DataConvert, PetsEndToEnd) {
  const stdfs::path pets = root_.path() / "pets";
  std::string list;
  std::vector<uint8_t> trimap(20 * 24, 2);
  for (int y = 2; y < 12; ++y)
    for (int x = 4; x < 20; ++x) trimap[y * 24 + x] = 1;
  for (const std::string name : {"Abyssinian_1", "Bombay_2", "pug_3", "pug_4"}) {
    list += name + " 1 1 1\n";
    write(pets / "images" / (name + ".jpg"), jpeg(20, 24));
    write(pets / "annotations" / "xmls" / (name + ".xml"), xml("OXIIIT", name + ".jpg", 24, 20, "cat", 0, "2 2 10 10"));
    write(pets / "annotations" / "trimaps" / (name + ".png"), data::encode_gray_png(trimap.data(), 20, 24));
  }
  write(pets / "annotations" / "trainval.txt", list);
  const std::string out = root_.file("pets_out");
  auto r =
      run({"data", "pets", "--data_dir", pets.string(), "--output_dir", out, "--faces_only=false", "--num_shards", "2"},
          root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "wrote 2 train records")) << r.err;  // int(0.7 * 4) = 2
  int64_t total = 0;
  for (const std::string split : {"train", "val"})
    for (int k = 0; k < 2; ++k) {
      const std::string shard =
          out + "/pets_fullbody_with_masks_" + split + ".record-0000" + std::to_string(k) + "-of-00002";
      ASSERT_TRUE(stdfs::exists(shard)) << shard;
      for (const auto& rec : test::read_records(shard)) {
        const data::ExampleView v(rec, shard);
        EXPECT_EQ(v.bytes_list("image/object/mask").size(), 1u);
        EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmax")[0], 19.0f / 24);  // the trimap's last pet column
        ++total;
      }
    }
  EXPECT_EQ(total, 4);
  EXPECT_TRUE(stdfs::exists(out + "/pet_label_map.pbtxt"));

  // The defaults: head boxes, 10 shards a split.
  r = run({"data", "pets", "--data_dir", pets.string(), "--output_dir", out}, root_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(stdfs::exists(out + "/pet_faces_train.record-00009-of-00010"));
  EXPECT_TRUE(stdfs::exists(out + "/pet_faces_val.record-00000-of-00010"));
}

TEST_F(DataConvert, ImagesRefusesAVocFolder) {
  const std::string devkit = voc_tree();
  const auto r =
      run({"data", "images", "--input_dir", devkit + "/VOC2007", "--out_dir", root_.file("images_out")}, root_);
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "is a PASCAL VOC folder")) << r.err;
  EXPECT_TRUE(contains(r.err, "orchard data voc --data_dir " + devkit + " --year VOC2007")) << r.err;
  EXPECT_FALSE(stdfs::exists(root_.file("images_out")));
}

// A second `data coco` into the same out_dir: the validation split beside the training split
// (the same categories, so the same label_map.pbtxt) is what users do and works; a json with
// other categories would leave records and a label map that disagree, and is refused.
TEST_F(DataConvert, SecondCocoIntoTheSameOutDir) {
  write(root_.path() / "images" / "a.jpg", jpeg(20, 20));
  const std::string json_a = root_.file("a.json"), json_b = root_.file("b.json");
  write(json_a, R"({"images": [{"id": 1, "file_name": "a.jpg", "height": 20, "width": 20}],
    "categories": [{"id": 1, "name": "person"}],
    "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "iscrowd": 0}]})");
  write(json_b, R"({"images": [{"id": 1, "file_name": "a.jpg", "height": 20, "width": 20}],
    "categories": [{"id": 1, "name": "bicycle"}],
    "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "iscrowd": 0}]})");
  const std::string out = root_.file("coco_out");
  const auto coco = [&](const std::string& json, const std::string& prefix, const std::string& shards) {
    return run({"data", "coco", "--task", "detection", "--annotations", json, "--image_dir", root_.file("images"),
                "--out_dir", out, "--prefix", prefix, "--num_shards", shards},
               root_);
  };
  auto r = coco(json_a, "train", "1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string label_map = test::read_bytes(out + "/label_map.pbtxt");
  r = coco(json_a, "validation", "1");  // same categories: allowed
  ASSERT_EQ(r.rc, 0) << r.err;
  r = coco(json_a, "train", "1");  // a rerun: allowed
  ASSERT_EQ(r.rc, 0) << r.err;

  r = coco(json_b, "test", "1");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, out + "/label_map.pbtxt already exists with other classes")) << r.err;
  EXPECT_TRUE(contains(r.err, "choose another output directory")) << r.err;
  EXPECT_EQ(test::read_bytes(out + "/label_map.pbtxt"), label_map);
  EXPECT_FALSE(stdfs::exists(out + "/test-00000-of-00001"));

  r = coco(json_a, "train", "2");  // the same split in another shard count would mix with the first
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "train-00000-of-00001 already exists")) << r.err;
  EXPECT_FALSE(stdfs::exists(out + "/train-00000-of-00002"));
}

}  // namespace
}  // namespace orchard::cli
