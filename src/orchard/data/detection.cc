#include "orchard/data/detection.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "orchard/core/error.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace orchard::data {
namespace {

constexpr float kBoxTolerance = 1e-3f;  // converters round; a box may end at 1.0005

[[noreturn]] void bad(const std::string& source, const std::string& field, const std::string& what) {
  throw DataError(source + ": " + field + ": " + what);
}

Image crop_image(const Image& img, const CropWindow& c) {
  if (c.y == 0 && c.x == 0 && c.height == img.height && c.width == img.width) return img;
  Image out;
  out.height = c.height;
  out.width = c.width;
  out.pixels.resize(static_cast<size_t>(c.height) * c.width * 3);
  for (int y = 0; y < c.height; ++y) {
    const uint8_t* src = img.pixels.data() + (static_cast<size_t>(c.y + y) * img.width + c.x) * 3;
    std::copy(src, src + static_cast<size_t>(c.width) * 3, out.pixels.data() + static_cast<size_t>(y) * c.width * 3);
  }
  return out;
}

// image/object/mask as PNG_MASKS: one encoded image per box, each of the image's size (by its
// header; preprocess_detection decodes the ones it needs).
void read_masks_into(const ExampleView& ex, const std::string& source, size_t boxes, DetectionExample* d) {
  constexpr const char* kKey = "image/object/mask";
  const auto& features = ex.features().feature();
  const auto it = features.find(kKey);
  if (it == features.end()) return;
  if (it->second.kind_case() == tensorflow::Feature::kFloatList)
    bad(source, kKey,
        "a float list (the OD API's NUMERICAL_MASKS) is not supported; Orchard reads PNG_MASKS (one PNG per "
        "object, as create_coco_tf_record.py --include_masks writes them)");
  d->masks = ex.bytes_list(kKey);
  if (!d->masks.empty() && d->masks.size() != boxes)
    bad(source, kKey, std::to_string(d->masks.size()) + " masks for " + std::to_string(boxes) + " boxes");
  for (size_t i = 0; i < d->masks.size(); ++i) {
    const ImageSize size = image_size(d->masks[i], source + ": " + kKey + " " + std::to_string(i));
    if (size.height != d->height || size.width != d->width)
      bad(source, kKey,
          "mask " + std::to_string(i) + " is " + std::to_string(size.height) + "x" + std::to_string(size.width) +
              " but the image is " + std::to_string(d->height) + "x" + std::to_string(d->width));
  }
}

}  // namespace

DetectionExample parse_detection_example(const std::string& record, const std::string& source, int64_t num_classes,
                                         bool read_masks) {
  ExampleView ex(record, source);
  DetectionExample d;
  d.encoded = ex.bytes("image/encoded");
  if (ex.has("image/height")) d.height = static_cast<int>(ex.int64("image/height"));
  if (ex.has("image/width")) d.width = static_cast<int>(ex.int64("image/width"));
  const ImageSize size = image_size(d.encoded, source);
  if ((d.height && d.height != size.height) || (d.width && d.width != size.width))
    bad(source, "image/height, image/width",
        std::to_string(d.height) + "x" + std::to_string(d.width) + " but the image is " + std::to_string(size.height) +
            "x" + std::to_string(size.width));
  d.height = size.height;
  d.width = size.width;
  // An empty list (or a feature with no kind) is an absent id, as in the OD API's decoder.
  const auto source_id = ex.bytes_list("image/source_id");
  if (!source_id.empty()) d.source_id = source_id[0];
  const auto ymin = ex.floats("image/object/bbox/ymin"), xmin = ex.floats("image/object/bbox/xmin");
  const auto ymax = ex.floats("image/object/bbox/ymax"), xmax = ex.floats("image/object/bbox/xmax");
  d.classes = ex.int64s("image/object/class/label");
  d.texts = ex.bytes_list("image/object/class/text");
  const size_t n = ymin.size();
  // Per-box flags: absent or empty means none set, as the OD API's decoder defaults them.
  auto flags = [&](const char* key, std::vector<bool>* out) {
    for (int64_t c : ex.int64s(key)) out->push_back(c != 0);
    if (!out->empty() && out->size() != n)
      bad(source, key, std::to_string(out->size()) + " values for " + std::to_string(n) + " boxes");
  };
  flags("image/object/is_crowd", &d.crowd);
  flags("image/object/difficult", &d.difficult);
  flags("image/object/group_of", &d.group_of);
  d.image_labels = ex.int64s("image/class/label");
  if (xmin.size() != n || ymax.size() != n || xmax.size() != n)
    bad(source, "image/object/bbox/*",
        "the four coordinate lists differ in length (ymin " + std::to_string(ymin.size()) + ", xmin " +
            std::to_string(xmin.size()) + ", ymax " + std::to_string(ymax.size()) + ", xmax " +
            std::to_string(xmax.size()) + ")");
  if (d.classes.size() != n)
    bad(source, "image/object/class/label",
        std::to_string(d.classes.size()) + " labels for " + std::to_string(n) + " boxes");
  for (size_t i = 0; i < n; ++i) {
    Box b{ymin[i], xmin[i], ymax[i], xmax[i]};
    const bool in_range = b.ymin >= -kBoxTolerance && b.xmin >= -kBoxTolerance && b.ymax <= 1 + kBoxTolerance &&
                          b.xmax <= 1 + kBoxTolerance;
    if (!in_range || !(b.ymin <= b.ymax) || !(b.xmin <= b.xmax))
      bad(source, "image/object/bbox",
          "box " + std::to_string(i) + " (" + std::to_string(b.ymin) + ", " + std::to_string(b.xmin) + ", " +
              std::to_string(b.ymax) + ", " + std::to_string(b.xmax) +
              ") is not a normalised [ymin, xmin, ymax, xmax] box in [0, 1]");
    b.ymin = std::clamp(b.ymin, 0.f, 1.f);
    b.xmin = std::clamp(b.xmin, 0.f, 1.f);
    b.ymax = std::clamp(b.ymax, 0.f, 1.f);
    b.xmax = std::clamp(b.xmax, 0.f, 1.f);
    d.boxes.push_back(b);
    if (d.classes[i] < 1 || d.classes[i] > num_classes)
      bad(source, "image/object/class/label",
          "box " + std::to_string(i) + " has label " + std::to_string(d.classes[i]) +
              "; labels are label-map ids from 1 to num_classes (" + std::to_string(num_classes) +
              "), 0 is reserved for the background");
  }
  if (read_masks) read_masks_into(ex, source, n, &d);
  return d;
}

std::string make_detection_example(const DetectionExample& d, const std::string& format) {
  tensorflow::Example ex;
  auto* f = ex.mutable_features();
  set_bytes(f, "image/encoded", d.encoded);
  set_bytes(f, "image/format", format);
  set_int64s(f, "image/height", {d.height});
  set_int64s(f, "image/width", {d.width});
  set_bytes(f, "image/source_id", d.source_id);
  set_bytes(f, "image/filename", d.filename.empty() ? d.source_id : d.filename);
  if (!d.key_sha256.empty()) set_bytes(f, "image/key/sha256", d.key_sha256);
  std::vector<float> ymin, xmin, ymax, xmax;
  for (const Box& b : d.boxes) {
    ymin.push_back(b.ymin);
    xmin.push_back(b.xmin);
    ymax.push_back(b.ymax);
    xmax.push_back(b.xmax);
  }
  set_floats(f, "image/object/bbox/ymin", ymin);
  set_floats(f, "image/object/bbox/xmin", xmin);
  set_floats(f, "image/object/bbox/ymax", ymax);
  set_floats(f, "image/object/bbox/xmax", xmax);
  set_int64s(f, "image/object/class/label", d.classes);
  auto* texts = (*f->mutable_feature())["image/object/class/text"].mutable_bytes_list();
  for (const auto& t : d.texts) texts->add_value(t);
  for (const auto& [key, flags] : {std::pair<const char*, const std::vector<bool>*>{"image/object/is_crowd", &d.crowd},
                                   {"image/object/difficult", &d.difficult},
                                   {"image/object/group_of", &d.group_of}})
    if (!flags->empty()) set_int64s(f, key, std::vector<int64_t>(flags->begin(), flags->end()));
  if (!d.image_labels.empty()) set_int64s(f, "image/class/label", d.image_labels);
  if (!d.masks.empty()) {
    auto* masks = (*f->mutable_feature())["image/object/mask"].mutable_bytes_list();
    for (const auto& m : d.masks) masks->add_value(m);
  } else if (!d.numerical_masks.empty()) {
    set_floats(f, "image/object/mask", d.numerical_masks);
  }
  if (!d.truncated.empty()) set_int64s(f, "image/object/truncated", d.truncated);
  if (!d.views.empty()) {
    auto* views = (*f->mutable_feature())["image/object/view"].mutable_bytes_list();
    for (const auto& v : d.views) views->add_value(v);
  }
  return serialize_deterministic(ex);
}

namespace {

// The boxes of a crop: those of which at least overlap_thresh is visible (the OD API's
// prune_non_overlapping_boxes; before it, prune_completely_outside_window where
// `prune_outside`), in the crop's frame, clipped to it where `clip`; `classes` follows.
void keep_boxes_in_crop(int height, int width, const CropWindow& c, float overlap_thresh, bool clip, bool prune_outside,
                        std::vector<Box>* boxes, std::vector<int64_t>* classes) {
  const float wy0 = static_cast<float>(c.y) / height, wx0 = static_cast<float>(c.x) / width;
  const float wh = static_cast<float>(c.height) / height, ww = static_cast<float>(c.width) / width;
  std::vector<Box> kept;
  std::vector<int64_t> kept_classes;
  for (size_t i = 0; i < boxes->size(); ++i) {
    const Box& b = (*boxes)[i];
    // prune_completely_outside_window, then keep when the visible fraction >= overlap_thresh.
    if (prune_outside && (b.ymin >= wy0 + wh || b.ymax <= wy0 || b.xmin >= wx0 + ww || b.xmax <= wx0)) continue;
    const float area = (b.ymax - b.ymin) * (b.xmax - b.xmin);
    const float iy = std::min(b.ymax, wy0 + wh) - std::max(b.ymin, wy0);
    const float ix = std::min(b.xmax, wx0 + ww) - std::max(b.xmin, wx0);
    const float visible = area > 0 ? std::max(0.f, iy) * std::max(0.f, ix) / area : 0.f;
    if (visible + 1e-5f < overlap_thresh) continue;  // pixel vs normalised rounding
    Box n{(b.ymin - wy0) / wh, (b.xmin - wx0) / ww, (b.ymax - wy0) / wh, (b.xmax - wx0) / ww};
    if (clip) {
      n.ymin = std::clamp(n.ymin, 0.f, 1.f);
      n.xmin = std::clamp(n.xmin, 0.f, 1.f);
      n.ymax = std::clamp(n.ymax, 0.f, 1.f);
      n.xmax = std::clamp(n.xmax, 0.f, 1.f);
    }
    kept.push_back(n);
    kept_classes.push_back((*classes)[i]);
  }
  *boxes = std::move(kept);
  *classes = std::move(kept_classes);
}

// The instance masks of the first n boxes kept, index[i] naming box i's mask in the record:
// the `window` of the decoded mask (in the record image's pixels), mirrored when `flip`, then
// resized to out_h x out_w as the OD API resizes masks, TF1's resize_images NEAREST_NEIGHBOR
// without align_corners (source pixel floor(dst * in / out), in float32 as TF computes it);
// each written top-left into its [options.height, options.width] plane of `out`.
void write_masks(const DetectionExample& example, const std::vector<int64_t>& index, int64_t n,
                 const CropWindow& window, bool flip, int out_h, int out_w, int full_h, int full_w,
                 const DetectionInputOptions& options, bool* out, const std::string& what) {
  const float scale_y = static_cast<float>(window.height) / static_cast<float>(out_h);
  const float scale_x = static_cast<float>(window.width) / static_cast<float>(out_w);
  std::vector<size_t> rows(static_cast<size_t>(out_h)), cols(static_cast<size_t>(out_w));
  for (int y = 0; y < out_h; ++y) {
    const int r = std::min(static_cast<int>(std::floor(static_cast<float>(y) * scale_y)), window.height - 1);
    rows[static_cast<size_t>(y)] = static_cast<size_t>(window.y + r);
  }
  for (int x = 0; x < out_w; ++x) {
    int c = std::min(static_cast<int>(std::floor(static_cast<float>(x) * scale_x)), window.width - 1);
    if (flip) c = window.width - 1 - c;  // flipped before the resize, as the augmentation precedes the resizer
    cols[static_cast<size_t>(x)] = static_cast<size_t>(window.x + c);
  }
  const size_t H = static_cast<size_t>(options.height), W = static_cast<size_t>(options.width);
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(index[static_cast<size_t>(i)]);
    const std::string field = what + ": image/object/mask " + std::to_string(k);
    const Image mask = decode_image(example.masks[k], field, options.max_image_pixels);
    if (mask.height != full_h || mask.width != full_w)
      throw DataError(field + ": the mask is " + std::to_string(mask.height) + "x" + std::to_string(mask.width) +
                      " but the image is " + std::to_string(full_h) + "x" + std::to_string(full_w));
    bool* plane = out + static_cast<size_t>(i) * H * W;
    for (size_t y = 0; y < rows.size(); ++y) {
      // decode_image gives RGB (a grey PNG's value in all three channels).
      const uint8_t* row = mask.pixels.data() + rows[y] * static_cast<size_t>(full_w) * 3;
      for (size_t x = 0; x < cols.size(); ++x) {
        const uint8_t* p = row + cols[x] * 3;
        plane[y * W + x] = (p[0] | p[1] | p[2]) != 0;
      }
    }
  }
}

}  // namespace

std::vector<SsdRandomCropOperation> default_ssd_random_crop() {
  std::vector<SsdRandomCropOperation> ops;
  for (float t : {0.0f, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 1.0f}) {
    SsdRandomCropOperation op;
    op.min_object_covered = t;
    op.overlap_thresh = t;
    ops.push_back(op);
  }
  return ops;
}

CropWindow ssd_random_crop(int height, int width, const std::vector<SsdRandomCropOperation>& operations,
                           std::vector<Box>* boxes, std::vector<int64_t>* classes, std::mt19937_64& rng) {
  const CropWindow whole{0, 0, height, width};
  if (operations.empty()) return whole;
  const auto& op = operations[std::uniform_int_distribution<size_t>(0, operations.size() - 1)(rng)];
  // TF crops when a uniform draw exceeds random_coef.
  if (std::uniform_real_distribution<float>(0.f, 1.f)(rng) <= op.random_coef) return whole;
  DistortedBoxOptions o;
  o.min_object_covered = op.min_object_covered;
  o.min_aspect_ratio = op.min_aspect_ratio;
  o.max_aspect_ratio = op.max_aspect_ratio;
  o.min_area = op.min_area;
  o.max_area = op.max_area;
  const CropWindow c = sample_distorted_crop(height, width, *boxes, o, rng);
  keep_boxes_in_crop(height, width, c, op.overlap_thresh, op.clip_boxes, /*prune_outside=*/true, boxes, classes);
  return c;
}

CropWindow random_crop_to_aspect_ratio(int height, int width, float aspect_ratio, std::vector<Box>* boxes,
                                       std::vector<int64_t>* index, std::mt19937_64& rng) {
  // float32 and tf.round (half to even), as the graph computes them.
  const float orig = static_cast<float>(width) / static_cast<float>(height);
  const int target_h = orig >= aspect_ratio
                           ? height
                           : static_cast<int>(std::nearbyint(static_cast<float>(height) * orig / aspect_ratio));
  const int target_w =
      orig <= aspect_ratio ? width : static_cast<int>(std::nearbyint(static_cast<float>(width) * aspect_ratio / orig));
  CropWindow c;
  c.height = target_h;
  c.width = target_w;
  c.y = std::uniform_int_distribution<int>(0, height - target_h)(rng);
  c.x = std::uniform_int_distribution<int>(0, width - target_w)(rng);
  // prune_non_overlapping_boxes(overlap_thresh 0.3), then clip_to_window.
  keep_boxes_in_crop(height, width, c, 0.3f, /*clip=*/true, /*prune_outside=*/false, boxes, index);
  return c;
}

std::vector<FieldSpec> detection_fields(int64_t max_boxes, int64_t num_classes) {
  return {{"boxes", at::kFloat, {max_boxes, 4}},
          {"classes", at::kLong, {max_boxes}},
          {"is_crowd", at::kBool, {max_boxes}},
          {"num_boxes", at::kLong, {}},
          {"image_id", at::kLong, {}},
          {"original_size", at::kLong, {2}},
          {"difficult", at::kBool, {max_boxes}},
          {"group_of", at::kBool, {max_boxes}},
          {"image_labels", at::kBool, {num_classes + 1}},
          {"image_size", at::kLong, {2}}};
}

std::vector<FieldSpec> detection_fields(const DetectionInputOptions& options, int64_t num_classes) {
  auto fields = detection_fields(options.max_boxes, num_classes);
  if (options.load_instance_masks)
    fields.push_back({"masks", at::kBool, {options.max_boxes, options.height, options.width}});
  return fields;
}

DetectionTargets detection_targets(const SampleOut& out, size_t first, bool masks) {
  DetectionTargets t;
  t.boxes = out.field<float>(first);
  t.classes = out.field<int64_t>(first + 1);
  t.is_crowd = out.field<bool>(first + 2);
  t.num_boxes = out.field<int64_t>(first + 3);
  t.image_id = out.field<int64_t>(first + 4);
  t.original_size = out.field<int64_t>(first + 5);
  t.difficult = out.field<bool>(first + 6);
  t.group_of = out.field<bool>(first + 7);
  t.image_labels = out.field<bool>(first + 8);
  t.image_size = out.field<int64_t>(first + 9);
  if (masks) t.masks = out.field<bool>(first + 10);
  return t;
}

uint64_t detection_image_key(const DetectionExample& example) {
  const std::string& id = example.source_id.empty() ? example.encoded : example.source_id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return (h ^ (h >> 48)) & ((1ull << 48) - 1);
}

std::pair<int, int> resized_image_size(int height, int width, const DetectionInputOptions& options) {
  if (!options.keep_aspect_ratio) return {options.height, options.width};
  const auto& k = *options.keep_aspect_ratio;
  // resize_to_range: float32, tf.round (half to even).
  const float h = static_cast<float>(height), w = static_cast<float>(width);
  const float large = static_cast<float>(k.min_dimension) / std::min(h, w);
  int out_h = static_cast<int>(std::nearbyint(h * large)), out_w = static_cast<int>(std::nearbyint(w * large));
  if (static_cast<float>(std::max(out_h, out_w)) > static_cast<float>(k.max_dimension)) {
    const float small = static_cast<float>(k.max_dimension) / std::max(h, w);
    out_h = static_cast<int>(std::nearbyint(h * small));
    out_w = static_cast<int>(std::nearbyint(w * small));
  }
  // At least one pixel; never past the buffer (float rounding of extreme aspect ratios).
  return {std::clamp(out_h, 1, k.max_dimension), std::clamp(out_w, 1, k.max_dimension)};
}

int64_t preprocess_detection(const DetectionExample& example, const DetectionInputOptions& options, bool training,
                             std::mt19937_64& rng, float* image, const DetectionTargets* targets,
                             const std::string& what) {
  const bool masks = options.load_instance_masks && targets && targets->masks;
  if (masks && example.masks.size() != example.boxes.size())
    throw DataError(what + ": image/object/mask: " +
                    (example.masks.empty() ? std::string("load_instance_masks is set but the record has no masks")
                                           : std::to_string(example.masks.size()) + " masks") +
                    " for its " + std::to_string(example.boxes.size()) +
                    " boxes (convert with --include_masks, or leave load_instance_masks unset)");
  Image img = decode_image(example.encoded, what, options.max_image_pixels);
  const int full_h = img.height, full_w = img.width;
  CropWindow window{0, 0, img.height, img.width};  // the crops' composition, in the record image's pixels
  std::vector<Box> boxes = example.boxes;
  // The crops carry each box's index in the record, which names its class and flags after.
  std::vector<int64_t> index(boxes.size());
  std::iota(index.begin(), index.end(), 0);
  bool flip = false;
  if (training) {
    const auto& aug = options.augmentation;
    // The TF OD API applies data_augmentation_options in config order; Orchard's configs list
    // the flip first, and a flip commutes with the crop up to the random draw.
    if (aug.random_horizontal_flip) flip = std::uniform_real_distribution<float>(0.f, 1.f)(rng) < aug.flip_probability;
    for (const auto* crop : {&aug.ssd_random_crop, &aug.random_crop_image}) {
      if (crop->empty()) continue;
      const CropWindow c = ssd_random_crop(img.height, img.width, *crop, &boxes, &index, rng);
      img = crop_image(img, c);
      window = CropWindow{window.y + c.y, window.x + c.x, c.height, c.width};
      if (crop == &aug.ssd_random_crop && aug.crop_to_aspect_ratio > 0) {
        const CropWindow r =
            random_crop_to_aspect_ratio(img.height, img.width, aug.crop_to_aspect_ratio, &boxes, &index, rng);
        img = crop_image(img, r);
        window = CropWindow{window.y + r.y, window.x + r.x, r.height, r.width};
      }
    }
  }
  if (flip)
    for (Box& b : boxes) b = Box{b.ymin, 1.f - b.xmax, b.ymax, 1.f - b.xmin};
  const auto [out_h, out_w] = resized_image_size(img.height, img.width, options);
  constexpr float kScale = 2.0f / 255.0f;
  if (!options.keep_aspect_ratio) {
    resize_scale(img, out_h, out_w, flip, options.channels_last, kScale, {1.f, 1.f, 1.f}, image);
  } else {
    // Top-left in the options.height x options.width buffer; the rest is the pad value, scaled
    // as the pixels are (the OD API pads before the feature extractor's preprocessing).
    std::vector<float> resized(static_cast<size_t>(out_h) * out_w * 3);
    resize_scale(img, out_h, out_w, flip, options.channels_last, kScale, {1.f, 1.f, 1.f}, resized.data());
    const auto& pad = options.keep_aspect_ratio->pad_value;
    const size_t H = static_cast<size_t>(options.height), W = static_cast<size_t>(options.width);
    const size_t h = static_cast<size_t>(out_h), w = static_cast<size_t>(out_w);
    if (options.channels_last) {
      for (size_t p = 0; p < H * W; ++p)
        for (size_t ch = 0; ch < 3; ++ch) image[p * 3 + ch] = pad[ch] * kScale - 1.f;
      for (size_t y = 0; y < h; ++y) std::copy_n(resized.data() + y * w * 3, w * 3, image + y * W * 3);
    } else {
      for (size_t ch = 0; ch < 3; ++ch) {
        std::fill_n(image + ch * H * W, H * W, pad[ch] * kScale - 1.f);
        for (size_t y = 0; y < h; ++y) std::copy_n(resized.data() + (ch * h + y) * w, w, image + ch * H * W + y * W);
      }
    }
  }
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(boxes.size()), options.max_boxes);
  if (!targets) return n;
  const DetectionTargets& t = *targets;
  *t.num_boxes = n;
  *t.image_id = static_cast<int64_t>(detection_image_key(example));
  t.original_size[0] = example.height;
  t.original_size[1] = example.width;
  if (t.image_size) {
    t.image_size[0] = out_h;
    t.image_size[1] = out_w;
  }
  for (int64_t i = 0; i < n; ++i) {  // the fields arrive zeroed: the padding stays 0
    float* b = t.boxes + 4 * i;
    b[0] = boxes[i].ymin;
    b[1] = boxes[i].xmin;
    b[2] = boxes[i].ymax;
    b[3] = boxes[i].xmax;
    const auto k = static_cast<size_t>(index[i]);
    auto flag = [k](const std::vector<bool>& flags) { return k < flags.size() && flags[k]; };
    t.classes[i] = example.classes[k];
    t.is_crowd[i] = flag(example.crowd);
    if (t.difficult) t.difficult[i] = flag(example.difficult);
    if (t.group_of) t.group_of[i] = flag(example.group_of);
  }
  if (t.image_labels)
    for (int64_t label : example.image_labels)
      if (label >= 1 && label <= t.num_classes) t.image_labels[label] = true;
  if (masks) write_masks(example, index, n, window, flip, out_h, out_w, full_h, full_w, options, t.masks, what);
  return n;
}

void draw_boxes(Image* image, const std::vector<Box>& boxes, const std::vector<std::string>& labels,
                const std::array<uint8_t, 3>& rgb) {
  cv::Mat mat(image->height, image->width, CV_8UC3, image->pixels.data());
  const cv::Scalar colour(rgb[0], rgb[1], rgb[2]);
  const int thickness = std::max(1, std::min(image->height, image->width) / 150);
  const double font = std::max(0.3, std::min(image->height, image->width) / 600.0);
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    const cv::Point p0(static_cast<int>(std::lround(b.xmin * image->width)),
                       static_cast<int>(std::lround(b.ymin * image->height)));
    const cv::Point p1(static_cast<int>(std::lround(b.xmax * image->width)) - 1,
                       static_cast<int>(std::lround(b.ymax * image->height)) - 1);
    cv::rectangle(mat, p0, p1, colour, thickness);
    if (i < labels.size() && !labels[i].empty())
      cv::putText(mat, labels[i], cv::Point(p0.x + 2, std::max(p0.y - 3, 10)), cv::FONT_HERSHEY_SIMPLEX, font, colour,
                  1, cv::LINE_AA);
  }
}

}  // namespace orchard::data
