// orchard data voc / pets: tiny PASCAL VOC and Oxford-IIIT Pets trees converted and read back.
// Expected values are worked by hand from the trees (boxes divided by the xml's size as the OD
// API's create_pascal_tf_record.py / create_pet_tf_record.py divide them); the Pets split
// order is the one Python 3 gives (random.seed(42); random.shuffle(...), printed by CPython).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/detection.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/tools.h"
#include "orchard/detect/dataset_tools/pets.h"
#include "orchard/detect/dataset_tools/voc.h"

namespace stdfs = std::filesystem;

namespace orchard::data {
namespace {

std::string jpeg(int height, int width, uint8_t value) {
  Image img;
  img.height = height;
  img.width = width;
  img.pixels.assign(static_cast<size_t>(height) * width * 3, value);
  return encode_jpeg(img, 90);
}

struct XmlObject {
  std::string name;
  std::string pose;                    // empty: no <pose>
  int truncated = -1, difficult = -1;  // -1: no element
  std::string box;                     // "xmin ymin xmax ymax"; empty: no <bndbox>
};

std::string annotation_xml(const std::string& folder, const std::string& filename, int width, int height,
                           const std::vector<XmlObject>& objects) {
  std::string x = "<annotation>\n  <folder>" + folder + "</folder>\n  <filename>" + filename +
                  "</filename>\n  <source><database>test</database></source>\n  <size><width>" + std::to_string(width) +
                  "</width><height>" + std::to_string(height) +
                  "</height><depth>3</depth></size>\n  <segmented>0</segmented>\n";
  for (const auto& o : objects) {
    x += "  <object>\n    <name>" + o.name + "</name>\n";
    if (!o.pose.empty()) x += "    <pose>" + o.pose + "</pose>\n";
    if (o.truncated >= 0) x += "    <truncated>" + std::to_string(o.truncated) + "</truncated>\n";
    if (o.difficult >= 0) x += "    <difficult>" + std::to_string(o.difficult) + "</difficult>\n";
    if (!o.box.empty()) {
      std::vector<std::string> v;
      std::string s = o.box;
      for (size_t p; (p = s.find(' ')) != std::string::npos; s = s.substr(p + 1)) v.push_back(s.substr(0, p));
      v.push_back(s);
      x += "    <bndbox>\n      <xmin>" + v[0] + "</xmin>\n      <ymin>" + v[1] + "</ymin>\n      <xmax>" + v[2] +
           "</xmax>\n      <ymax>" + v[3] + "</ymax>\n    </bndbox>\n";
    }
    x += "  </object>\n";
  }
  return x + "</annotation>\n";
}

void write(const stdfs::path& path, const std::string& bytes) {
  stdfs::create_directories(path.parent_path());
  atomic_write_file(path.string(), bytes);
}

std::vector<std::string> texts(const ExampleView& v, const std::string& key) { return v.bytes_list(key); }

// VOCdevkit/VOC2007 with two images (trainval), VOC2012 with one listed only in aeroplane_train.txt.
class VocTree : public ::testing::Test {
 protected:
  void SetUp() override {
    devkit_ = dir_.path() / "VOCdevkit";
    const stdfs::path y7 = devkit_ / "VOC2007";
    jpeg1_ = jpeg(100, 200, 90);
    write(y7 / "JPEGImages" / "000001.jpg", jpeg1_);
    write(y7 / "JPEGImages" / "000002.jpg", jpeg(50, 80, 160));
    write(y7 / "ImageSets" / "Main" / "trainval.txt", "000001\n000002\n");
    write(y7 / "Annotations" / "000001.xml",
          annotation_xml("VOC2007", "000001.jpg", 200, 100,
                         {{"dog", "Left", 1, 0, "20 10 120 60"}, {"person", "Unspecified", 0, 1, "1 1 200 100"}}));
    // No <pose>, <truncated> or <difficult>: VOC's defaults.
    write(y7 / "Annotations" / "000002.xml",
          annotation_xml("VOC2007", "000002.jpg", 80, 50, {{"cat", "", -1, -1, "8 5 40 25"}}));
    const stdfs::path y12 = devkit_ / "VOC2012";
    write(y12 / "JPEGImages" / "2012_000001.jpg", jpeg(40, 40, 30));
    write(y12 / "ImageSets" / "Main" / "aeroplane_train.txt", "2012_000001 -1\n");
    write(y12 / "Annotations" / "2012_000001.xml",
          annotation_xml("VOC2012", "2012_000001.jpg", 40, 40, {{"aeroplane", "Frontal", 0, 0, "4 8 20 40"}}));
    options_.data_dir = devkit_.string();
    options_.set = "trainval";
    options_.output_path = dir_.file("out/pascal_trainval.record");
  }
  std::vector<std::string> records() const { return test::read_records(options_.output_path); }

  test::TempDir dir_;
  stdfs::path devkit_;
  std::string jpeg1_;
  VocConvertOptions options_;
};

TEST_F(VocTree, WritesTheOdApiFieldsAndThe20ClassLabelMap) {
  const VocConvertResult r = convert_voc(options_);
  EXPECT_EQ(r.images, 2);
  EXPECT_EQ(r.boxes, 3);
  EXPECT_EQ(r.label_map_path, dir_.file("out/pascal_label_map.pbtxt"));
  const auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  const ExampleView v(recs[0], "record 0");
  EXPECT_EQ(v.int64("image/height"), 100);
  EXPECT_EQ(v.int64("image/width"), 200);
  EXPECT_EQ(v.bytes("image/filename"), "000001.jpg");
  EXPECT_EQ(v.bytes("image/source_id"), "000001.jpg");
  EXPECT_EQ(v.bytes("image/format"), "jpeg");
  EXPECT_EQ(v.bytes("image/encoded"), jpeg1_);
  EXPECT_EQ(v.bytes("image/key/sha256"), sha256_hex(jpeg1_));
  EXPECT_EQ(v.bytes("image/key/sha256").size(), 64u);
  // dog 20,10-120,60 and person 1,1-200,100 in a 200 x 100 image, divided as they are.
  const std::vector<float> xmin = v.floats("image/object/bbox/xmin"), ymin = v.floats("image/object/bbox/ymin");
  const std::vector<float> xmax = v.floats("image/object/bbox/xmax"), ymax = v.floats("image/object/bbox/ymax");
  ASSERT_EQ(xmin.size(), 2u);
  EXPECT_FLOAT_EQ(xmin[0], 0.1f);
  EXPECT_FLOAT_EQ(ymin[0], 0.1f);
  EXPECT_FLOAT_EQ(xmax[0], 0.6f);
  EXPECT_FLOAT_EQ(ymax[0], 0.6f);
  EXPECT_FLOAT_EQ(xmin[1], 0.005f);
  EXPECT_FLOAT_EQ(ymin[1], 0.01f);
  EXPECT_FLOAT_EQ(xmax[1], 1.0f);
  EXPECT_FLOAT_EQ(ymax[1], 1.0f);
  EXPECT_EQ(texts(v, "image/object/class/text"), (std::vector<std::string>{"dog", "person"}));
  EXPECT_EQ(v.int64s("image/object/class/label"), (std::vector<int64_t>{12, 15}));  // pascal_label_map ids
  EXPECT_EQ(v.int64s("image/object/difficult"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(v.int64s("image/object/truncated"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(texts(v, "image/object/view"), (std::vector<std::string>{"Left", "Unspecified"}));

  const ExampleView v2(recs[1], "record 1");
  EXPECT_EQ(texts(v2, "image/object/class/text"), (std::vector<std::string>{"cat"}));
  EXPECT_EQ(v2.int64s("image/object/class/label"), (std::vector<int64_t>{8}));
  EXPECT_EQ(v2.int64s("image/object/difficult"), (std::vector<int64_t>{0}));
  EXPECT_EQ(v2.int64s("image/object/truncated"), (std::vector<int64_t>{0}));
  EXPECT_EQ(texts(v2, "image/object/view"), (std::vector<std::string>{"Unspecified"}));
  EXPECT_FLOAT_EQ(v2.floats("image/object/bbox/xmax")[0], 0.5f);  // 40 / 80
  EXPECT_FLOAT_EQ(v2.floats("image/object/bbox/ymax")[0], 0.5f);  // 25 / 50

  // Orchard's own reader takes the records (difficult kept for the VOC metrics).
  const DetectionExample d = parse_detection_example(recs[0], "record 0", 20);
  EXPECT_EQ(d.difficult, (std::vector<bool>{false, true}));

  const std::string label_map = read_file(r.label_map_path);
  EXPECT_NE(label_map.find("id: 1\n  name: \"aeroplane\"\n}"), std::string::npos) << label_map;
  EXPECT_NE(label_map.find("id: 20\n  name: \"tvmonitor\"\n}"), std::string::npos) << label_map;
  EXPECT_EQ(label_map.find("id: 21"), std::string::npos);

  // A second conversion beside it (another set) shares the same label map file.
  write(devkit_ / "VOC2007" / "ImageSets" / "Main" / "val.txt", "000002\n");
  options_.set = "val";
  options_.output_path = dir_.file("out/pascal_val.record");
  EXPECT_EQ(convert_voc(options_).images, 1);
}

TEST_F(VocTree, IgnoreDifficultInstancesLeavesThemOut) {
  options_.ignore_difficult_instances = true;
  const VocConvertResult r = convert_voc(options_);
  EXPECT_EQ(r.boxes, 2);
  EXPECT_EQ(r.difficult_skipped, 1);
  const ExampleView v(records()[0], "record 0");
  EXPECT_EQ(texts(v, "image/object/class/text"), (std::vector<std::string>{"dog"}));
  EXPECT_EQ(v.int64s("image/object/difficult"), (std::vector<int64_t>{0}));
  EXPECT_EQ(v.floats("image/object/bbox/xmin").size(), 1u);
  EXPECT_EQ(v.int64s("image/object/truncated"), (std::vector<int64_t>{1}));
}

// merged: VOC2007's list, then VOC2012's (read from aeroplane_train.txt, the file the OD API
// reads, where train.txt is absent); images found through the xml's <folder>.
TEST_F(VocTree, MergedYearsAndTheAeroplaneList) {
  write(devkit_ / "VOC2007" / "ImageSets" / "Main" / "train.txt", "000002\n");
  options_.year = "merged";
  options_.set = "train";
  const VocConvertResult r = convert_voc(options_);
  EXPECT_EQ(r.images, 2);
  const auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(ExampleView(recs[0], "0").bytes("image/filename"), "000002.jpg");
  const ExampleView v(recs[1], "1");
  EXPECT_EQ(v.bytes("image/filename"), "2012_000001.jpg");
  EXPECT_EQ(v.int64s("image/object/class/label"), (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymin")[0], 0.2f);  // 8 / 40
}

TEST_F(VocTree, ALabelMapPathGivesTheIds) {
  write(dir_.path() / "two.pbtxt",
        "item { id: 1 name: 'person' }\nitem { id: 2 name: 'dog' }\nitem { id: 3 name: 'cat' }\n");
  options_.label_map_path = dir_.file("two.pbtxt");
  convert_voc(options_);
  EXPECT_EQ(ExampleView(records()[0], "0").int64s("image/object/class/label"), (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(stdfs::exists(dir_.file("out/pascal_label_map.pbtxt")));  // nothing written when one is given
}

TEST_F(VocTree, BadInputNamesTheFileAndField) {
  const stdfs::path ann = devkit_ / "VOC2007" / "Annotations";
  // A class not in the label map.
  write(dir_.path() / "one.pbtxt", "item { id: 1 name: 'dog' }\n");
  options_.label_map_path = dir_.file("one.pbtxt");
  test::expect_data_error([&] { convert_voc(options_); }, {(ann / "000001.xml").string(), "object 1 (person)",
                                                           "class 'person' is not in the label map", "one.pbtxt"});
  options_.label_map_path.clear();
  // An object without <bndbox>.
  write(ann / "000002.xml", annotation_xml("VOC2007", "000002.jpg", 80, 50, {{"cat", "Left", 0, 0, ""}}));
  test::expect_data_error([&] { convert_voc(options_); },
                          {(ann / "000002.xml").string(), "object 0 (cat) has no <bndbox>"});
  // A coordinate that is not a number.
  write(ann / "000002.xml", annotation_xml("VOC2007", "000002.jpg", 80, 50, {{"cat", "Left", 0, 0, "8 5 forty 25"}}));
  test::expect_data_error([&] { convert_voc(options_); }, {"000002.xml", "<xmax> must be a number", "forty"});
  // A <size> that is not the image's.
  write(ann / "000002.xml", annotation_xml("VOC2007", "000002.jpg", 81, 50, {{"cat", "Left", 0, 0, "8 5 40 25"}}));
  test::expect_data_error([&] { convert_voc(options_); }, {"000002.xml", "<size> is 81x50", "000002.jpg is 80x50"});
  // A missing xml.
  stdfs::remove(ann / "000002.xml");
  test::expect_data_error([&] { convert_voc(options_); }, {(ann / "000002.xml").string(), "no such file"});
  // Not xml at all.
  write(ann / "000002.xml", "<annotation><filename>");
  test::expect_data_error([&] { convert_voc(options_); }, {"000002.xml", "not an xml file"});
  // A set without its list.
  options_.set = "test";
  test::expect_data_error([&] { convert_voc(options_); }, {"ImageSets/Main/test.txt", "no such file"});
  options_.set = "holdout";
  EXPECT_THROW(convert_voc(options_), Error);
  // A label map already beside the output with other classes is refused, before any record is written.
  options_.set = "trainval";
  write(dir_.path() / "out" / "pascal_label_map.pbtxt", "item { id: 1 name: 'cat' }\n");
  try {
    convert_voc(options_);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pascal_label_map.pbtxt already exists"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stdfs::exists(options_.output_path));
}

TEST(VocXml, Sha256OfTheFipsExample) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// `data images` refuses detection layouts instead of making a class of each folder.
TEST(ImageFolder, RefusesPascalVocAndPetsLayouts) {
  test::TempDir dir;
  const stdfs::path year = dir.path() / "VOCdevkit" / "VOC2007";
  write(year / "JPEGImages" / "000001.jpg", jpeg(8, 8, 10));
  write(year / "Annotations" / "000001.xml", "<annotation/>");
  write(year / "ImageSets" / "Main" / "train.txt", "000001\n");
  ImageFolderOptions o;
  o.out_dir = dir.file("out");
  for (const stdfs::path& input : {year, year.parent_path()}) {
    o.input_dir = input.string();
    try {
      convert_image_folder(o);
      ADD_FAILURE() << "no error for " << input;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("PASCAL VOC"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("orchard data voc --data_dir " + year.parent_path().string()),
                std::string::npos)
          << e.what();
    }
  }
  const stdfs::path pets = dir.path() / "pets";
  write(pets / "images" / "Abyssinian_1.jpg", jpeg(8, 8, 10));
  write(pets / "annotations" / "xmls" / "Abyssinian_1.xml", "<annotation/>");
  o.input_dir = pets.string();
  try {
    convert_image_folder(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("orchard data pets"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stdfs::exists(dir.file("out")));
}

TEST(Shards, StaleShardsOfAnotherCountAreRefused) {
  test::TempDir dir;
  write(dir.path() / "train-00000-of-00002", "");
  EXPECT_NO_THROW(check_no_stale_shards(dir.str(), "train", 2));       // a rerun
  EXPECT_NO_THROW(check_no_stale_shards(dir.str(), "validation", 4));  // another prefix
  EXPECT_THROW(check_no_stale_shards(dir.str(), "train", 4), Error);
}

// ---------------------------------------------------------------------------------------------
// Oxford-IIIT Pets

TEST(PetsSplit, PythonShuffleOrder) {
  // CPython 3.11: l = list(range(10)); random.seed(42); random.shuffle(l)
  std::vector<std::string> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(std::to_string(i));
  python_random_shuffle(&ten, 42);
  EXPECT_EQ(ten, (std::vector<std::string>{"7", "3", "2", "8", "5", "6", "9", "4", "0", "1"}));
  std::vector<std::string> forty;
  for (int i = 0; i < 40; ++i) forty.push_back(std::to_string(i));
  python_random_shuffle(&forty, 42);
  const std::vector<int> expected = {9,  3,  10, 36, 25, 24, 30, 11, 4, 32, 21, 28, 23, 18, 12, 34, 35, 26, 13, 22,
                                     20, 31, 37, 29, 19, 16, 39, 33, 2, 0,  38, 27, 5,  6,  8,  14, 15, 17, 1,  7};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(forty[i], std::to_string(expected[i])) << i;
}

TEST(PetsSplit, BreedFromTheFileName) {
  EXPECT_EQ(pet_class_from_filename("Abyssinian_12.jpg"), "Abyssinian");
  EXPECT_EQ(pet_class_from_filename("american_pit_bull_terrier_105.jpg"), "american_pit_bull_terrier");
  EXPECT_EQ(pet_class_from_filename("Bengal_1.JPG"), "Bengal");  // re.I
  EXPECT_EQ(pet_class_from_filename("Bengal1.jpg"), "");
  EXPECT_EQ(pet_class_from_filename("_1.jpg"), "");
  EXPECT_EQ(pet_class_from_filename("Bengal_.jpg"), "");
  EXPECT_EQ(pet_class_from_filename("Bengal_1.png"), "");
}

TEST(PetsSplit, TrimapValuesAsStored) {
  const std::vector<uint8_t> values = {1, 2, 3, 2, 2, 1};
  const LabelImage decoded = decode_png_label_image(encode_gray_png(values.data(), 2, 3), "trimap");
  EXPECT_EQ(decoded.height, 2);
  EXPECT_EQ(decoded.width, 3);
  EXPECT_EQ(decoded.values, values);
  test::expect_data_error([] { decode_png_label_image(jpeg(2, 2, 1), "t.png"); }, {"t.png", "not a PNG"});
  Image rgb;
  rgb.height = rgb.width = 2;
  rgb.pixels.assign(12, 2);
  test::expect_data_error([&] { decode_png_label_image(encode_png(rgb), "t.png"); }, {"t.png", "one channel"});
}

constexpr int kPetH = 24, kPetW = 32;

// images/, annotations/{trainval.txt, xmls, trimaps}: five pets with xmls and one (Bengal_3)
// without, as some of the real set's names are.
class PetsTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() / "pets";
    write(root_ / "annotations" / "trainval.txt",
          "Abyssinian_1 1 1 1\nAbyssinian_2 1 1 1\namerican_bulldog_12 2 2 1\nBengal_3 6 1 3\n"
          "american_bulldog_7 2 2 1\nAbyssinian_5 1 1 1\n");
    // The pet: rows 3..15, columns 6..25 (row 3 its border, value 3), the rest background (2).
    trimap_.assign(kPetH * kPetW, 2);
    for (int y = 3; y <= 15; ++y)
      for (int x = 6; x <= 25; ++x) trimap_[y * kPetW + x] = y == 3 ? 3 : 1;
    for (const std::string name :
         {"Abyssinian_1", "Abyssinian_2", "american_bulldog_12", "american_bulldog_7", "Abyssinian_5", "Bengal_3"}) {
      write(root_ / "images" / (name + ".jpg"), jpeg(kPetH, kPetW, static_cast<uint8_t>(name.size() * 7)));
      write(root_ / "annotations" / "trimaps" / (name + ".png"), encode_gray_png(trimap_.data(), kPetH, kPetW));
      if (name == "Bengal_3") continue;
      write(root_ / "annotations" / "xmls" / (name + ".xml"),
            annotation_xml("OXIIIT", name + ".jpg", kPetW, kPetH,
                           {{name[0] == 'A' ? "cat" : "dog", "Frontal", 0, 0, "8 6 16 18"}}));
    }
    options_.data_dir = root_.string();
    options_.output_dir = dir_.file("out");
    options_.num_shards = 2;
  }
  std::vector<std::string> shard(const std::string& name) const { return test::read_records(dir_.file("out/" + name)); }
  static std::vector<std::string> filenames(const std::vector<std::string>& records) {
    std::vector<std::string> out;
    for (const auto& r : records) out.push_back(ExampleView(r, "r").bytes("image/filename"));
    return out;
  }

  test::TempDir dir_;
  stdfs::path root_;
  std::vector<uint8_t> trimap_;
  PetsConvertOptions options_;
};

// Python 3 shuffles the six names (seed 42) to Bengal_3, Abyssinian_2, american_bulldog_12,
// american_bulldog_7 | Abyssinian_1, Abyssinian_5; int(0.7 * 6) = 4 train. Position i goes to
// shard i % 2, Bengal_3 (no xml) keeping its position 0.
TEST_F(PetsTree, FacesSplitShardsAndFields) {
  const PetsConvertResult r = convert_pets(options_);
  EXPECT_EQ(r.train, 3);
  EXPECT_EQ(r.validation, 2);
  EXPECT_EQ(r.missing_xml, 1);
  EXPECT_EQ(r.invalid, 0);
  EXPECT_EQ(filenames(shard("pet_faces_train.record-00000-of-00002")),
            (std::vector<std::string>{"american_bulldog_12.jpg"}));
  EXPECT_EQ(filenames(shard("pet_faces_train.record-00001-of-00002")),
            (std::vector<std::string>{"Abyssinian_2.jpg", "american_bulldog_7.jpg"}));
  EXPECT_EQ(filenames(shard("pet_faces_val.record-00000-of-00002")), (std::vector<std::string>{"Abyssinian_1.jpg"}));
  EXPECT_EQ(filenames(shard("pet_faces_val.record-00001-of-00002")), (std::vector<std::string>{"Abyssinian_5.jpg"}));

  const ExampleView v(shard("pet_faces_train.record-00000-of-00002")[0], "r");
  EXPECT_EQ(v.int64("image/height"), kPetH);
  EXPECT_EQ(v.int64("image/width"), kPetW);
  EXPECT_EQ(v.bytes("image/source_id"), "american_bulldog_12.jpg");
  EXPECT_EQ(v.bytes("image/format"), "jpeg");
  EXPECT_EQ(v.bytes("image/key/sha256"), sha256_hex(v.bytes("image/encoded")));
  EXPECT_EQ(texts(v, "image/object/class/text"), (std::vector<std::string>{"american_bulldog"}));  // not <name> dog
  EXPECT_EQ(v.int64s("image/object/class/label"), (std::vector<int64_t>{2}));
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmin")[0], 8.0f / kPetW);  // the head box 8,6-16,18
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymin")[0], 6.0f / kPetH);
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmax")[0], 16.0f / kPetW);
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymax")[0], 18.0f / kPetH);
  EXPECT_EQ(texts(v, "image/object/view"), (std::vector<std::string>{"Frontal"}));
  EXPECT_FALSE(v.has("image/object/mask"));
  const ExampleView a(shard("pet_faces_val.record-00000-of-00002")[0], "r");
  EXPECT_EQ(a.int64s("image/object/class/label"), (std::vector<int64_t>{1}));  // Abyssinian

  const std::string label_map = read_file(dir_.file("out/pet_label_map.pbtxt"));
  EXPECT_NE(label_map.find("id: 37\n  name: \"yorkshire_terrier\"\n}"), std::string::npos) << label_map;
  EXPECT_NE(label_map.find("id: 12\n  name: \"Egyptian_Mau\"\n}"), std::string::npos) << label_map;
}

// --faces_only=false: the box is the extent of the trimap's pet and border pixels (rows 3..15,
// columns 6..25: max index / size as the OD API divides it), the mask those pixels.
TEST_F(PetsTree, FullBodyBoxesAndPngMasksFromTheTrimaps) {
  options_.faces_only = false;
  const PetsConvertResult r = convert_pets(options_);
  EXPECT_EQ(r.train + r.validation, 5);
  const auto recs = shard("pets_fullbody_with_masks_val.record-00001-of-00002");
  ASSERT_EQ(recs.size(), 1u);
  const ExampleView v(recs[0], "r");
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmin")[0], 6.0f / kPetW);
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymin")[0], 3.0f / kPetH);
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/xmax")[0], 25.0f / kPetW);
  EXPECT_FLOAT_EQ(v.floats("image/object/bbox/ymax")[0], 15.0f / kPetH);
  const std::vector<std::string> masks = v.bytes_list("image/object/mask");
  ASSERT_EQ(masks.size(), 1u);
  const LabelImage mask = decode_png_label_image(masks[0], "mask");
  ASSERT_EQ(mask.values.size(), trimap_.size());
  for (size_t k = 0; k < trimap_.size(); ++k) ASSERT_EQ(mask.values[k], trimap_[k] != 2 ? 1 : 0) << k;
  // Orchard's reader takes the PNG masks (Mask R-CNN's load_instance_masks).
  const DetectionExample d = parse_detection_example(recs[0], "r", 37);
  EXPECT_EQ(d.masks.size(), 1u);
  EXPECT_FALSE(stdfs::exists(dir_.file("out/pet_faces_train.record-00000-of-00002")));
}

TEST_F(PetsTree, NumericalMasksAreOneFloatList) {
  options_.faces_only = false;
  options_.mask_type = "numerical";
  convert_pets(options_);
  const ExampleView v(shard("pets_fullbody_with_masks_train.record-00000-of-00002")[0], "r");
  const std::vector<float> mask = v.floats("image/object/mask");
  ASSERT_EQ(mask.size(), trimap_.size());
  for (size_t k = 0; k < trimap_.size(); ++k) ASSERT_EQ(mask[k], trimap_[k] != 2 ? 1.0f : 0.0f) << k;
}

TEST_F(PetsTree, BadInputNamesTheFileAndField) {
  const stdfs::path xmls = root_ / "annotations" / "xmls";
  // A head without a box.
  write(xmls / "Abyssinian_2.xml",
        annotation_xml("OXIIIT", "Abyssinian_2.jpg", kPetW, kPetH, {{"cat", "Frontal", 0, 0, ""}}));
  test::expect_data_error([&] { convert_pets(options_); },
                          {(xmls / "Abyssinian_2.xml").string(), "object 0 (cat) has no <bndbox>"});
  // ... is fine for full-body boxes, which come from the trimap.
  options_.faces_only = false;
  EXPECT_EQ(convert_pets(options_).train, 3);
  // A breed not in the label map.
  write(dir_.path() / "cats.pbtxt", "item { id: 1 name: 'Abyssinian' }\n");
  options_.label_map_path = dir_.file("cats.pbtxt");
  options_.output_dir = dir_.file("out2");
  test::expect_data_error(
      [&] { convert_pets(options_); },
      {"american_bulldog_12.xml", "class 'american_bulldog' is not in the label map", "cats.pbtxt"});
  options_.label_map_path.clear();
  // A file name without a breed.
  write(xmls / "Abyssinian_2.xml",
        annotation_xml("OXIIIT", "cat.jpg", kPetW, kPetH, {{"cat", "Frontal", 0, 0, "1 1 2 2"}}));
  write(root_ / "images" / "cat.jpg", jpeg(kPetH, kPetW, 1));
  test::expect_data_error([&] { convert_pets(options_); },
                          {"Abyssinian_2.xml", "<filename> 'cat.jpg' does not name a breed"});
  // A missing trimap (full-body only).
  write(xmls / "Abyssinian_2.xml",
        annotation_xml("OXIIIT", "Abyssinian_2.jpg", kPetW, kPetH, {{"cat", "Frontal", 0, 0, ""}}));
  stdfs::remove(root_ / "annotations" / "trimaps" / "american_bulldog_12.png");
  test::expect_data_error([&] { convert_pets(options_); }, {"american_bulldog_12.png", "no such file"});
  options_.mask_type = "rle";
  EXPECT_THROW(convert_pets(options_), Error);
}

// The OD API skips an image that is not a JPEG (a few of the real set's are not), with a warning.
TEST_F(PetsTree, NonJpegImagesAreSkippedAsTheOdApiSkipsThem) {
  Image img;
  img.height = kPetH;
  img.width = kPetW;
  img.pixels.assign(kPetH * kPetW * 3, 7);
  write(root_ / "images" / "Abyssinian_5.jpg", encode_png(img));
  const PetsConvertResult r = convert_pets(options_);
  EXPECT_EQ(r.invalid, 1);
  EXPECT_EQ(r.validation, 1);
  EXPECT_TRUE(shard("pet_faces_val.record-00001-of-00002").empty());
}

}  // namespace
}  // namespace orchard::data
