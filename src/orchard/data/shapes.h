// The synthetic "shapes" data set behind `orchard data shapes`: coloured circles, squares
// and triangles on a noisy grey background. One scene generator serves every task; a
// task's writer only chooses what to record of a Scene: multi-label (which kinds and
// colours appear), detection (the boxes) or captioning (sentences).
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchard/data/image.h"

namespace orchard::data {

constexpr std::array<const char*, 3> kShapeKinds = {"circle", "square", "triangle"};
constexpr std::array<const char*, 3> kShapeColours = {"red", "green", "blue"};

struct ShapeObject {
  int kind = 0;    // index into kShapeKinds
  int colour = 0;  // index into kShapeColours
  // The tight box of the drawn shape, normalised to [0, 1] by the image sides; a pixel
  // (row r, column c) covers [r, r + 1) x [c, c + 1) before normalisation. Triangles
  // point up: apex at the top centre of the box, base along its bottom edge.
  float ymin = 0, xmin = 0, ymax = 0, xmax = 0;
};

struct SceneOptions {
  int image_size = 64;  // image_size x image_size pixels
  int image_width = 0;  // > 0: image_size x image_width pixels instead
  int min_objects = 1;
  int max_objects = 4;
  float min_size = 0.2f;  // object side as a fraction of the shorter image side
  float max_size = 0.45f;
};

struct Scene {
  int height = 0;
  int width = 0;
  // In drawing order: a later object may cover part of an earlier one, but never more
  // than half of an earlier object's box (counting all later objects together).
  std::vector<ShapeObject> objects;
  Image image;  // [height, width, 3] RGB
  // [height, width], row-major: i + 1 where object i is the one visible (drawn last there), 0 on
  // the background. An object's visible pixels are its instance mask (as COCO annotates the
  // visible part); its box stays the tight box of the whole drawn shape.
  std::vector<uint8_t> object_index;
};

// Draws one scene. Uses only rng() itself (no std:: distributions, whose results differ
// between standard libraries), so a seed gives the same pixels everywhere. Throws Error
// for invalid options, or when min_objects cannot be placed without covering each other.
Scene make_scene(std::mt19937_64& rng, const SceneOptions& options);

// Object `object`'s visible pixels: [height, width] row-major, 1 inside, 0 elsewhere.
std::vector<uint8_t> shapes_object_mask(const Scene& scene, size_t object);

// Multi-label classes: the kinds, then the colours (circle, square, triangle, red, green, blue).
std::vector<std::string> shapes_multilabel_classes();
// 1.0 for each kind and each colour present in the scene, 0.0 otherwise; in class order.
std::vector<float> shapes_multilabel(const Scene& scene);

// Five reference captions of a scene with one or two objects, as COCO has five per image:
// "a red circle", "there is a red circle", ... or, for two, their vertical relation ("a red
// circle above a blue square", "a blue square below a red circle", ...) when they are further
// apart vertically than horizontally, else flip-invariant words ("a red circle next to a
// blue square", ...), since training flips images left-right.
std::vector<std::string> shapes_captions(const Scene& scene);

struct ShapesOptions {
  std::string out_dir;
  std::string task = "multilabel";  // multilabel | detection | captioning
  int64_t num_train = 2000;
  int64_t num_validation = 500;
  int image_size = 64;
  int image_width = 0;  // > 0: image_size high, image_width wide
  int train_shards = 4;
  int validation_shards = 1;
  uint64_t seed = 0;
  std::string format = "jpeg";  // jpeg (quality 95) | png
  // Objects per image; -1 = the task's default (multilabel and detection 1-4, captioning 2).
  // Captions describe one or two objects.
  int min_objects = -1;
  int max_objects = -1;
  // Detection: each object's visible pixels as its instance mask (image/object/mask, one 0/1
  // single-channel PNG per box, as create_coco_tf_record.py --include_masks writes them).
  bool include_masks = false;
};

// The scene of record `index` of `split` ("train" or "validation"). Every record has its
// own RNG, seeded from (seed, split, index), so records can be generated in parallel and
// any one regenerated alone.
Scene shapes_scene(const ShapesOptions& options, const std::string& split, int64_t index);

// Writes train-0000i-of-0000N and validation-... shards plus labels.txt (one class name per
// line, in label order) to out_dir. Multi-label records follow Tencent ML-Images'
// tf.train.Example schema: width, height (int64), image (encoded bytes), label (bytes: the
// class_num float32 multi-hot values, little-endian, as tf.decode_raw(label, tf.float32)
// reads them), name ("shapes-<split>-<index>", index zero-padded to 6 digits).
// Detection records follow the TF OD API schema (data/detection.h): one box per shape,
// class = kind + 1 (circle 1, square 2, triangle 3), source_id = the name, with include_masks
// each object's mask (shapes_object_mask); label_map.pbtxt replaces labels.txt.
// Captioning records follow im2txt's SequenceExample schema (data/caption.h): scenes of two
// objects by default (sides 0.3-0.45 of the image), one record per (image, caption) pair with the five shapes_captions,
// image_id = index + 1, records in a seeded random order; word_counts.txt (from the training captions, min_word_count
// 4) replaces labels.txt. The output is a pure function of the options (byte-identical for one build: the image
// encoders and OpenCV are part of it). Returns {train count, validation count}.
std::pair<int64_t, int64_t> write_shapes_dataset(const ShapesOptions& options);

}  // namespace orchard::data
