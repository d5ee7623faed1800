// Object-detection records in the TF Object Detection API's tf.train.Example schema, and the
// SSD input path: decode, augment (random_horizontal_flip, ssd_random_crop), resize (the
// fixed_shape_resizer's size, or keep_aspect_ratio_resizer's) and scale to [-1, 1] as the
// MobileNet feature extractors expect.
//
// Boxes are normalised [ymin, xmin, ymax, xmax] in [0, 1]; classes are label-map ids,
// 1-based (0 is the background and never appears in records). Instance masks (Mask R-CNN's
// ground truth) are the OD API's PNG_MASKS: image/object/mask holds one PNG per box, single
// channel, the image's size, a pixel in the mask where its value is > 0 (0/1 as
// create_coco_tf_record.py --include_masks writes them).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchard/data/pipeline.h"
#include "orchard/data/preprocess.h"

namespace orchard::data {

struct DetectionExample {
  std::string encoded;  // image/encoded (JPEG or PNG)
  int height = 0;       // image/height, image/width (checked against the image header)
  int width = 0;
  std::string source_id;  // image/source_id (may be empty)
  std::vector<Box> boxes;
  std::vector<int64_t> classes;
  std::vector<std::string> texts;     // image/object/class/text (may be empty)
  std::vector<bool> crowd;            // image/object/is_crowd (may be empty: none)
  std::vector<bool> difficult;        // image/object/difficult (may be empty: none)
  std::vector<bool> group_of;         // image/object/group_of (may be empty: none)
  std::vector<int64_t> image_labels;  // image/class/label: verified image-level labels (Open Images)
  std::vector<std::string> masks;     // image/object/mask: one encoded PNG per box (may be empty: none)

  // Written by make_detection_example when set, not read by parse_detection_example (training
  // does not use them): what create_pascal_tf_record.py / create_pet_tf_record.py also write.
  std::string filename;            // image/filename (empty: source_id)
  std::string key_sha256;          // image/key/sha256: hex SHA-256 of `encoded`
  std::vector<int64_t> truncated;  // image/object/truncated
  std::vector<std::string> views;  // image/object/view (VOC's <pose>)
  // image/object/mask as the OD API's NUMERICAL_MASKS: a float list, mask after mask, each
  // height x width row-major, 0 or 1 (instead of `masks`; Orchard's reader refuses it).
  std::vector<float> numerical_masks;
};

// Parses and checks one record: the four bbox lists and the labels have one length, boxes lie
// in [0, 1] with min <= max, labels in 1..num_classes. With `read_masks`, image/object/mask is
// read too: as many masks as boxes (or none), each of the image's size by its header (decoded
// only by preprocess_detection); a float list there (the OD API's NUMERICAL_MASKS) is refused.
// Errors name `source` and the field.
DetectionExample parse_detection_example(const std::string& record, const std::string& source, int64_t num_classes,
                                         bool read_masks = true);

// One tf.train.Example in the TF OD API schema (what `orchard data coco|shapes` write).
std::string make_detection_example(const DetectionExample& example, const std::string& format);

// ssd_random_crop: one of several operations chosen at random; each keeps the image
// unchanged with probability random_coef, else takes a sample_distorted_bounding_box crop
// covering min_object_covered of some box, keeps the boxes whose visible fraction is at least
// overlap_thresh, and clips them to the crop.
struct SsdRandomCropOperation {
  float min_object_covered = 0.0f;
  float min_aspect_ratio = 0.5f, max_aspect_ratio = 2.0f;
  float min_area = 0.1f, max_area = 1.0f;
  float overlap_thresh = 0.0f;
  bool clip_boxes = true;
  float random_coef = 0.15f;
};
// The TF OD API's defaults for `ssd_random_crop {}`: min_object_covered and overlap_thresh
// 0, .1, .3, .5, .7, .9, 1.
std::vector<SsdRandomCropOperation> default_ssd_random_crop();

struct DetectionAugmentation {
  bool random_horizontal_flip = false;
  float flip_probability = 0.5f;
  std::vector<SsdRandomCropOperation> ssd_random_crop;  // empty: no crop
  // random_crop_image: the same crop with its one set of options (RandomCropImage's defaults:
  // min_object_covered 1, aspect 0.75..1.33, area 0.1..1, overlap_thresh 0.3, random_coef 0),
  // applied after ssd_random_crop when both are configured. Empty: none.
  std::vector<SsdRandomCropOperation> random_crop_image;
  // ssd_random_crop_fixed_aspect_ratio: after its ssd_random_crop, random_crop_to_aspect_ratio
  // to this width / height (0: none).
  float crop_to_aspect_ratio = 0.0f;
};

// keep_aspect_ratio_resizer: resize_to_range scales the image so that its shorter side is
// min_dimension, or its longer side max_dimension where the first would make it longer than that.
struct KeepAspectRatioResize {
  int min_dimension = 600;
  int max_dimension = 1024;
  // Every image is padded to max_dimension x max_dimension; otherwise a batch is padded to its
  // largest image (DetectionTask), and one image alone is not padded at all.
  bool pad_to_max_dimension = false;
  std::array<float, 3> pad_value{0.f, 0.f, 0.f};  // per_channel_pad_value, RGB in [0, 255]
};

struct DetectionInputOptions {
  // fixed_shape_resizer's size; with keep_aspect_ratio the sample buffer's, max_dimension square.
  int height = 300;
  int width = 300;
  std::optional<KeepAspectRatioResize> keep_aspect_ratio;
  bool channels_last = false;
  int64_t max_boxes = 100;                            // max_number_of_boxes: further boxes are dropped
  DetectionAugmentation augmentation;                 // training only
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // larger images are data errors (image.h)
  // The input readers' load_instance_masks (mask_type PNG_MASKS): the samples carry a "masks"
  // field, and a record with boxes but no image/object/mask is a data error.
  bool load_instance_masks = false;
};

// What the pipeline carries per sample besides the image, in this order:
//   "boxes"         float32 [max_boxes, 4]  ymin, xmin, ymax, xmax, normalised to the (augmented) network input
//   "classes"       int64 [max_boxes]       1-based label map ids
//   "is_crowd"      bool [max_boxes]        image/object/is_crowd: training leaves the box out,
//                                           COCO evaluation treats it as an ignore region
//   "num_boxes"     int64                   boxes before the zero padding
//   "image_id"      int64                   48 bits of a hash of image/source_id (of the image bytes
//                                           when there is none): the image in evaluation across workers
//   "original_size" int64 [2]               height, width of the record's image
//   "difficult"     bool [max_boxes]        image/object/difficult (PASCAL VOC metrics ignore the box)
//   "group_of"      bool [max_boxes]        image/object/group_of (Open Images metrics)
//   "image_labels"  bool [num_classes + 1]  image/class/label: [k] set where label k is verified
//   "image_size"    int64 [2]               height, width of the resized image, top-left in the
//                                           sample's buffer (the rest is padding); the boxes are
//                                           normalised to it
// and, with load_instance_masks (the second overload), last:
//   "masks"         bool [max_boxes, H, W]  mask i of box i, H x W = options.height x width (the
//                                           sample buffer's): flipped and cropped as the image,
//                                           resized to image_size by nearest neighbour (TF1's
//                                           resize_images: source pixel floor(dst * in / out)),
//                                           top-left like the image; false in the padding and for
//                                           the padded boxes. Memory: max_boxes * H * W bytes per
//                                           sample (100 boxes at 1024 x 1024: 100 MB), times the
//                                           batch and the prefetched batches.
std::vector<FieldSpec> detection_fields(int64_t max_boxes, int64_t num_classes);
std::vector<FieldSpec> detection_fields(const DetectionInputOptions& options, int64_t num_classes);
uint64_t detection_image_key(const DetectionExample& example);

// The detection fields of one sample, at fields[first...] of `out` (detection_fields' order).
struct DetectionTargets {
  float* boxes = nullptr;
  int64_t* classes = nullptr;
  bool* is_crowd = nullptr;
  int64_t* num_boxes = nullptr;
  int64_t* image_id = nullptr;
  int64_t* original_size = nullptr;
  bool* difficult = nullptr;  // null: not filled
  bool* group_of = nullptr;
  bool* image_labels = nullptr;
  int64_t* image_size = nullptr;
  int64_t num_classes = 0;  // image_labels has num_classes + 1 entries
  bool* masks = nullptr;    // [max_boxes, options.height, options.width]; null: not filled
};
// `masks`: the fields end with "masks" (detection_fields with load_instance_masks).
DetectionTargets detection_targets(const SampleOut& out, size_t first = 0, bool masks = false);

// The size a height x width image (after augmentation) is resized to: the fixed_shape_resizer's,
// or resize_to_range's (float32 and round-half-to-even, as TF computes it).
std::pair<int, int> resized_image_size(int height, int width, const DetectionInputOptions& options);

// Decodes, augments (when training), resizes and scales to [-1, 1] into `image`
// (3 * height * width floats, CHW or HWC; a smaller resized image lies top-left, the rest is
// the pad value), and fills `targets` (null: the image only). With load_instance_masks and
// targets->masks, the masks of the boxes kept go through the same flip and crops, then the
// nearest-neighbour resize; one that does not decode or differs in size from the image is a
// DataError naming `what` and image/object/mask. Returns the number of boxes.
int64_t preprocess_detection(const DetectionExample& example, const DetectionInputOptions& options, bool training,
                             std::mt19937_64& rng, float* image, const DetectionTargets* targets,
                             const std::string& what);

// Applies ssd_random_crop to boxes and chooses the window (exposed for tests): returns the crop
// and rewrites `boxes`/`classes` into the crop's frame (dropping the pruned ones).
CropWindow ssd_random_crop(int height, int width, const std::vector<SsdRandomCropOperation>& operations,
                           std::vector<Box>* boxes, std::vector<int64_t>* classes, std::mt19937_64& rng);

// random_crop_to_aspect_ratio: the largest crop of width / height `aspect_ratio` at a random
// offset; keeps the boxes of which at least overlap_thresh (0.3) is visible, clipped to it, and
// rewrites `boxes`/`index` into its frame.
CropWindow random_crop_to_aspect_ratio(int height, int width, float aspect_ratio, std::vector<Box>* boxes,
                                       std::vector<int64_t>* index, std::mt19937_64& rng);

// Draws each box (normalised) with its label (may be empty) onto `image` in `rgb`, for
// predict's annotated images and TensorBoard's eval images.
void draw_boxes(Image* image, const std::vector<Box>& boxes, const std::vector<std::string>& labels,
                const std::array<uint8_t, 3>& rgb);

}  // namespace orchard::data
