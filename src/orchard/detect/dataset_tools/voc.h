// PASCAL VOC -> TF OD API detection records, as the OD API's
// dataset_tools/create_pascal_tf_record.py writes them, and the pieces the Oxford-IIIT Pets
// converter (data/pets.h) shares with it: the annotation xml (both datasets use VOC's schema),
// the label map and the record's key.
//
// A record: image/height, image/width (the xml's <size>, checked against the JPEG's header),
// image/filename and image/source_id (the xml's <filename>), image/key/sha256 (hex SHA-256 of
// the JPEG), image/encoded, image/format ("jpeg"), image/object/bbox/{xmin,ymin,xmax,ymax}
// (<bndbox> divided by the width and height, no 1-pixel shift: VOC's pixels are 1-based and the
// OD API divides them as they are), image/object/class/text (<name>), image/object/class/label
// (the label map's id of that name), image/object/difficult, image/object/truncated and
// image/object/view (<pose>).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace orchard::data {

// One <object> of an annotation xml.
struct VocObject {
  std::string name;
  std::string pose = "Unspecified";  // VOC's value for an object without a <pose>
  int64_t truncated = 0;
  bool difficult = false;
  bool has_box = false;                           // a <bndbox> is there
  double xmin = 0, ymin = 0, xmax = 0, ymax = 0;  // pixels, as written
};

struct VocAnnotation {
  std::string folder;  // <folder> (may be empty)
  std::string filename;
  int64_t width = 0, height = 0;  // <size>
  std::vector<VocObject> objects;
};

// Parses one annotation xml (<annotation> with <filename>, <size> and any number of <object>s).
// <difficult> and <truncated> default to 0 and <pose> to Unspecified when absent; a missing
// <filename>, <size>, object <name>, a <bndbox> without its four numbers or a field that is not
// a number is a DataError naming `path`, the object's index and the field.
VocAnnotation parse_voc_annotation(const std::string& xml, const std::string& path);

// The 20 PASCAL VOC classes in the order of the OD API's data/pascal_label_map.pbtxt (id = index + 1).
extern const std::vector<std::string> kPascalVocClasses;

// Class name -> id as label_map_util.get_label_map_dict reads a label map (the items' `name`).
std::map<std::string, int64_t> label_map_ids(const std::string& label_map_path);

// Lower-case hex SHA-256 (image/key/sha256).
std::string sha256_hex(const std::string& bytes);

struct VocConvertOptions {
  std::string data_dir;          // the VOCdevkit root: data_dir/<year>/{Annotations, ImageSets/Main, JPEGImages}
  std::string year = "VOC2007";  // VOC2007 | VOC2012 | merged (VOC2007, then VOC2012)
  std::string set = "train";     // train | val | trainval | test
  std::string annotations_dir = "Annotations";  // relative to data_dir/<year> (or absolute)
  std::string output_path;                      // one TFRecord file
  // Empty: the 20 PASCAL classes, written as pascal_label_map.pbtxt beside output_path (an
  // existing file there must hold the same bytes).
  std::string label_map_path;
  bool ignore_difficult_instances = false;
};

struct VocConvertResult {
  int64_t images = 0;
  int64_t boxes = 0;
  int64_t difficult_skipped = 0;  // with ignore_difficult_instances
  std::string label_map_path;     // the label map the labels come from
};

// Reads the image ids of ImageSets/Main/<set>.txt (or, where that file is absent, the
// aeroplane_<set>.txt create_pascal_tf_record.py reads: the same ids), each id's
// <annotations_dir>/<id>.xml and its image data_dir/<folder>/JPEGImages/<filename> (<folder> the
// xml's, the year where it has none), and writes one record per image in that order. Errors
// (DataError) name the file and field: a missing list, xml or image, an image that is not a
// JPEG or not of the xml's size, a box outside the image, a class not in the label map.
VocConvertResult convert_voc(const VocConvertOptions& options);

}  // namespace orchard::data
