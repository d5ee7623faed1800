#include "orchard/detect/dataset_tools/pets.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"
#include "orchard/data/tools.h"
#include "orchard/detect/dataset_tools/voc.h"

namespace stdfs = std::filesystem;

namespace orchard::data {

// clang-format off
const std::vector<std::string> kPetClasses = {
    "Abyssinian", "american_bulldog", "american_pit_bull_terrier", "basset_hound", "beagle", "Bengal", "Birman",
    "Bombay", "boxer", "British_Shorthair", "chihuahua", "Egyptian_Mau", "english_cocker_spaniel", "english_setter",
    "german_shorthaired", "great_pyrenees", "havanese", "japanese_chin", "keeshond", "leonberger", "Maine_Coon",
    "miniature_pinscher", "newfoundland", "Persian", "pomeranian", "pug", "Ragdoll", "Russian_Blue", "saint_bernard",
    "samoyed", "scottish_terrier", "shiba_inu", "Siamese", "Sphynx", "staffordshire_bull_terrier", "wheaten_terrier",
    "yorkshire_terrier"};
// clang-format on

std::string pet_class_from_filename(const std::string& name) {
  // [A-Za-z_]+ is greedy and the "_" before the digits is one of its letters, so the only match
  // ends the class one character before the first character outside [A-Za-z_].
  size_t run = 0;
  while (run < name.size() && (std::isalpha(static_cast<unsigned char>(name[run])) || name[run] == '_')) ++run;
  if (run < 2 || name[run - 1] != '_') return "";
  size_t digits = run;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
  if (digits == run || name.size() < digits + 4) return "";
  std::string ext = name.substr(digits, 4);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".jpg") return "";
  return name.substr(0, run - 1);
}

namespace {

// CPython's MT19937 (Modules/_randommodule.c, the reference generator of Matsumoto and
// Nishimura): seeded by init_by_array, read 32 bits at a time.
class PythonMersenneTwister {
 public:
  explicit PythonMersenneTwister(uint32_t seed) {
    // random.seed(n) for a non-negative int n < 2**32: init_by_array with the one word n.
    init_genrand(19650218u);
    const uint32_t key = seed;
    size_t i = 1;
    for (size_t k = kN; k; --k) {                                                     // max(kN, key length 1)
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key + 0u;  // + key[j] + j, j = 0
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    for (size_t k = kN - 1; k; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    mt_[0] = 0x80000000u;
    index_ = kN;
  }

  uint32_t next() {
    if (index_ >= kN) twist();
    uint32_t y = mt_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  // random._randbelow_with_getrandbits(n): getrandbits(n.bit_length()) until below n.
  uint32_t below(uint32_t n) {
    int bits = 0;
    while (bits < 32 && (n >> bits) != 0) ++bits;
    for (;;) {
      const uint32_t r = next() >> (32 - bits);  // getrandbits(k) for k <= 32
      if (r < n) return r;
    }
  }

 private:
  static constexpr size_t kN = 624, kM = 397;

  void init_genrand(uint32_t s) {
    mt_[0] = s;
    for (size_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }

  void twist() {
    for (size_t k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }

  std::array<uint32_t, kN> mt_{};
  size_t index_ = kN;
};

}  // namespace

void python_random_shuffle(std::vector<std::string>* items, uint32_t seed) {
  if (items->size() > 0xffffffffu) throw Error("python_random_shuffle: more than 2**32 items");
  PythonMersenneTwister rng(seed);
  for (size_t i = items->size(); i-- > 1;) {
    const size_t j = rng.below(static_cast<uint32_t>(i + 1));
    std::swap((*items)[i], (*items)[j]);
  }
}

namespace {

struct Split {
  std::string prefix;  // output_dir/pet_faces_train.record, ...
  std::vector<std::string> names;
};

// The record of one trainval.txt name, or nothing (with a warning) where create_pet_tf_record.py
// skips it.
bool pet_example(const PetsConvertOptions& o, const std::map<std::string, int64_t>& ids, const std::string& label_map,
                 const std::string& name, std::string* record, PetsConvertResult* result) {
  const stdfs::path annotations = stdfs::path(o.data_dir) / "annotations";
  const std::string xml_path = (annotations / "xmls" / (name + ".xml")).string();
  std::error_code ec;
  if (!stdfs::exists(xml_path, ec)) {
    spdlog::warn("could not find {}, ignoring example", xml_path);
    ++result->missing_xml;
    return false;
  }
  const VocAnnotation a = parse_voc_annotation(read_file(xml_path), xml_path);
  const std::string image_path = (stdfs::path(o.data_dir) / "images" / a.filename).string();
  if (!stdfs::exists(image_path, ec))
    throw DataError(xml_path + ": <filename> " + a.filename + ": " + image_path + ": no such file");
  DetectionExample d;
  d.encoded = read_file(image_path);
  if (sniff_format(d.encoded) != ImageFormat::kJpeg) {
    spdlog::warn("invalid example {}: {} is not a JPEG image, ignoring", xml_path, image_path);
    ++result->invalid;
    return false;
  }
  const ImageSize size = image_size(d.encoded, image_path);
  if (size.width != a.width || size.height != a.height)
    throw DataError(xml_path + ": <size> is " + std::to_string(a.width) + "x" + std::to_string(a.height) + " but " +
                    image_path + " is " + std::to_string(size.width) + "x" + std::to_string(size.height));
  const std::string breed = pet_class_from_filename(a.filename);
  if (breed.empty())
    throw DataError(xml_path + ": <filename> '" + a.filename +
                    "' does not name a breed (<breed>_<number>.jpg, e.g. Abyssinian_12.jpg)");
  const auto id = ids.find(breed);
  if (id == ids.end()) throw DataError(xml_path + ": class '" + breed + "' is not in the label map " + label_map);

  // Without faces_only: the pet's pixels (trimap != 2) and their extent.
  std::vector<uint8_t> pet;
  Box extent;
  if (!o.faces_only && !a.objects.empty()) {
    const std::string trimap_path = (annotations / "trimaps" / (name + ".png")).string();
    if (!stdfs::exists(trimap_path, ec))
      throw DataError(trimap_path + ": no such file (the trimap of " + xml_path +
                      "; --faces_only, the default, needs none)");
    const std::string bytes = read_file(trimap_path);
    if (sniff_format(bytes) != ImageFormat::kPng) {
      spdlog::warn("invalid example {}: {} is not a PNG, ignoring", xml_path, trimap_path);
      ++result->invalid;
      return false;
    }
    const LabelImage trimap = decode_png_label_image(bytes, trimap_path);
    if (trimap.width != a.width || trimap.height != a.height)
      throw DataError(trimap_path + " is " + std::to_string(trimap.width) + "x" + std::to_string(trimap.height) +
                      " but " + xml_path + ": <size> is " + std::to_string(a.width) + "x" + std::to_string(a.height));
    pet.resize(trimap.values.size());
    int x0 = trimap.width, y0 = trimap.height, x1 = -1, y1 = -1;
    for (int y = 0; y < trimap.height; ++y)
      for (int x = 0; x < trimap.width; ++x) {
        const size_t k = static_cast<size_t>(y) * trimap.width + x;
        pet[k] = trimap.values[k] != 2;
        if (pet[k]) {
          x0 = std::min(x0, x);
          x1 = std::max(x1, x);
          y0 = std::min(y0, y);
          y1 = std::max(y1, y);
        }
      }
    if (x1 < 0) {
      spdlog::warn("invalid example {}: {} has no pet pixels (all 2), ignoring", xml_path, trimap_path);
      ++result->invalid;
      return false;
    }
    // np.min / np.max of the pixel indices, divided by the size as they are.
    extent = Box{
        static_cast<float>(static_cast<double>(y0) / a.height), static_cast<float>(static_cast<double>(x0) / a.width),
        static_cast<float>(static_cast<double>(y1) / a.height), static_cast<float>(static_cast<double>(x1) / a.width)};
  }

  d.height = size.height;
  d.width = size.width;
  d.source_id = a.filename;
  d.filename = a.filename;
  d.key_sha256 = sha256_hex(d.encoded);
  std::string mask_png;
  for (size_t k = 0; k < a.objects.size(); ++k) {
    const VocObject& obj = a.objects[k];
    Box box = extent;
    if (o.faces_only) {
      if (!obj.has_box)
        throw DataError(xml_path + ": object " + std::to_string(k) + " (" + obj.name + ") has no <bndbox>");
      box = Box{static_cast<float>(obj.ymin / a.height), static_cast<float>(obj.xmin / a.width),
                static_cast<float>(obj.ymax / a.height), static_cast<float>(obj.xmax / a.width)};
      if (!(box.xmin >= 0 && box.ymin >= 0 && box.xmin <= box.xmax && box.ymin <= box.ymax && box.xmax <= 1 &&
            box.ymax <= 1))
        throw DataError(xml_path + ": object " + std::to_string(k) + " (" + obj.name +
                        "): <bndbox> is not inside the " + std::to_string(a.width) + "x" + std::to_string(a.height) +
                        " image with min <= max");
    }
    d.boxes.push_back(box);
    d.classes.push_back(id->second);
    d.texts.push_back(breed);
    d.difficult.push_back(obj.difficult);  // create_pet_tf_record keeps difficult objects
    d.truncated.push_back(obj.truncated);
    d.views.push_back(obj.pose);
    if (!o.faces_only) {
      if (o.mask_type == "png") {
        if (mask_png.empty())
          mask_png = encode_gray_png(pet.data(), static_cast<int>(a.height), static_cast<int>(a.width));
        d.masks.push_back(mask_png);
      } else {
        d.numerical_masks.insert(d.numerical_masks.end(), pet.begin(), pet.end());
      }
    }
  }
  *record = make_detection_example(d, "jpeg");
  return true;
}

}  // namespace

PetsConvertResult convert_pets(const PetsConvertOptions& o) {
  if (o.data_dir.empty() || o.output_dir.empty()) throw Error("--data_dir and --output_dir are required");
  if (o.num_shards < 1) throw Error("--num_shards must be at least 1");
  if (o.mask_type != "png" && o.mask_type != "numerical")
    throw Error("--mask_type must be png or numerical, not '" + o.mask_type + "'");
  const stdfs::path list_path = stdfs::path(o.data_dir) / "annotations" / "trainval.txt";
  std::error_code ec;
  if (!stdfs::exists(list_path, ec))
    throw DataError(list_path.string() +
                    ": no such file (--data_dir: the folder holding images/ and annotations/ of the Oxford-IIIT Pets)");

  PetsConvertResult result;
  std::map<std::string, int64_t> ids;
  std::string default_label_map;
  if (o.label_map_path.empty()) {
    result.label_map_path = join_path(o.output_dir, "pet_label_map.pbtxt");
    std::vector<std::pair<int64_t, std::string>> items;
    for (size_t i = 0; i < kPetClasses.size(); ++i) {
      items.emplace_back(static_cast<int64_t>(i) + 1, kPetClasses[i]);
      ids[kPetClasses[i]] = static_cast<int64_t>(i) + 1;
    }
    default_label_map = label_map_text(items, false);
    check_label_map_file(result.label_map_path, default_label_map);
  } else {
    result.label_map_path = o.label_map_path;
    ids = label_map_ids(o.label_map_path);
  }

  // dataset_util.read_examples_list: the first word of every line, blank lines included (they
  // name no xml and are skipped as missing ones, but take their place in the shuffle).
  std::vector<std::string> names;
  {
    std::ifstream in(list_path);
    std::string line;
    while (std::getline(in, line)) {
      const auto first = line.find_first_not_of(" \t\r\n\v\f");
      const auto last = line.find_last_not_of(" \t\r\n\v\f");
      const std::string stripped = first == std::string::npos ? "" : line.substr(first, last - first + 1);
      names.push_back(stripped.substr(0, stripped.find(' ')));
    }
  }
  python_random_shuffle(&names, 42);
  const size_t num_train = static_cast<size_t>(0.7 * static_cast<double>(names.size()));  // int(0.7 * n)
  const std::string base = o.faces_only ? "pet_faces" : "pets_fullbody_with_masks";
  std::array<Split, 2> splits{Split{join_path(o.output_dir, (base + "_train.record")), {}},
                              Split{join_path(o.output_dir, (base + "_val.record")), {}}};
  splits[0].names.assign(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(num_train));
  splits[1].names.assign(names.begin() + static_cast<std::ptrdiff_t>(num_train), names.end());
  result.train_prefix = splits[0].prefix;
  result.validation_prefix = splits[1].prefix;
  for (const auto& split : splits)
    check_no_stale_shards(o.output_dir, stdfs::path(split.prefix).filename().string(), o.num_shards);
  ensure_writable_dir(o.output_dir);
  spdlog::info("{} training and {} validation examples", splits[0].names.size(), splits[1].names.size());

  for (size_t s = 0; s < splits.size(); ++s) {
    std::vector<std::unique_ptr<TFRecordWriter>> shards;
    for (int k = 0; k < o.num_shards; ++k) {
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d", k, o.num_shards);
      shards.push_back(std::make_unique<TFRecordWriter>(splits[s].prefix + suffix));
    }
    const auto& split_names = splits[s].names;
    for (size_t i = 0; i < split_names.size(); ++i) {
      if (i % 1000 == 0) spdlog::info("{}: image {} of {}", splits[s].prefix, i, split_names.size());
      std::string record;
      if (!pet_example(o, ids, result.label_map_path, split_names[i], &record, &result)) continue;
      shards[i % static_cast<size_t>(o.num_shards)]->write(record);
      ++(s == 0 ? result.train : result.validation);
    }
    for (auto& w : shards) w->close();
  }
  if (!default_label_map.empty()) write_label_map_file(result.label_map_path, default_label_map);
  return result;
}

}  // namespace orchard::data
