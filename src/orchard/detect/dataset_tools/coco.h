// COCO instances json + images -> TF OD API detection records (create_coco_tf_record.py):
// boxes normalised [ymin, xmin, ymax, xmax], labels = COCO category ids (so the label map
// and num_classes follow the json's categories, 90 for COCO 2017), crowd regions marked with
// image/object/is_crowd, plus label_map.pbtxt. With include_masks, each kept annotation's
// segmentation becomes its instance mask as create_coco_tf_record.py --include_masks makes it
// (pycocotools' frPyObjects, merge, decode): polygons rasterised and merged, an RLE (`counts` a
// list, uncompressed, as crowd regions have it, or COCO's compressed string) decoded; written
// to image/object/mask as one single-channel 0/1 PNG of the image's size per box.
#pragma once

#include <cstdint>
#include <string>

namespace orchard::data {

struct CocoConvertOptions {
  std::string annotations;  // instances_*.json
  std::string image_dir;    // where the json's file_name entries are
  std::string out_dir;
  std::string prefix = "train";  // shard names <prefix>-00000-of-0000N
  int num_shards = 8;
  int64_t limit = 0;  // > 0: only the first N images (tests, smoke runs)
  bool include_masks = false;
};

struct CocoConvertResult {
  int64_t images = 0;
  int64_t boxes = 0;
  int64_t crowd = 0;
  int64_t skipped_boxes = 0;  // zero-area or outside the image after clipping
  int max_category_id = 0;
};

// Streams images into shards of contiguous ranges (one image read at a time). Errors name the
// json path (and the annotation or image) that is wrong: with include_masks also a missing or
// malformed segmentation, or an RLE whose size is not the image's.
CocoConvertResult convert_coco_detection(const CocoConvertOptions& options);

// COCO captions json + images -> im2txt SequenceExample records (build_mscoco_data.py): one
// record per (image, caption) in a seeded random order, captions tokenised (data/caption.h),
// and word_counts.txt built from these captions (min_word_count) unless `vocab_file` is given
// (convert validation data with the training vocabulary).
struct CocoCaptionOptions {
  std::string annotations;  // captions_*.json
  std::string image_dir;
  std::string out_dir;
  std::string prefix = "train";
  int num_shards = 8;
  int64_t limit = 0;  // > 0: only the first N images
  std::string vocab_file;
  int64_t min_word_count = 4;
  uint64_t seed = 12345;  // im2txt's random.seed(12345)
};

struct CocoCaptionResult {
  int64_t images = 0;
  int64_t captions = 0;
  int64_t vocab_size = 0;     // with <UNK>
  int64_t unknown_words = 0;  // caption words mapped to <UNK>
};

CocoCaptionResult convert_coco_captions(const CocoCaptionOptions& options);

}  // namespace orchard::data
