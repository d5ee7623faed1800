#include "orchard/data/shapes.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/thread_pool.h"
#include "orchard/data/caption.h"
#include "orchard/data/detection.h"
#include "orchard/data/example.h"
#include "orchard/data/ml_images.h"
#include "orchard/data/pipeline.h"
#include "orchard/data/tools.h"

namespace stdfs = std::filesystem;

namespace orchard::data {
namespace {

// The modulo bias is below 2^-40 for the ranges used here.
int uniform_int(std::mt19937_64& rng, int lo, int hi) {
  return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

float uniform_real(std::mt19937_64& rng, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(rng() >> 40) * 0x1p-24f;
}

uint8_t clamp_u8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Pixel rows [y0, y1), columns [x0, x1).
struct PixelBox {
  int y0 = 0, x0 = 0, y1 = 0, x1 = 0;
  bool contains(int r, int c) const { return r >= y0 && r < y1 && c >= x0 && c < x1; }
  int area() const { return (y1 - y0) * (x1 - x0); }
};

// Whether adding `candidate` on top leaves every earlier object at least half visible.
// Counted on boxes over all later objects together, so three small covers cannot add up
// to hiding a shape that each alone would leave visible.
bool keeps_objects_visible(const std::vector<PixelBox>& placed, const PixelBox& candidate) {
  for (size_t j = 0; j < placed.size(); ++j) {
    const PixelBox& b = placed[j];
    int covered = 0;
    for (int r = b.y0; r < b.y1; ++r)
      for (int c = b.x0; c < b.x1; ++c) {
        bool hit = candidate.contains(r, c);
        for (size_t k = j + 1; k < placed.size() && !hit; ++k) hit = placed[k].contains(r, c);
        covered += hit;
      }
    if (2 * covered > b.area()) return false;
  }
  return true;
}

void validate(const SceneOptions& o) {
  if (o.image_size < 16 || o.image_size > 4096)
    throw Error("shapes: image_size must be in [16, 4096], not " + std::to_string(o.image_size));
  if (o.image_width != 0 && (o.image_width < 16 || o.image_width > 4096))
    throw Error("shapes: image_width must be in [16, 4096], not " + std::to_string(o.image_width));
  if (o.min_objects < 0 || o.max_objects < o.min_objects || o.max_objects > 64)
    throw Error("shapes: need 0 <= min_objects <= max_objects <= 64 (got " + std::to_string(o.min_objects) + ", " +
                std::to_string(o.max_objects) + ")");
  if (!(o.min_size > 0 && o.min_size <= o.max_size && o.max_size <= 1))
    throw Error("shapes: need 0 < min_size <= max_size <= 1 (got " + std::to_string(o.min_size) + ", " +
                std::to_string(o.max_size) + ")");
}

// A grey level with a gentle linear gradient: no hue, so an object's colour is never
// confused with the background, yet the level varies from near-black to near-white.
void fill_background(std::mt19937_64& rng, cv::Mat& mat) {
  const int level = uniform_int(rng, 50, 210);
  const float gy = uniform_real(rng, -30, 30), gx = uniform_real(rng, -30, 30);
  const float last_row = static_cast<float>(mat.rows - 1), last_col = static_cast<float>(mat.cols - 1);
  for (int r = 0; r < mat.rows; ++r) {
    auto* row = mat.ptr<cv::Vec3b>(r);
    for (int c = 0; c < mat.cols; ++c) {
      const float v = level + gy * (r / last_row - 0.5f) + gx * (c / last_col - 0.5f);
      const uint8_t g = clamp_u8(static_cast<int>(std::lround(v)));
      row[c] = cv::Vec3b(g, g, g);
    }
  }
}

// Rasterises a shape of side `size` at (y, x) into `mask` (cleared first) and returns the
// box of the pixels actually set: rasterisation rounds the apex of a triangle or the rim
// of a circle differently from the nominal square, and detection needs the drawn extent.
// Filled, without antialiasing; circle and triangle vertices carry one fractional bit
// (shift 1) for half-pixel centres.
PixelBox rasterise(cv::Mat& mask, int kind, int y, int x, int size) {
  mask.setTo(0);
  const int last = size - 1;
  if (kind == 0) {
    cv::circle(mask, cv::Point(2 * x + last, 2 * y + last), last, 255, cv::FILLED, cv::LINE_8, 1);
  } else if (kind == 1) {
    cv::rectangle(mask, cv::Point(x, y), cv::Point(x + last, y + last), 255, cv::FILLED, cv::LINE_8);
  } else {
    const cv::Point pts[3] = {cv::Point(2 * x, 2 * (y + last)), cv::Point(2 * (x + last), 2 * (y + last)),
                              cv::Point(2 * x + last, 2 * y)};
    cv::fillConvexPoly(mask, pts, 3, 255, cv::LINE_8, 1);
  }
  const cv::Rect r = cv::boundingRect(mask);
  return {r.y, r.x, r.y + r.height, r.x + r.width};
}

// Per-pixel, per-channel noise in [-12, 12], eight values per rng() call.
void add_noise(std::mt19937_64& rng, std::vector<uint8_t>& pixels) {
  uint64_t bits = 0;
  for (size_t i = 0; i < pixels.size(); ++i) {
    if (i % 8 == 0) bits = rng();
    const int noise = static_cast<int>(((bits & 0xff) * 25) >> 8) - 12;
    bits >>= 8;
    pixels[i] = clamp_u8(pixels[i] + noise);
  }
}

uint64_t split_code(const std::string& split) {
  if (split == "train") return 1;
  if (split == "validation") return 2;
  throw Error("shapes: split must be train or validation, not '" + split + "'");
}

SceneOptions scene_options(const ShapesOptions& o) {
  SceneOptions s;
  s.image_size = o.image_size;
  s.image_width = o.image_width;
  if (o.task == "captioning") {  // captions describe two objects and their relation
    s.min_objects = 2;
    s.max_objects = 2;
    s.min_size = 0.3f;
  }
  if (o.min_objects >= 0) s.min_objects = o.min_objects;
  if (o.max_objects >= 0) s.max_objects = o.max_objects;
  if (o.task == "captioning" && (s.min_objects < 1 || s.max_objects > 2))
    throw Error("shapes captions describe one or two objects: need 1 <= --min_objects <= --max_objects <= 2 (got " +
                std::to_string(s.min_objects) + ", " + std::to_string(s.max_objects) + ")");
  return s;
}

std::string multilabel_record(const Scene& scene, const std::string& format, const std::string& name) {
  tensorflow::Example ex;
  auto* f = ex.mutable_features();
  set_int64s(f, "width", {scene.width});
  set_int64s(f, "height", {scene.height});
  set_bytes(f, "image", format == "png" ? encode_png(scene.image) : encode_jpeg(scene.image, 95));
  set_bytes(f, "label", ml_images_label_bytes(shapes_multilabel(scene)));
  set_bytes(f, "name", name);
  return serialize_deterministic(ex);
}

// TF OD API schema: one box per shape, labelled with its kind (label-map id kind + 1); with
// `masks` each shape's visible pixels.
std::string detection_record(const Scene& scene, const std::string& format, const std::string& name, bool masks) {
  DetectionExample d;
  d.encoded = format == "png" ? encode_png(scene.image) : encode_jpeg(scene.image, 95);
  d.height = scene.height;
  d.width = scene.width;
  d.source_id = name;
  for (const auto& obj : scene.objects) {
    d.boxes.push_back(Box{obj.ymin, obj.xmin, obj.ymax, obj.xmax});
    d.classes.push_back(obj.kind + 1);
    d.texts.push_back(kShapeKinds[static_cast<size_t>(obj.kind)]);
  }
  for (size_t i = 0; masks && i < scene.objects.size(); ++i)
    d.masks.push_back(encode_gray_png(shapes_object_mask(scene, i).data(), scene.height, scene.width));
  return make_detection_example(d, format);
}

// Runs make(index, scene, name) for every record of a split on a thread pool. Records are
// independent (one RNG each), so workers fill disjoint slots and the result does not depend
// on the thread count.
template <class T, class Make>
std::vector<T> generate(const ShapesOptions& o, const std::string& split, int64_t count, const Make& make) {
  std::vector<T> out(static_cast<size_t>(count));
  constexpr int64_t kChunk = 64;
  std::exception_ptr failure;
  std::mutex mu;
  {
    ThreadPool pool(static_cast<int>(std::min<int64_t>(available_cores(), (count + kChunk - 1) / kChunk)));
    for (int64_t begin = 0; begin < count; begin += kChunk) {
      pool.submit([&, begin] {
        try {
          for (int64_t i = begin; i < std::min(count, begin + kChunk); ++i) {
            char name[64];
            std::snprintf(name, sizeof name, "shapes-%s-%06lld", split.c_str(), static_cast<long long>(i));
            out[static_cast<size_t>(i)] = make(i, shapes_scene(o, split, i), std::string(name));
          }
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failure) failure = std::current_exception();
        }
      });
    }
  }  // the pool's destructor runs every queued chunk before joining
  if (failure) std::rethrow_exception(failure);
  return out;
}

std::vector<std::string> make_split(const ShapesOptions& o, const std::string& split, int64_t count) {
  return generate<std::string>(o, split, count, [&](int64_t, const Scene& scene, const std::string& name) {
    return o.task == "detection" ? detection_record(scene, o.format, name, o.include_masks)
                                 : multilabel_record(scene, o.format, name);
  });
}

std::vector<CaptionedImage> make_caption_split(const ShapesOptions& o, const std::string& split, int64_t count) {
  return generate<CaptionedImage>(o, split, count, [&](int64_t i, const Scene& scene, const std::string&) {
    CaptionedImage image;
    image.image_id = i + 1;
    image.encoded = o.format == "png" ? encode_png(scene.image) : encode_jpeg(scene.image, 95);
    for (const auto& text : shapes_captions(scene)) image.captions.push_back(caption_tokens(text));
    return image;
  });
}

// word_counts.txt from the training captions, then both splits as im2txt records.
void write_caption_dataset(const ShapesOptions& o) {
  const auto train = make_caption_split(o, "train", o.num_train);
  const auto validation = make_caption_split(o, "validation", o.num_validation);
  std::vector<std::vector<std::string>> captions;
  for (const auto& image : train) captions.insert(captions.end(), image.captions.begin(), image.captions.end());
  const auto counts = count_words(captions, 4);
  write_word_counts(join_path(o.out_dir, "word_counts.txt"), counts);
  const Vocabulary vocab = vocabulary_from_counts(counts);
  write_shards(o.out_dir, "train", make_caption_records(train, vocab, mix_seed(o.seed, 1, 7)), o.train_shards);
  write_shards(o.out_dir, "validation", make_caption_records(validation, vocab, mix_seed(o.seed, 2, 7)),
               o.validation_shards);
}

}  // namespace

Scene make_scene(std::mt19937_64& rng, const SceneOptions& o) {
  validate(o);
  const int height = o.image_size, width = o.image_width > 0 ? o.image_width : o.image_size;
  const int n = std::min(height, width);  // object sizes follow the shorter side
  Scene scene;
  scene.height = scene.image.height = height;
  scene.width = scene.image.width = width;
  scene.image.pixels.assign(static_cast<size_t>(height) * width * 3, 0);
  cv::Mat mat(height, width, CV_8UC3, scene.image.pixels.data());
  fill_background(rng, mat);
  scene.object_index.assign(static_cast<size_t>(height) * width, 0);

  const int min_px = std::max(3, static_cast<int>(std::lround(o.min_size * n)));
  const int max_px = std::max(min_px, static_cast<int>(std::lround(o.max_size * n)));
  const int wanted = uniform_int(rng, o.min_objects, o.max_objects);
  constexpr int kTries = 100;
  std::vector<PixelBox> placed;
  cv::Mat mask(height, width, CV_8UC1);
  for (int i = 0; i < wanted; ++i) {
    ShapeObject obj;
    obj.kind = uniform_int(rng, 0, static_cast<int>(kShapeKinds.size()) - 1);
    obj.colour = uniform_int(rng, 0, static_cast<int>(kShapeColours.size()) - 1);
    PixelBox box;
    bool ok = false;
    for (int t = 0; t < kTries && !ok; ++t) {
      const int size = uniform_int(rng, min_px, max_px);
      const int y = uniform_int(rng, 0, height - size), x = uniform_int(rng, 0, width - size);
      box = rasterise(mask, obj.kind, y, x, size);
      ok = box.area() > 0 && keeps_objects_visible(placed, box);
    }
    if (!ok) {
      // Optional objects are simply left out; a required one means the options ask for
      // more area than the image has.
      if (i < o.min_objects)
        throw Error("shapes: cannot place " + std::to_string(o.min_objects) + " objects of up to " +
                    std::to_string(o.max_size) + " of the image side, each at least half visible");
      break;
    }
    // Pure red, green or blue varied per object, so colour names stay unambiguous.
    cv::Scalar rgb;
    for (int c = 0; c < 3; ++c) rgb[c] = (c == obj.colour ? 210 : 40) + uniform_int(rng, -20, 20);
    mat.setTo(rgb, mask);
    const auto id = static_cast<uint8_t>(scene.objects.size() + 1);  // at most 64 objects
    for (int r = box.y0; r < box.y1; ++r) {
      const uint8_t* m = mask.ptr<uint8_t>(r);
      for (int c = box.x0; c < box.x1; ++c)
        if (m[c]) scene.object_index[static_cast<size_t>(r) * width + c] = id;
    }
    const float rows = static_cast<float>(height), cols = static_cast<float>(width);
    obj.ymin = box.y0 / rows;
    obj.xmin = box.x0 / cols;
    obj.ymax = box.y1 / rows;
    obj.xmax = box.x1 / cols;
    placed.push_back(box);
    scene.objects.push_back(obj);
  }
  add_noise(rng, scene.image.pixels);
  return scene;
}

std::vector<uint8_t> shapes_object_mask(const Scene& scene, size_t object) {
  if (object >= scene.objects.size())
    throw Error("shapes: object " + std::to_string(object) + " of a scene of " + std::to_string(scene.objects.size()));
  std::vector<uint8_t> mask(scene.object_index.size());
  const auto id = static_cast<uint8_t>(object + 1);
  for (size_t p = 0; p < mask.size(); ++p) mask[p] = scene.object_index[p] == id;
  return mask;
}

std::vector<std::string> shapes_multilabel_classes() {
  std::vector<std::string> names(kShapeKinds.begin(), kShapeKinds.end());
  names.insert(names.end(), kShapeColours.begin(), kShapeColours.end());
  return names;
}

std::vector<float> shapes_multilabel(const Scene& scene) {
  std::vector<float> label(kShapeKinds.size() + kShapeColours.size(), 0.0f);
  for (const auto& obj : scene.objects) {
    label.at(static_cast<size_t>(obj.kind)) = 1.0f;
    label.at(kShapeKinds.size() + static_cast<size_t>(obj.colour)) = 1.0f;
  }
  return label;
}

Scene shapes_scene(const ShapesOptions& o, const std::string& split, int64_t index) {
  std::mt19937_64 rng(mix_seed(o.seed, split_code(split), static_cast<uint64_t>(index)));
  return make_scene(rng, scene_options(o));
}

std::vector<std::string> shapes_captions(const Scene& scene) {
  const auto name = [](const ShapeObject& obj) {
    return std::string(kShapeColours[static_cast<size_t>(obj.colour)]) + " " +
           kShapeKinds[static_cast<size_t>(obj.kind)];
  };
  if (scene.objects.size() == 1) {
    const std::string a = name(scene.objects[0]);
    return {"a " + a, "there is a " + a, "a single " + a, "a " + a + " on a grey background", "one " + a};
  }
  if (scene.objects.size() != 2)
    throw Error("shapes captions describe one or two objects, not " + std::to_string(scene.objects.size()));
  const ShapeObject &p = scene.objects[0], &q = scene.objects[1];
  const float dy = (q.ymin + q.ymax) - (p.ymin + p.ymax), dx = (q.xmin + q.xmax) - (p.xmin + p.xmax);
  if (std::abs(dy) >= std::abs(dx)) {
    const std::string top = name(dy > 0 ? p : q), bottom = name(dy > 0 ? q : p);
    return {"a " + top + " above a " + bottom, "a " + bottom + " below a " + top, "a " + top + " and a " + bottom,
            "there is a " + top + " above a " + bottom, "a " + top + " over a " + bottom};
  }
  const std::string a = name(dx > 0 ? p : q), b = name(dx > 0 ? q : p);
  return {"a " + a + " next to a " + b, "a " + b + " next to a " + a, "a " + a + " and a " + b,
          "a " + a + " beside a " + b, "there is a " + a + " next to a " + b};
}

std::pair<int64_t, int64_t> write_shapes_dataset(const ShapesOptions& o) {
  if (o.task != "multilabel" && o.task != "detection" && o.task != "captioning")
    throw Error("--task must be multilabel, detection or captioning, not '" + o.task + "'");
  if (o.format != "png" && o.format != "jpeg") throw Error("--format must be png or jpeg, not '" + o.format + "'");
  if (o.include_masks && o.task != "detection")
    throw Error("--include_masks writes instance masks into detection records: it needs --task detection, not '" +
                o.task + "'");
  if (o.out_dir.empty()) throw Error("--out_dir is required");
  if (o.num_train < 0 || o.num_validation < 0) throw Error("--num_train and --num_validation must be >= 0");
  if (o.train_shards < 1 || o.validation_shards < 1)
    throw Error("--train_shards and --validation_shards must be at least 1");
  validate(scene_options(o));  // fail before any work, not inside a worker
  ensure_writable_dir(o.out_dir);
  if (o.task == "captioning") {
    write_caption_dataset(o);
    return {o.num_train, o.num_validation};
  }
  write_shards(o.out_dir, "train", make_split(o, "train", o.num_train), o.train_shards);
  write_shards(o.out_dir, "validation", make_split(o, "validation", o.num_validation), o.validation_shards);
  if (o.task == "detection") {
    std::string label_map;
    for (size_t k = 0; k < kShapeKinds.size(); ++k)
      label_map += "item {\n  id: " + std::to_string(k + 1) + "\n  name: \"" + kShapeKinds[k] + "\"\n}\n";
    atomic_write_file(join_path(o.out_dir, "label_map.pbtxt"), label_map);
  } else {
    std::string labels;
    for (const auto& name : shapes_multilabel_classes()) labels += name + "\n";
    atomic_write_file(join_path(o.out_dir, "labels.txt"), labels);
  }
  return {o.num_train, o.num_validation};
}

}  // namespace orchard::data
