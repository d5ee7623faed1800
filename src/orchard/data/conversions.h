// The `orchard data` jobs as the command runs them: each converter run with the summary line it
// logs (what was written where, and what to do next), and the record listing of `data inspect`.
// cli/data_cmd.cc only declares the flags and calls these.
#pragma once

#include <cstdint>
#include <string>

#include "orchard/data/tools.h"
#include "orchard/detect/dataset_tools/coco.h"
#include "orchard/detect/dataset_tools/pets.h"
#include "orchard/detect/dataset_tools/voc.h"

namespace orchard::data {

void run_fashion_mnist(const FashionMnistOptions& options);
void run_image_folder(const ImageFolderOptions& options);
// `task`: detection (instances_*.json, `detection`'s options) or captioning (captions_*.json:
// `captions` with the shared fields taken from `detection`).
void run_coco(const std::string& task, const CocoConvertOptions& detection, CocoCaptionOptions captions);
void run_voc(const VocConvertOptions& options);
void run_pets(const PetsConvertOptions& options);

struct RecordInspectOptions {
  std::string pattern;  // a TFRecord file, directory or pattern
  int64_t limit = 0;    // records to print (0: all)
  bool skip_corrupt = false;
  std::string dump_images;  // also write each record's encoded image to DIR/<n>.<jpg|png>
};
// Each record's features as one JSON line on standard output.
void inspect_records(const RecordInspectOptions& options);

}  // namespace orchard::data
